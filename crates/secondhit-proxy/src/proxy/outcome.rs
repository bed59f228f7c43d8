//! What happened to a request, as values: the [`Outcome`] (`X-Cache`, metric label, log field),
//! the RFC 9211 [`CacheStatus`] it is rendered into, and the [`Refusal`]s the proxy answers
//! itself before any origin contact. Every string a client, a metric or a log sees comes from
//! here.

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use super::authority::AuthorityError;
use crate::body::{text, ProxyBody};

/// The outcome of a request, as sent in `X-Cache`, used as a metric label and a log field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Served from the cache.
    Hit,
    /// Fetched from the origin and stored.
    Miss,
    /// Fetched from the origin, cacheable, not stored: the admission policy said not yet.
    Deferred,
    /// Not cacheable (request or response): forwarded, never stored.
    Bypass,
    /// The proxy answered itself: the origin failed (502, 504) or the request was refused
    /// (400, 405, 414, 421).
    Error,
    /// Served from the cache after the origin confirmed it (a conditional request answered
    /// 304): the stored body, refreshed headers.
    Revalidated,
    /// Served stale from the cache: while it is refreshed in the background
    /// (`stale-while-revalidate`), or because the origin failed (`stale-if-error`).
    Stale,
}

impl Outcome {
    /// Every outcome, for metrics.
    pub const ALL: [Outcome; 7] = [
        Outcome::Hit,
        Outcome::Miss,
        Outcome::Deferred,
        Outcome::Bypass,
        Outcome::Error,
        Outcome::Revalidated,
        Outcome::Stale,
    ];

    /// `HIT`, `MISS`, `DEFERRED`, `BYPASS`, `ERROR`, `REVALIDATED` or `STALE`: the `X-Cache`
    /// value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Hit => "HIT",
            Outcome::Miss => "MISS",
            Outcome::Deferred => "DEFERRED",
            Outcome::Bypass => "BYPASS",
            Outcome::Error => "ERROR",
            Outcome::Revalidated => "REVALIDATED",
            Outcome::Stale => "STALE",
        }
    }

    /// Index into per-outcome tables.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Lower-case label for metrics and logs.
    pub const fn label(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Deferred => "deferred",
            Outcome::Bypass => "bypass",
            Outcome::Error => "error",
            Outcome::Revalidated => "revalidated",
            Outcome::Stale => "stale",
        }
    }
}

/// Why a request went to the origin: RFC 9211 §2.2's `fwd` values that this cache uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fwd {
    /// The cache was not used (the request or the proxy's rules bypass it).
    Bypass,
    /// The cache had no response for the URI.
    UriMiss,
    /// The request went to the origin without a cache decision (an origin failure before any).
    Miss,
    /// The cache had a stale response (revalidation).
    Stale,
    /// The cache had part of the response (some slices of a sliced object) and asked the
    /// origin for the rest.
    Partial,
}

impl Fwd {
    /// The token after `fwd=`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Fwd::Bypass => "bypass",
            Fwd::UriMiss => "uri-miss",
            Fwd::Miss => "miss",
            Fwd::Stale => "stale",
            Fwd::Partial => "partial",
        }
    }
}

/// One `Cache-Status` entry (RFC 9211) for this cache, as a value; [`CacheStatus::header`]
/// renders it as `secondhit; hit; ttl=59` or `secondhit; fwd=uri-miss; stored`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStatus {
    /// Served from the cache.
    pub hit: bool,
    /// Why it was forwarded, when it was.
    pub fwd: Option<Fwd>,
    /// The status the origin answered a forwarded request with, when it differs from the one
    /// sent to the client (a revalidation's 304).
    pub fwd_status: Option<u16>,
    /// The response was stored.
    pub stored: bool,
    /// A token saying more (the reason it was not stored, `collapsed`, ...).
    pub detail: Option<&'static str>,
    /// Seconds of freshness left (hits); negative once stale (RFC 9211 §2.4).
    pub ttl: Option<i64>,
}

impl CacheStatus {
    /// A hit with `ttl` seconds of freshness left (negative: stale by that much).
    pub fn hit(ttl: i64) -> Self {
        CacheStatus {
            hit: true,
            ttl: Some(ttl),
            ..Self::default()
        }
    }

    /// Forwarded for `fwd`, with a detail.
    pub fn forwarded(fwd: Fwd, detail: Option<&'static str>) -> Self {
        CacheStatus {
            fwd: Some(fwd),
            detail,
            ..Self::default()
        }
    }

    /// The same with a detail.
    pub fn with_detail(self, detail: &'static str) -> Self {
        CacheStatus {
            detail: Some(detail),
            ..self
        }
    }

    /// The field value: `secondhit` then the parameters in a fixed order.
    pub fn render(&self) -> String {
        self.render_with(None)
    }

    /// The field value with `detail` a Structured Field string of the caller's (its text must
    /// hold no `"` or `\\`) in place of the token.
    pub fn render_with(&self, quoted_detail: Option<&str>) -> String {
        let mut s = String::with_capacity(48);
        s.push_str("secondhit");
        if self.hit {
            s.push_str("; hit");
        }
        if let Some(f) = self.fwd {
            s.push_str("; fwd=");
            s.push_str(f.as_str());
        }
        if let Some(code) = self.fwd_status {
            s.push_str("; fwd-status=");
            push_decimal(&mut s, i64::from(code));
        }
        if self.stored {
            s.push_str("; stored");
        }
        if let Some(d) = quoted_detail {
            s.push_str("; detail=\"");
            s.push_str(d);
            s.push('"');
        } else if let Some(d) = self.detail {
            s.push_str("; detail=");
            s.push_str(d);
        }
        if let Some(ttl) = self.ttl {
            s.push_str("; ttl=");
            push_decimal(&mut s, ttl);
        }
        s
    }

    /// The rendered value as a header value.
    pub fn header(&self) -> HeaderValue {
        // Only tokens and digits go in: always a valid header value.
        // The rendered string becomes the value's buffer, not copied into another one.
        HeaderValue::from_maybe_shared(bytes::Bytes::from(self.render()))
            .unwrap_or(HeaderValue::from_static("secondhit"))
    }
}

/// Appends `n` in decimal, without the formatting machinery (every response renders one).
pub(super) fn push_decimal(s: &mut String, n: i64) {
    if n < 0 {
        s.push('-');
    }
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    s.extend(digits[at..].iter().map(|&d| char::from(d)));
}

/// A request the proxy answers itself, before any origin contact. One place builds the
/// response, and the caller counts it once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `CONNECT`: this is a reverse proxy (405).
    Connect,
    /// A `GET` or `HEAD` with a body: a body nobody keys on, or a desynchronisation attempt (400).
    BodyOnGetOrHead,
    /// The request target is longer than `limits.max_uri_bytes` (414).
    UriTooLong,
    /// An absolute-form target with a scheme other than `http` (421).
    Scheme,
    /// No Host (400).
    NoHost,
    /// More than one Host field (400).
    DuplicateHost,
    /// A Host that disagrees with the HTTP/2 `:authority` (400).
    HostConflict,
    /// A Host or authority that is not a host (400).
    BadHost(AuthorityError),
    /// No configured origin serves that host (421).
    UnknownHost,
    /// The request's body broke off or was malformed (400): the client's fault, not the origin's.
    BadRequestBody,
    /// The request's body stopped coming for `timeouts.client_body` (408, as nginx's
    /// `client_body_timeout`).
    RequestBodyTimeout,
    /// A request target that cannot be sent on (400).
    BadTarget,
}

impl Refusal {
    /// The status sent.
    pub const fn status(self) -> StatusCode {
        match self {
            Refusal::Connect => StatusCode::METHOD_NOT_ALLOWED,
            Refusal::UriTooLong => StatusCode::URI_TOO_LONG,
            Refusal::Scheme | Refusal::UnknownHost => StatusCode::MISDIRECTED_REQUEST,
            Refusal::RequestBodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Refusal::BodyOnGetOrHead
            | Refusal::NoHost
            | Refusal::DuplicateHost
            | Refusal::HostConflict
            | Refusal::BadHost(_)
            | Refusal::BadRequestBody
            | Refusal::BadTarget => StatusCode::BAD_REQUEST,
        }
    }

    /// The `Cache-Status` detail and log token.
    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::Connect => "connect",
            Refusal::BodyOnGetOrHead => "get-with-body",
            Refusal::UriTooLong => "uri-too-long",
            Refusal::Scheme => "scheme",
            Refusal::NoHost => "no-host",
            Refusal::DuplicateHost => "duplicate-host",
            Refusal::HostConflict => "host-conflict",
            Refusal::BadHost(e) => e.as_str(),
            Refusal::UnknownHost => "unknown-host",
            Refusal::BadRequestBody => "bad-request-body",
            Refusal::RequestBodyTimeout => "request-body-timeout",
            Refusal::BadTarget => "target",
        }
    }

    /// The plain-text body: what was wrong, for the person reading it.
    pub fn message(self) -> String {
        match self {
            Refusal::Connect => "CONNECT is not supported: this is a reverse proxy".into(),
            Refusal::BodyOnGetOrHead => "GET and HEAD take no body".into(),
            Refusal::UriTooLong => "request target too long".into(),
            Refusal::Scheme => "only http:// targets of this site are served".into(),
            Refusal::NoHost => "no Host".into(),
            Refusal::DuplicateHost => "more than one Host".into(),
            Refusal::HostConflict => "Host and :authority differ".into(),
            Refusal::BadHost(e) => format!("bad Host: {e}"),
            Refusal::UnknownHost => "this proxy does not serve that host".into(),
            Refusal::BadRequestBody => "the request body is malformed or was cut off".into(),
            Refusal::RequestBodyTimeout => "the request body stopped coming".into(),
            Refusal::BadTarget => "bad request target".into(),
        }
    }

    /// The response, with `Cache-Status` and the headers the refusal needs (`Allow` for
    /// CONNECT; `Connection: close` where the request's body was left unread).
    pub fn response(self) -> Response<ProxyBody> {
        let mut r = text(self.status(), format!("{}\n", self.message()));
        let h = r.headers_mut();
        match self {
            Refusal::Connect => {
                h.insert(
                    header::ALLOW,
                    HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH"),
                );
            }
            Refusal::BodyOnGetOrHead | Refusal::BadRequestBody | Refusal::RequestBodyTimeout => {
                h.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        r
    }

    /// The `Cache-Status` of a refusal.
    pub fn cache_status(self) -> CacheStatus {
        CacheStatus::forwarded(Fwd::Bypass, Some(self.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_status_renders_in_a_fixed_order() {
        assert_eq!(CacheStatus::hit(59).render(), "secondhit; hit; ttl=59");
        assert_eq!(CacheStatus::hit(0).render(), "secondhit; hit; ttl=0");
        assert_eq!(CacheStatus::hit(-120).render(), "secondhit; hit; ttl=-120");
        assert_eq!(
            CacheStatus::hit(i64::MIN).render(),
            format!("secondhit; hit; ttl={}", i64::MIN)
        );
        assert_eq!(
            CacheStatus::hit(3).with_detail("collapsed").render(),
            "secondhit; hit; detail=collapsed; ttl=3"
        );
        let stored = CacheStatus {
            stored: true,
            ..CacheStatus::forwarded(Fwd::UriMiss, None)
        };
        assert_eq!(stored.render(), "secondhit; fwd=uri-miss; stored");
        let reval = CacheStatus {
            fwd_status: Some(304),
            ..CacheStatus::forwarded(Fwd::Stale, None)
        };
        assert_eq!(reval.render(), "secondhit; fwd=stale; fwd-status=304");
        assert_eq!(
            Refusal::BadHost(AuthorityError::BadByte(b'/'))
                .cache_status()
                .render(),
            "secondhit; fwd=bypass; detail=host-bad-byte"
        );
    }

    #[test]
    fn refusals_name_their_status() {
        assert_eq!(Refusal::UriTooLong.status(), StatusCode::URI_TOO_LONG);
        assert_eq!(
            Refusal::UnknownHost.status(),
            StatusCode::MISDIRECTED_REQUEST
        );
        assert_eq!(Refusal::DuplicateHost.status(), StatusCode::BAD_REQUEST);
        let r = Refusal::Connect.response();
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert!(r.headers().contains_key(header::ALLOW));
        assert_eq!(
            Refusal::BodyOnGetOrHead.response().headers()[header::CONNECTION],
            "close"
        );
    }
}
