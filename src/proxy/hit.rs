//! Answering from a stored object: the whole body, a `304 Not Modified` to a conditional
//! request it satisfies, a single byte range (206 / 416), or headers only for HEAD. A function of
//! the object, the request and `now`.

use super::cached::CachedObject;
use super::outcome::CacheStatus;
use crate::body::{empty, full, text, ProxyBody};
use crate::http_cache::{not_modified, range_answer, RangeAnswer};
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

/// Whether a conditional `request` is answered 304 by `obj`. The validators are looked up only
/// for a conditional request (each is a search of the stored fields).
fn is_not_modified(obj: &CachedObject, request: &HeaderMap) -> bool {
    if !request.contains_key(header::IF_NONE_MATCH)
        && !request.contains_key(header::IF_MODIFIED_SINCE)
    {
        return false;
    }
    // RFC 9111 §4.3.2: without a Last-Modified, If-Modified-Since is judged against the stored
    // response's Date.
    let modified = obj
        .headers
        .get(&header::LAST_MODIFIED)
        .or_else(|| obj.headers.get(&header::DATE));
    not_modified(
        request,
        obj.headers.get(&header::ETAG).as_ref(),
        modified.as_ref(),
    )
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
    if obj.status == StatusCode::OK && is_not_modified(obj, request) {
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
    let len = obj.body.len() as u64;
    let range = if obj.status == StatusCode::OK {
        range_answer(request.get(header::RANGE), len)
    } else {
        RangeAnswer::Full
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
