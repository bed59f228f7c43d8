//! Phase 5, `fetch`: the request the origin receives, sending it, and the response head as the
//! client and the store will see it.
//!
//! A request body is read ahead (up to `limits.request_body_buffer`) before the origin is
//! contacted, so a malformed or cut-off body is the client's 400 and never costs a pooled origin
//! connection; a longer body streams, and if it breaks off later the failure is still named as
//! the client's.

use super::check::Target;
use super::outcome::{CacheStatus, Fwd};
use crate::body::{empty, full, text, BoxError, ProxyBody};
use crate::origin::OriginError;
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Why a request got no response from the origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchError {
    /// The origin failed; counted by kind, answered 502 or 504.
    Origin(OriginError),
    /// The client's request body was malformed or broke off (400; not the origin's fault).
    ClientBody,
}

impl FetchError {
    /// The response the client gets, and its Cache-Status.
    pub fn response(self) -> (Response<ProxyBody>, CacheStatus) {
        let (status, message, detail) = match self {
            FetchError::ClientBody => (
                StatusCode::BAD_REQUEST,
                "the request body is malformed or was cut off",
                "bad-request-body",
            ),
            FetchError::Origin(OriginError::Timeout) => (
                StatusCode::GATEWAY_TIMEOUT,
                "origin timed out",
                "origin-timeout",
            ),
            FetchError::Origin(OriginError::HeadersTooLarge) => (
                StatusCode::BAD_GATEWAY,
                "origin response headers too large",
                "origin-headers-too-large",
            ),
            FetchError::Origin(OriginError::Connect) => (
                StatusCode::BAD_GATEWAY,
                "origin unreachable",
                "origin-connect",
            ),
            FetchError::Origin(OriginError::Body) => (
                StatusCode::BAD_GATEWAY,
                "the origin's response body broke off, stalled or came short",
                "origin-body",
            ),
            FetchError::Origin(OriginError::Tls) => (
                StatusCode::BAD_GATEWAY,
                "origin TLS failed (its certificate did not verify, or the handshake failed)",
                "origin-tls",
            ),
            FetchError::Origin(_) => (
                StatusCode::BAD_GATEWAY,
                "origin unreachable",
                "origin-other",
            ),
        };
        let mut r = text(status, format!("{message}\n"));
        if self == FetchError::ClientBody {
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        (r, CacheStatus::forwarded(Fwd::Miss, Some(detail)))
    }
}

/// A request body as it goes to the origin. `failed` is set when the client's part of it broke.
pub struct Upload {
    body: ProxyBody,
    failed: Arc<AtomicBool>,
}

impl Upload {
    /// No body (GET, HEAD, and any request whose body ended with its head).
    pub fn none() -> Upload {
        Upload {
            body: empty(),
            failed: Arc::default(),
        }
    }

    /// Reads up to `ahead` bytes of `body` (each wait bounded by `wait`) before anything goes to
    /// the origin; the rest, if any, streams behind them.
    pub async fn read_ahead(
        mut body: Incoming,
        ahead: usize,
        wait: Duration,
    ) -> Result<Upload, FetchError> {
        let len_hint = body.size_hint().exact();
        let mut prefix = BytesMut::new();
        loop {
            if body.is_end_stream() {
                return Ok(Upload {
                    body: full(prefix.freeze()),
                    failed: Arc::default(),
                });
            }
            if prefix.len() >= ahead {
                break;
            }
            match tokio::time::timeout(wait, body.frame()).await {
                Ok(None) => {
                    return Ok(Upload {
                        body: full(prefix.freeze()),
                        failed: Arc::default(),
                    })
                }
                Ok(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        prefix.extend_from_slice(data);
                    }
                }
                Ok(Some(Err(_))) | Err(_) => return Err(FetchError::ClientBody),
            }
        }
        let failed = Arc::new(AtomicBool::new(false));
        let body = Streaming {
            prefix: Some(prefix.freeze()),
            rest: body,
            failed: Arc::clone(&failed),
            len: len_hint,
        };
        Ok(Upload {
            body: body.boxed(),
            failed,
        })
    }

    /// A flag set if the client's body breaks off while it streams.
    pub fn failed(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.failed)
    }

    /// The body to send.
    pub fn into_body(self) -> ProxyBody {
        self.body
    }
}

/// A request body: what was read ahead, then the rest as it arrives.
struct Streaming {
    prefix: Option<Bytes>,
    rest: Incoming,
    failed: Arc<AtomicBool>,
    len: Option<u64>,
}

impl Body for Streaming {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(p) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(p))));
        }
        match Pin::new(&mut self.rest).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                self.failed.store(true, Ordering::Relaxed);
                Poll::Ready(Some(Err(Box::new(e))))
            }
            other => other.map(|f| f.map(|r| r.map_err(BoxError::from))),
        }
    }

    fn size_hint(&self) -> SizeHint {
        self.len
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

/// The request sent to `target`'s origin: `headers` cut to what may be forwarded
/// ([`forwardable`](super::check::forwardable) with the `forwarded` allow-list), `Host` set to the
/// normalised host (the one the key and the route used), `X-Forwarded-For` and `Via` added. On GET
/// and HEAD the client's own `X-Forwarded-For` is not forwarded (unless allow-listed), so the
/// origin sees only the client's address.
pub fn upstream_request(
    method: Method,
    mut headers: HeaderMap,
    target: &Target,
    client: IpAddr,
    body: ProxyBody,
    forwarded: &[http::HeaderName],
) -> Result<Request<ProxyBody>, http::Error> {
    super::check::forwardable(&method, &mut headers, forwarded);
    // The client's own Host is kept when it is already the normalised one (the usual case):
    // no copy of it.
    let normalised = headers
        .get(header::HOST)
        .is_some_and(|v| v.as_bytes() == target.host.as_str().as_bytes());
    if !normalised {
        headers.insert(header::HOST, HeaderValue::from_str(target.host.as_str())?);
    }
    let forwarded_for = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prev) => HeaderValue::from_str(&format!("{prev}, {client}"))?,
        None => ip_value(client),
    };
    headers.insert(X_FORWARDED_FOR, forwarded_for);
    headers.append(header::VIA, HeaderValue::from_static("1.1 secondhit"));
    let mut out = Request::new(body);
    *out.method_mut() = method;
    *out.uri_mut() = Uri::from(target.path_and_query.clone());
    *out.headers_mut() = headers;
    Ok(out)
}

const X_FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");

/// An address as a field value; IPv4 (every request on most edges) without the formatting
/// machinery.
fn ip_value(ip: IpAddr) -> HeaderValue {
    let IpAddr::V4(v4) = ip else {
        return HeaderValue::from_str(&ip.to_string()).unwrap_or(HeaderValue::from_static("-"));
    };
    let mut out = [0u8; 15];
    let mut n = 0;
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out[n] = b'.';
            n += 1;
        }
        if octet >= 100 {
            out[n] = b'0' + octet / 100;
            n += 1;
        }
        if octet >= 10 {
            out[n] = b'0' + octet / 10 % 10;
            n += 1;
        }
        out[n] = b'0' + octet % 10;
        n += 1;
    }
    HeaderValue::from_bytes(&out[..n]).unwrap_or(HeaderValue::from_static("-"))
}

/// Makes an origin response head fit to forward and returns the body length to expect: hop-by-hop
/// fields removed; a `Content-Length` beside `Transfer-Encoding` dropped (RFC 9112 §6.3: the
/// chunked framing wins, so the length was wrong); none on a 204 (RFC 9110 §8.6); no body at all
/// for HEAD, 1xx, 204 and 304.
pub fn response_head(
    status: StatusCode,
    headers: &mut HeaderMap,
    head_request: bool,
) -> Option<u64> {
    let chunked = headers.contains_key(header::TRANSFER_ENCODING);
    crate::http_cache::strip_hop_by_hop(headers);
    if chunked || status == StatusCode::NO_CONTENT || status.is_informational() {
        headers.remove(header::CONTENT_LENGTH);
    }
    let bodiless = head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    if bodiless {
        return Some(0);
    }
    content_length(headers)
}

/// The `Content-Length` of `headers`, if it is one number (RFC 9110 §8.6: digits only, spaces
/// and tabs around them allowed).
pub fn content_length(headers: &HeaderMap) -> Option<u64> {
    crate::origin::h1::decimal(headers.get(header::CONTENT_LENGTH)?.as_bytes().trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        for ip in [
            "0.0.0.0",
            "127.0.0.1",
            "10.20.100.255",
            "192.168.9.99",
            "255.255.255.255",
            "::1",
            "2001:db8::8:800:200c:417a",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_value(ip).to_str().unwrap(), ip.to_string());
        }
    }

    #[test]
    fn content_lengths_are_digits_only() {
        let len = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_LENGTH, HeaderValue::from_str(v).unwrap());
            content_length(&h)
        };
        assert_eq!(len("1024"), Some(1024));
        assert_eq!(len(" 7\t"), Some(7));
        assert_eq!(len("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            " ",
            "+5",
            "-1",
            "1 2",
            "0x10",
            "5,5",
            "18446744073709551616",
        ] {
            assert_eq!(len(bad), None, "{bad:?}");
        }
        assert_eq!(content_length(&HeaderMap::new()), None);
    }

    #[test]
    fn response_heads_lose_wrong_lengths() {
        let mut h = HeaderMap::new();
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("100"));
        assert_eq!(response_head(StatusCode::OK, &mut h, false), None);
        assert!(h.is_empty(), "{h:?}");
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("5"));
        assert_eq!(
            response_head(StatusCode::NO_CONTENT, &mut h, false),
            Some(0)
        );
        assert!(!h.contains_key(header::CONTENT_LENGTH));
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("1000"));
        // A 304's Content-Length is the length of the 200 it stands for (RFC 9110 §8.6): kept.
        assert_eq!(
            response_head(StatusCode::NOT_MODIFIED, &mut h, false),
            Some(0)
        );
        assert_eq!(h[header::CONTENT_LENGTH], "1000");
        assert_eq!(response_head(StatusCode::OK, &mut h, true), Some(0));
        assert_eq!(response_head(StatusCode::OK, &mut h, false), Some(1000));
    }
}
