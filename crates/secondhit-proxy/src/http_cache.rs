//! HTTP caching rules (RFC 9111) as pure functions: what may be looked up, what may be stored
//! and for how long, whether a conditional request is satisfied. They return data; the proxy
//! acts on it. `now` and times are parameters, never read inside a rule.
//!
//! - `directives`: `Cache-Control`, RFC 5861's stale extensions, RFC 9213's targeted fields.
//! - `encoding`: `Accept-Encoding` normalised to one coding of a preference list.
//! - `structured`: whether a targeted field is a valid Structured Field Dictionary (else it is
//!   ignored).
//! - `freshness`: storability, freshness lifetime (explicit, heuristic, default), age, dates,
//!   the stale permissions, and updating a stored response from a 304.
//! - `vary`: Vary fields and normalised variant keys.
//! - `conditional`: preconditions and ranges answered from a stored response (RFC 9110
//!   §13.2.2's order: 412, 304, 206 or the whole response).
//! - `range`: single byte ranges.
//! - here: the request plan, the cache key, hop-by-hop and unkeyed
//!   header removal.

mod conditional;
mod directives;
mod encoding;
mod freshness;
mod range;
mod structured;
mod vary;

pub use conditional::{conditional_answer, is_conditional, not_modified, Conditional, Validators};
pub use directives::{CacheControl, DELTA_SECONDS_MAX};
pub use encoding::{choose as accept_encoding_for, normalise as normalise_accept_encoding};
pub use freshness::{
    age_field, has_validator, parse_date, storability, updated_headers, usable_with_authorization,
    validates, Credentials, Freshness, StoreRules,
};
pub use range::{parse_range, range_answer, RangeAnswer, RangeRequest};
pub use vary::{variant_key, vary_fields};

use http::header::{self, HeaderMap, HeaderName};
use http::Method;

/// Why a request or response is not cached; feeds `Cache-Status` details and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NoStore {
    /// Request method other than GET or HEAD.
    Method,
    /// `Cache-Control: no-store` on the request.
    RequestNoStore,
    /// The request carries a cookie and the configuration bypasses such requests.
    Cookie,
    /// Status not in the cacheable list.
    Status,
    /// `Cache-Control: no-store` on the response.
    NoStore,
    /// `Cache-Control: private`.
    Private,
    /// `must-understand` on a status this cache does not understand (RFC 9111 §5.2.2.3).
    MustUnderstand,
    /// A `Set-Cookie` header (storing them is off).
    SetCookie,
    /// `Vary: *`.
    VaryStar,
    /// A response to a request with `Authorization` without `public`, `s-maxage` or
    /// `must-revalidate`.
    Authorization,
    /// A response to a request with `Cookie` without `public` or `s-maxage`
    /// (`cache.share_cookie_requests` off).
    CookieRequest,
    /// No freshness information and no default TTL, or already stale.
    NotFresh,
    /// Larger than `max_object_size`.
    TooLarge,
    /// A `Range` request that missed: forwarded, the partial response is not stored.
    Range,
    /// A `HEAD` request that missed: forwarded, never stored.
    Head,
    /// A body delimited by the close of the origin's connection: whole or cut short, it ends
    /// the same way, so it can never be shown complete.
    CloseDelimited,
}

impl NoStore {
    /// A short token for `Cache-Status` and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            NoStore::Method => "method",
            NoStore::RequestNoStore => "request-no-store",
            NoStore::Cookie => "cookie",
            NoStore::Status => "status",
            NoStore::NoStore => "no-store",
            NoStore::Private => "private",
            NoStore::MustUnderstand => "must-understand",
            NoStore::SetCookie => "set-cookie",
            NoStore::VaryStar => "vary-star",
            NoStore::Authorization => "authorization",
            NoStore::CookieRequest => "cookie-request",
            NoStore::NotFresh => "not-fresh",
            NoStore::TooLarge => "too-large",
            NoStore::Range => "range",
            NoStore::Head => "head",
            NoStore::CloseDelimited => "close-delimited",
        }
    }
}

/// What the proxy may do with a request before looking at the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestPlan {
    /// Look the key up; on a miss ask the admission policy.
    Lookup,
    /// Look the key up; a miss is forwarded and its response never stored (`HEAD`, `Range`:
    /// the response would not be the whole object).
    LookupOnly(NoStore),
    /// Skip the lookup (`Cache-Control: no-cache` on the request) but treat the fetch as a miss
    /// that may be stored.
    Refresh,
    /// Forward; never look up, never store.
    Bypass(NoStore),
}

/// Decides how to treat a request. `bypass_cookies` refuses to cache requests carrying a
/// `Cookie` (for sites whose responses depend on it without saying so in `Vary`).
pub fn request_plan(method: &Method, headers: &HeaderMap, bypass_cookies: bool) -> RequestPlan {
    if method != Method::GET && method != Method::HEAD {
        return RequestPlan::Bypass(NoStore::Method);
    }
    let cc = CacheControl::parse(headers);
    if cc.no_store {
        return RequestPlan::Bypass(NoStore::RequestNoStore);
    }
    if bypass_cookies && headers.contains_key(header::COOKIE) {
        return RequestPlan::Bypass(NoStore::Cookie);
    }
    let partial = if method == Method::HEAD {
        Some(NoStore::Head)
    } else if headers.contains_key(header::RANGE) {
        Some(NoStore::Range)
    } else {
        None
    };
    let pragma_no_cache = headers.get_all(header::PRAGMA).iter().any(|v| {
        v.to_str()
            .is_ok_and(|s| s.to_ascii_lowercase().contains("no-cache"))
    });
    let refresh = cc.no_cache || (pragma_no_cache && !headers.contains_key(header::CACHE_CONTROL));
    match (refresh, partial) {
        (true, Some(reason)) => RequestPlan::Bypass(reason),
        (true, None) => RequestPlan::Refresh,
        (false, Some(reason)) => RequestPlan::LookupOnly(reason),
        (false, None) => RequestPlan::Lookup,
    }
}

/// The cache key of a request: method class (`GET` for GET and HEAD), scheme, authority
/// (lower-case) and path with query.
pub fn cache_key(scheme: &str, authority: &str, path_and_query: &str) -> String {
    let mut key =
        String::with_capacity(4 + scheme.len() + 3 + authority.len() + path_and_query.len());
    key.push_str("GET ");
    key.push_str(scheme);
    key.push_str("://");
    let from = key.len();
    key.push_str(authority);
    key[from..].make_ascii_lowercase();
    key.push_str(path_and_query);
    key
}

/// Request headers that some origins honour to rewrite the URL, host, port, scheme or method
/// but that are not part of the cache key. On GET and HEAD only the configured allow-list
/// (`cache.forwarded_request_headers`) reaches the origin, which closes these and every other
/// unkeyed input by default; on other methods (never stored) these are removed, in any spelling
/// that swaps `-` for `_`.
pub const UNKEYED_OVERRIDES: [&str; 16] = [
    "forwarded",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-scheme",
    "x-forwarded-server",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-ssl",
    "front-end-https",
    "x-host",
    "x-original-host",
    "x-original-url",
    "x-rewrite-url",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Whether `name` is one of [`UNKEYED_OVERRIDES`], also spelt with `_` for `-`.
pub fn is_unkeyed_override(name: &HeaderName) -> bool {
    let n = name.as_str();
    UNKEYED_OVERRIDES.iter().any(|o| {
        o.len() == n.len()
            && o.bytes()
                .zip(n.bytes())
                .all(|(a, b)| a == b || (a == b'-' && b == b'_'))
    })
}

/// Removes [`UNKEYED_OVERRIDES`] from a request's headers, also spelt with `_` for `-`.
pub fn strip_unkeyed_overrides(headers: &mut HeaderMap) {
    let found: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_unkeyed_override(name))
        .cloned()
        .collect();
    for name in found {
        headers.remove(name);
    }
}

/// The request fields forwarded to the origin on GET and HEAD by default: content negotiation,
/// credentials (whose responses are shared only when marked so), the request's cache directives,
/// conditionals and ranges. Everything else a client sends is dropped: `Origin`, `Referer` and
/// `User-Agent` too, which origins commonly reflect into a response (`Access-Control-Allow-Origin`,
/// a script) without saying so in `Vary`. Listing one in `cache.forwarded_request_headers` keys
/// the cache on it (see [`keyed_fields`]).
pub const DEFAULT_FORWARDED_REQUEST_HEADERS: [&str; 14] = [
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "authorization",
    "cache-control",
    "cookie",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "pragma",
    "range",
];

/// Forwarded fields that are not part of the key by default (`cache.forwarded_unkeyed_headers`):
/// the credentials, whose responses are shared only when they say `public` or `s-maxage`
/// ([`Credentials`]). Content negotiation is keyed by default: an origin that reflects
/// `Accept-Language` without `Vary` then still answers each value for itself; an operator whose
/// origin names these in `Vary` lists them here, and the cache keys each variant through `Vary`.
pub const DEFAULT_FORWARDED_UNKEYED_HEADERS: [&str; 2] = ["authorization", "cookie"];

/// Fields the cache itself answers for, never keyed whatever the lists say: the request's cache
/// directives, and the conditionals and ranges that a fetch to be stored drops (the cache asks
/// for the whole object and answers the client's conditions from it).
const CACHE_GOVERNED: [HeaderName; 8] = [
    header::CACHE_CONTROL,
    header::PRAGMA,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
    header::RANGE,
];

/// The request fields that are part of the cache key (as CloudFront's cache policies have it):
/// every field forwarded on GET and HEAD, unless listed as forwarded-unkeyed or governed by the
/// cache itself. `*` in `forwarded` (forward everything) keys on none: that setting trusts the
/// origin to name in `Vary` every field that shapes a response.
pub fn keyed_fields(forwarded: &[HeaderName], unkeyed: &[HeaderName]) -> Vec<HeaderName> {
    if forwarded.iter().any(|n| n.as_str() == "*") {
        return Vec::new();
    }
    let mut keyed: Vec<HeaderName> = forwarded
        .iter()
        .filter(|n| !unkeyed.contains(n) && !CACHE_GOVERNED.contains(n) && *n != header::HOST)
        .cloned()
        .collect();
    keyed.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    keyed.dedup();
    keyed
}

/// The key of a request whose forwarded fields include keyed ones: `primary`, then each keyed
/// field the request carries, as a Vary variant's key has it (`\nname:value`). A request that
/// carries none keeps the primary key, so keys (and object ids) stay the URL's unless a keyed
/// field is sent. `None` when nothing is appended.
pub fn keyed_key(primary: &str, keyed: &[HeaderName], request: &HeaderMap) -> Option<String> {
    let present: Vec<HeaderName> = keyed
        .iter()
        .filter(|n| request.contains_key(*n))
        .cloned()
        .collect();
    (!present.is_empty()).then(|| variant_key(primary, &present, request))
}

/// Hop-by-hop headers (RFC 9110 §7.6.1), removed in both directions, plus any field the
/// `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names present, noting which hop-by-hop ones are (most messages carry
    // one at most, usually `Connection: keep-alive`); nothing allocated unless `Connection`
    // names a field that is not one of them.
    let mut present = 0u16;
    for name in headers.keys() {
        if let Some(i) = hop_by_hop(name.as_str()) {
            present |= 1 << i;
        }
    }
    if present == 0 {
        return;
    }
    let mut named: Vec<HeaderName> = Vec::new();
    for value in headers.get_all(header::CONNECTION) {
        let Ok(text) = value.to_str() else { continue };
        for option in text.split(',').map(str::trim) {
            // `close` is an option, and a field of that name is reserved (RFC 9110 §7.6.1):
            // removed only if present.
            let skip = hop_by_hop(option).is_some()
                || option.is_empty()
                || (option.eq_ignore_ascii_case("close") && !headers.contains_key("close"));
            if !skip {
                if let Ok(n) = HeaderName::from_bytes(option.as_bytes()) {
                    named.push(n);
                }
            }
        }
    }
    for (i, name) in HOP_BY_HOP_NAMES.iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(name);
        }
    }
    for name in named {
        headers.remove(name);
    }
}

/// The hop-by-hop fields of RFC 9110 §7.6.1 and the legacy ones still seen.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "keep-alive",
    "proxy-connection",
];

/// [`HOP_BY_HOP`] as header names, in the same order (removing by name parses no string).
static HOP_BY_HOP_NAMES: [HeaderName; 9] = [
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// Which of [`HOP_BY_HOP`] `name` is (case-insensitively: `Connection` lists names as sent).
fn hop_by_hop(name: &str) -> Option<usize> {
    HOP_BY_HOP
        .iter()
        .position(|h| h.len() == name.len() && h.eq_ignore_ascii_case(name))
}

/// Header maps for the rules' unit tests.
#[cfg(test)]
pub(crate) mod test_headers {
    use http::header::{HeaderMap, HeaderName, HeaderValue};

    /// A header map from name/value pairs, in order (repeated names append).
    pub fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::test_headers::h;
    use super::*;
    use http::HeaderValue;
    use std::time::{Duration, SystemTime};

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn date(secs: u64) -> String {
        httpdate::fmt_http_date(t(secs))
    }

    #[test]
    fn request_plans() {
        let get = Method::GET;
        assert_eq!(request_plan(&get, &h(&[]), false), RequestPlan::Lookup);
        assert_eq!(
            request_plan(&Method::HEAD, &h(&[]), false),
            RequestPlan::LookupOnly(NoStore::Head)
        );
        assert_eq!(
            request_plan(&get, &h(&[("range", "bytes=0-1")]), false),
            RequestPlan::LookupOnly(NoStore::Range)
        );
        assert_eq!(
            request_plan(&Method::HEAD, &h(&[("cache-control", "no-cache")]), false),
            RequestPlan::Bypass(NoStore::Head)
        );
        assert_eq!(
            request_plan(&Method::POST, &h(&[]), false),
            RequestPlan::Bypass(NoStore::Method)
        );
        assert_eq!(
            request_plan(&get, &h(&[("cache-control", "no-store")]), false),
            RequestPlan::Bypass(NoStore::RequestNoStore)
        );
        assert_eq!(
            request_plan(&get, &h(&[("cache-control", "no-cache")]), false),
            RequestPlan::Refresh
        );
        assert_eq!(
            request_plan(&get, &h(&[("pragma", "no-cache")]), false),
            RequestPlan::Refresh
        );
        let cookie = h(&[("cookie", "a=b")]);
        assert_eq!(request_plan(&get, &cookie, false), RequestPlan::Lookup);
        assert_eq!(
            request_plan(&get, &cookie, true),
            RequestPlan::Bypass(NoStore::Cookie)
        );
    }

    #[test]
    fn keys() {
        assert_eq!(
            cache_key("http", "Example.COM", "/a?b=1"),
            "GET http://example.com/a?b=1"
        );
    }

    #[test]
    fn conditional_requests() {
        let etag = HeaderValue::from_static("\"v1\"");
        let lm = HeaderValue::from_str(&date(0)).unwrap();
        let nm = |hs: &[(&str, &str)]| not_modified(&h(hs), Some(&etag), Some(&lm));
        assert!(nm(&[("if-none-match", "\"v1\"")]));
        assert!(nm(&[("if-none-match", "W/\"v1\", \"v2\"")]));
        assert!(nm(&[("if-none-match", "*")]));
        assert!(!nm(&[("if-none-match", "\"v2\"")]));
        // If-None-Match wins over If-Modified-Since.
        let later = date(10);
        assert!(!nm(&[
            ("if-none-match", "\"v2\""),
            ("if-modified-since", &later)
        ]));
        assert!(nm(&[("if-modified-since", &later)]));
        let same = date(0);
        assert!(nm(&[("if-modified-since", &same)]));
        let before = httpdate::fmt_http_date(t(0) - Duration::from_secs(5));
        assert!(!nm(&[("if-modified-since", &before)]));
        assert!(!nm(&[]));
    }

    #[test]
    fn hop_by_hop_names_match_their_strings() {
        for (name, text) in HOP_BY_HOP_NAMES.iter().zip(HOP_BY_HOP) {
            assert_eq!(name.as_str(), text);
        }
    }

    #[test]
    fn hop_by_hop_headers_go() {
        let mut m = h(&[
            ("connection", "keep-alive, x-secret"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("content-type", "text/plain"),
        ]);
        strip_hop_by_hop(&mut m);
        assert_eq!(m.len(), 1);
        assert!(m.contains_key("content-type"));
        // Every fixed one, repeated ones, and a named one in a second Connection field.
        let mut m = h(&[
            ("connection", "close"),
            ("connection", "X-Two"),
            ("x-two", "2"),
            ("x-two", "2b"),
            ("proxy-authenticate", "Basic"),
            ("proxy-authorization", "Basic x"),
            ("proxy-connection", "keep-alive"),
            ("trailer", "x-t"),
            ("upgrade", "h2c"),
            ("etag", "\"1\""),
            ("etag", "\"2\""),
        ]);
        strip_hop_by_hop(&mut m);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m.get_all("etag").iter().count(), 2);
        // Named in any case; the reserved `Close` field goes when present.
        let mut m = h(&[
            ("connection", "Close, KEEP-ALIVE, X-Three"),
            ("close", "1"),
            ("keep-alive", "timeout=5"),
            ("x-three", "3"),
            ("age", "1"),
        ]);
        strip_hop_by_hop(&mut m);
        assert_eq!(m.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["age"]);
        // No hop-by-hop field at all: nothing touched.
        let mut m = h(&[("x-secret", "1"), ("age", "1")]);
        strip_hop_by_hop(&mut m);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn cache_keys_lower_case_the_authority_only() {
        assert_eq!(
            cache_key("https", "IMG.Example:8443", "/A?B=C"),
            "GET https://img.example:8443/A?B=C"
        );
    }
}
