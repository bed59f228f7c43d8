//! Answering from a stored object: the whole body, a `412 Precondition Failed` or a
//! `304 Not Modified` to a conditional request, a single byte range (206 / 416) when `If-Range`
//! allows it, or headers only for HEAD. A function of the object, the request and `now`; every
//! answer from a stored object (fresh, stale, from disk, a coalesced follower's) comes here.

use super::cached::CachedObject;
use super::outcome::CacheStatus;
use crate::body::{empty, full, text, ProxyBody};
use crate::http_cache::{conditional_answer, is_conditional, Conditional, RangeAnswer, Validators};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};
use std::time::Duration;

/// The headers a 304 carries from the stored response (RFC 9110 §15.4.5).
const NOT_MODIFIED_HEADERS: [header::HeaderName; 8] = [
    header::ETAG,
    header::CACHE_CONTROL,
    header::EXPIRES,
    header::DATE,
    header::VARY,
    header::LAST_MODIFIED,
    header::CONTENT_LOCATION,
    header::AGE,
];

/// What `obj` answers to `request`'s preconditions and range (RFC 9110 §13.2.2). The
/// validators are looked up only for a request that carries a condition or a range (each is a
/// search of the stored fields).
fn answer(obj: &CachedObject, method: &Method, request: &HeaderMap) -> Conditional {
    if !is_conditional(request) {
        return Conditional::Send(RangeAnswer::Full);
    }
    let stored = Validators {
        etag: obj.headers.get(&header::ETAG),
        last_modified: obj.headers.get(&header::LAST_MODIFIED),
        date: obj.headers.get(&header::DATE),
    };
    conditional_answer(method, obj.status, request, &stored, obj.body.len() as u64)
}

/// The response to `method` with `request` headers from `obj` at `now`, and its Cache-Status.
pub fn serve(
    obj: &CachedObject,
    method: &Method,
    request: &HeaderMap,
    now: Duration,
) -> (Response<ProxyBody>, CacheStatus) {
    let status = CacheStatus::hit(obj.ttl(now));
    let age = HeaderValue::from(obj.age(now).as_secs());
    let range = match answer(obj, method, request) {
        Conditional::Send(range) => range,
        // The client's condition fails on the stored representation: answered here, as the
        // origin would answer for it (Cache-Status says it was a hit).
        Conditional::PreconditionFailed => {
            return (
                text(StatusCode::PRECONDITION_FAILED, "precondition failed\n"),
                status,
            );
        }
        Conditional::NotModified => {
            let mut r = Response::new(empty());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            let h = r.headers_mut();
            for name in NOT_MODIFIED_HEADERS {
                if let Some(v) = obj.headers.get(&name) {
                    h.insert(name, v);
                }
            }
            h.insert(header::AGE, age);
            return (r, status);
        }
    };
    let mut headers = obj.headers.to_map();
    headers.insert(header::AGE, age);
    let (code, body) = match range {
        RangeAnswer::Full => (obj.status, obj.body.clone()),
        RangeAnswer::Partial {
            start,
            end,
            content_range,
        } => {
            headers.insert(header::CONTENT_RANGE, content_range);
            (
                StatusCode::PARTIAL_CONTENT,
                obj.body.slice(start as usize..=end as usize),
            )
        }
        RangeAnswer::Unsatisfiable { content_range } => {
            let mut r = text(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable\n");
            r.headers_mut().insert(header::CONTENT_RANGE, content_range);
            return (r, status);
        }
    };
    // The stored field usually says it already (a 200 in full, one field): no new value then.
    let mut lengths = headers.get_all(header::CONTENT_LENGTH).iter();
    let stated = match (lengths.next(), lengths.next()) {
        (Some(v), None) => {
            crate::origin::h1::decimal(v.as_bytes().trim_ascii()) == Some(body.len() as u64)
        }
        _ => false,
    };
    if code != StatusCode::NO_CONTENT && !stated {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let mut r = Response::new(if method == Method::HEAD {
        empty()
    } else {
        full(body)
    });
    *r.status_mut() = code;
    *r.headers_mut() = headers;
    (r, status)
}
