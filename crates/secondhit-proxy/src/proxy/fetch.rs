//! Phase 5, `fetch`: the request the origin receives, sending it, and the response head as the
//! client and the store will see it.
//!
//! A request body is read ahead (up to `limits.request_body_buffer`) before the origin is
//! contacted, so a malformed or cut-off body is the client's 400 and never costs a pooled origin
//! connection; a longer body streams, and if it breaks off later the failure is still named as
//! the client's.

use super::check::{Forwarding, Target};
use super::outcome::{CacheStatus, Fwd};
use crate::body::{empty, full, text, BoxError, ProxyBody};
use crate::origin::h1::{write_field, write_request_line, LeanRequest};
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
    /// The client's request body stopped coming for the body timeout (408).
    ClientBodyTimeout,
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
            FetchError::ClientBodyTimeout => (
                StatusCode::REQUEST_TIMEOUT,
                "the request body stopped coming",
                "request-body-timeout",
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
            FetchError::Origin(OriginError::Unavailable) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "no origin server is up",
                "origin-down",
            ),
            FetchError::Origin(_) => (
                StatusCode::BAD_GATEWAY,
                "origin unreachable",
                "origin-other",
            ),
        };
        let mut r = text(status, format!("{message}\n"));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if matches!(self, FetchError::ClientBody | FetchError::ClientBodyTimeout) {
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
                Ok(Some(Err(_))) => return Err(FetchError::ClientBody),
                Err(_) => return Err(FetchError::ClientBodyTimeout),
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

/// The head of a bodyless request (GET or HEAD) as its origin receives it, written straight from
/// the client's request by the lean exchange: the request [`upstream_request`] builds (the same
/// fields, rules and values), without copying the client's fields into a new map and growing it
/// for `X-Forwarded-For` and `Via`, and without a removal per field dropped: every miss takes
/// this way, so its cost is per request. The fields keep the client's order;
/// `Host` and `X-Forwarded-For` take the place of the client's, or come last, and `Via` comes
/// last.
pub struct OriginHead<'a> {
    /// GET or HEAD.
    pub method: &'a Method,
    /// The client's fields, hop-by-hop ones already removed.
    pub headers: &'a HeaderMap,
    /// Where it goes: the path and query, and the normalised host.
    pub target: &'a Target,
    /// The client's address, for `X-Forwarded-For`.
    pub client: IpAddr,
    /// The forwarded fields (`cache.forwarded_request_headers`).
    pub forwarded: &'a [http::HeaderName],
}

impl LeanRequest for OriginHead<'_> {
    fn write_head(&self, out: &mut Vec<u8>) {
        let rule = Forwarding::new(self.method, self.forwarded);
        write_request_line(self.method, self.target.path_and_query.as_str(), out);
        let host = self.target.host.as_str().as_bytes();
        let (mut host_written, mut forwarded_for_written) = (false, false);
        for (name, value) in self.headers {
            if !rule.keeps(name) {
                continue;
            }
            if name == header::HOST {
                // One Host (`check` refuses two), the normalised one.
                if !host_written {
                    write_field(b"host", host, out);
                    host_written = true;
                }
            } else if name == X_FORWARDED_FOR {
                // The first value, if text, then the client; the others are replaced.
                if !forwarded_for_written {
                    self.write_forwarded_for(value.to_str().ok(), out);
                    forwarded_for_written = true;
                }
            } else {
                write_field(name.as_str().as_bytes(), value.as_bytes(), out);
            }
        }
        if !host_written {
            write_field(b"host", host, out);
        }
        if !forwarded_for_written {
            self.write_forwarded_for(None, out);
        }
        write_field(b"via", b"1.1 secondhit", out);
        out.extend_from_slice(b"\r\n");
    }

    fn is_head(&self) -> bool {
        self.method == Method::HEAD
    }
}

impl OriginHead<'_> {
    fn write_forwarded_for(&self, earlier: Option<&str>, out: &mut Vec<u8>) {
        out.extend_from_slice(b"x-forwarded-for: ");
        if let Some(earlier) = earlier {
            out.extend_from_slice(earlier.as_bytes());
            out.extend_from_slice(b", ");
        }
        write_ip(self.client, out);
        out.extend_from_slice(b"\r\n");
    }
}

/// An address as a field value.
fn ip_value(ip: IpAddr) -> HeaderValue {
    let mut out = Vec::with_capacity(15);
    write_ip(ip, &mut out);
    HeaderValue::from_maybe_shared(Bytes::from(out)).unwrap_or(HeaderValue::from_static("-"))
}

/// Appends an address as `Display` writes it; IPv4 (every request on most edges) without the
/// formatting machinery.
fn write_ip(ip: IpAddr, out: &mut Vec<u8>) {
    let IpAddr::V4(v4) = ip else {
        use std::io::Write as _;
        let _ = write!(out, "{ip}"); // a Vec takes every byte
        return;
    };
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push(b'.');
        }
        if octet >= 100 {
            out.push(b'0' + octet / 100);
        }
        if octet >= 10 {
            out.push(b'0' + octet / 10 % 10);
        }
        out.push(b'0' + octet % 10);
    }
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
    use crate::config::Config;
    use crate::origin::Origins;
    use rand::{RngExt, SeedableRng};
    use std::collections::BTreeMap;

    /// A request head as written: the request line, and each field's values in order by name.
    type Written = (String, BTreeMap<String, Vec<Vec<u8>>>);

    fn read_head(bytes: &[u8]) -> Written {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut r = httparse::Request::new(&mut fields);
        assert!(matches!(r.parse(bytes), Ok(httparse::Status::Complete(n)) if n == bytes.len()));
        let line = format!("{} {}", r.method.unwrap(), r.path.unwrap());
        let mut by_name: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        for f in r.headers.iter() {
            by_name
                .entry(f.name.to_ascii_lowercase())
                .or_default()
                .push(f.value.to_vec());
        }
        (line, by_name)
    }

    #[test]
    fn the_written_origin_head_is_the_request_upstream_request_builds() {
        // Every combination of method, allow-list, client address and Host form, over random
        // sets of fields (forwarded or not, overrides spelt both ways, repeated, obs-text).
        let config = Config::from_toml("origin = \"http://127.0.0.1:1000\"").unwrap();
        let origins = Origins::new(&config, None).unwrap();
        let rules = super::super::check::Rules {
            scheme: "http",
            default_port: 80,
            max_uri: 1000,
        };
        let names = [
            "accept",
            "accept-encoding",
            "user-agent",
            "cookie",
            "via",
            "x-forwarded-for",
            "x-forwarded-host",
            "x_forwarded_host",
            "x-tag",
            "authorization",
            "range",
            "if-none-match",
            "content-length",
        ];
        let values: [&[u8]; 6] = [b"a", b"1.2.3.4", b"gzip, br", b"", b"caf\xe9", b"0"];
        let allow_lists: [Vec<http::HeaderName>; 4] = [
            config.cache.forwarded_request_headers.clone(),
            Vec::new(),
            vec![http::HeaderName::from_static("*")],
            ["x-forwarded-for", "via", "x-tag"]
                .map(http::HeaderName::from_static)
                .to_vec(),
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let mut compared = 0;
        for round in 0..300 {
            let mut fields = Vec::new();
            for _ in 0..rng.random_range(0..9) {
                let name = names[rng.random_range(0..names.len())];
                let value = values[rng.random_range(0..values.len())];
                fields.push((name, value));
            }
            for method in [Method::GET, Method::HEAD] {
                for (host_form, host) in [(0, "a.test"), (1, "A.Test.:80"), (2, "")] {
                    let mut b = Request::builder().method(method.clone());
                    b = if host_form == 2 {
                        // HTTP/2: the authority in the URI, no Host field.
                        b.version(http::Version::HTTP_2).uri("http://a.test/p?q=1")
                    } else {
                        b.uri("/p?q=1").header(header::HOST, host)
                    };
                    for (name, value) in &fields {
                        b = b.header(*name, HeaderValue::from_bytes(value).unwrap());
                    }
                    let (parts, ()) = b.body(()).unwrap().into_parts();
                    let target = super::super::check::check(&parts, true, &rules, &origins)
                        .expect("a valid request");
                    let client: IpAddr = if round % 2 == 0 {
                        "10.0.0.7"
                    } else {
                        "2001:db8::1"
                    }
                    .parse()
                    .unwrap();
                    for forwarded in &allow_lists {
                        let head = OriginHead {
                            method: &method,
                            headers: &parts.headers,
                            target: &target,
                            client,
                            forwarded,
                        };
                        let mut direct = Vec::new();
                        head.write_head(&mut direct);
                        let built = upstream_request(
                            method.clone(),
                            parts.headers.clone(),
                            &target,
                            client,
                            empty(),
                            forwarded,
                        )
                        .unwrap();
                        let mut encoded = Vec::new();
                        built.write_head(&mut encoded);
                        assert_eq!(
                            read_head(&direct),
                            read_head(&encoded),
                            "{method} {fields:?} host {host:?} forwarded {forwarded:?}"
                        );
                        assert_eq!(head.is_head(), method == Method::HEAD);
                        compared += 1;
                    }
                }
            }
        }
        assert_eq!(compared, 300 * 2 * 3 * 4);
    }

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
