//! HTTP caching rules (RFC 9111) as pure functions: what may be looked up, what may be stored
//! and for how long, whether a conditional request is satisfied. They return data; the proxy
//! acts on it. `now` and times are parameters, never read inside a rule.

mod range;

pub use range::{parse_range, range_answer, RangeAnswer, RangeRequest};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use std::time::{Duration, SystemTime};

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
    /// `Cache-Control: no-cache` on the response (we do not revalidate).
    NoCache,
    /// A `Set-Cookie` header (storing them is off).
    SetCookie,
    /// `Vary: *`.
    VaryStar,
    /// A response to a request with `Authorization` without `public`, `s-maxage` or
    /// `must-revalidate`.
    Authorization,
    /// No freshness information and no default TTL, or already stale.
    NotFresh,
    /// Larger than `max_object_size`.
    TooLarge,
    /// A `Range` request that missed: forwarded, the partial response is not stored.
    Range,
    /// A `HEAD` request that missed: forwarded, never stored.
    Head,
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
            NoStore::NoCache => "no-cache",
            NoStore::SetCookie => "set-cookie",
            NoStore::VaryStar => "vary-star",
            NoStore::Authorization => "authorization",
            NoStore::NotFresh => "not-fresh",
            NoStore::TooLarge => "too-large",
            NoStore::Range => "range",
            NoStore::Head => "head",
        }
    }
}

/// The `Cache-Control` directives that matter to a shared cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `no-store`.
    pub no_store: bool,
    /// `no-cache` (with or without field names: treated the same).
    pub no_cache: bool,
    /// `private` (with or without field names: treated the same).
    pub private: bool,
    /// `public`.
    pub public: bool,
    /// `must-revalidate`.
    pub must_revalidate: bool,
    /// `max-age=N` seconds.
    pub max_age: Option<u64>,
    /// `s-maxage=N` seconds.
    pub s_maxage: Option<u64>,
}

impl CacheControl {
    /// Parses every `Cache-Control` field of `headers`. Directive names are case-insensitive;
    /// a malformed delta-seconds value makes the response stale (`0`), as RFC 9111 §1.2.2 asks.
    pub fn parse(headers: &HeaderMap) -> CacheControl {
        let mut cc = CacheControl::default();
        for value in headers.get_all(header::CACHE_CONTROL) {
            let Ok(text) = value.to_str() else { continue };
            for directive in text.split(',') {
                let (name, arg) = match directive.split_once('=') {
                    Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
                    None => (directive.trim(), None),
                };
                let seconds = || arg.map(|a| a.parse::<u64>().unwrap_or(0));
                match name.to_ascii_lowercase().as_str() {
                    "no-store" => cc.no_store = true,
                    "no-cache" => cc.no_cache = true,
                    "private" => cc.private = true,
                    "public" => cc.public = true,
                    "must-revalidate" | "proxy-revalidate" => cc.must_revalidate = true,
                    "max-age" => cc.max_age = seconds().or(Some(0)),
                    "s-maxage" => cc.s_maxage = seconds().or(Some(0)),
                    _ => {}
                }
            }
        }
        cc
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

/// The rules a response must pass to be stored, from configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreRules {
    /// Statuses that may be stored.
    pub statuses: Vec<u16>,
    /// Freshness for responses that give none (`None`: do not store them).
    pub default_ttl: Option<Duration>,
    /// Whether responses with `Set-Cookie` may be stored (the cookie is then stored too and sent
    /// to every client: almost never what you want).
    pub store_set_cookie: bool,
}

impl Default for StoreRules {
    fn default() -> Self {
        StoreRules {
            statuses: vec![200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501],
            default_ttl: None,
            store_set_cookie: false,
        }
    }
}

/// How long a stored response stays fresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freshness {
    /// The freshness lifetime (RFC 9111 §4.2.1).
    pub lifetime: Duration,
    /// The response's age when it arrived (§4.2.3): `max(Age, now - Date)`.
    pub initial_age: Duration,
}

impl Freshness {
    /// How long it stays fresh from its arrival.
    pub fn remaining(&self) -> Duration {
        self.lifetime.saturating_sub(self.initial_age)
    }
}

fn header_date(headers: &HeaderMap, name: HeaderName) -> Option<SystemTime> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| httpdate::parse_http_date(s).ok())
}

/// Decides whether a response may be stored and, if so, its freshness. `authorized`: the
/// request carried `Authorization`. `now` is the wall-clock time the response arrived.
pub fn storability(
    status: StatusCode,
    headers: &HeaderMap,
    authorized: bool,
    rules: &StoreRules,
    now: SystemTime,
) -> Result<Freshness, NoStore> {
    if !rules.statuses.contains(&status.as_u16()) {
        return Err(NoStore::Status);
    }
    let cc = CacheControl::parse(headers);
    if cc.no_store {
        return Err(NoStore::NoStore);
    }
    if cc.private {
        return Err(NoStore::Private);
    }
    if cc.no_cache {
        return Err(NoStore::NoCache);
    }
    if !rules.store_set_cookie && headers.contains_key(header::SET_COOKIE) {
        return Err(NoStore::SetCookie);
    }
    let vary_star = headers.get_all(header::VARY).iter().any(|v| {
        v.to_str()
            .is_ok_and(|s| s.split(',').any(|f| f.trim() == "*"))
    });
    if vary_star {
        return Err(NoStore::VaryStar);
    }
    // RFC 9111 §3.5: a shared cache stores a response to an authorized request only if the
    // response explicitly allows it.
    if authorized && !(cc.public || cc.s_maxage.is_some() || cc.must_revalidate) {
        return Err(NoStore::Authorization);
    }
    let date = header_date(headers, header::DATE);
    // §4.2.1: s-maxage, then max-age, then Expires - Date.
    let lifetime = if let Some(s) = cc.s_maxage.or(cc.max_age) {
        Some(Duration::from_secs(s))
    } else if headers.contains_key(header::EXPIRES) {
        // An invalid Expires (e.g. "0") means already expired (§5.3).
        match (header_date(headers, header::EXPIRES), date.unwrap_or(now)) {
            (Some(exp), d) => Some(exp.duration_since(d).unwrap_or(Duration::ZERO)),
            (None, _) => Some(Duration::ZERO),
        }
    } else {
        rules.default_ttl
    };
    let Some(lifetime) = lifetime else {
        return Err(NoStore::NotFresh);
    };
    let age_header = headers
        .get(header::AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs);
    let apparent = date
        .and_then(|d| now.duration_since(d).ok())
        .unwrap_or(Duration::ZERO);
    let freshness = Freshness {
        lifetime,
        initial_age: age_header.max(apparent),
    };
    if freshness.remaining().is_zero() {
        return Err(NoStore::NotFresh);
    }
    Ok(freshness)
}

/// Whether a stored response may answer a request that carries `Authorization`: only if it was
/// marked `public`, `s-maxage` or `must-revalidate` (RFC 9111 §3.5).
pub fn usable_with_authorization(headers: &HeaderMap) -> bool {
    let cc = CacheControl::parse(headers);
    cc.public || cc.s_maxage.is_some() || cc.must_revalidate
}

/// The field names a response varies on (lower-case), empty if none.
pub fn vary_fields(headers: &HeaderMap) -> Vec<HeaderName> {
    let mut fields: Vec<HeaderName> = headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .filter_map(|f| HeaderName::from_bytes(f.trim().as_bytes()).ok())
        .collect();
    fields.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    fields.dedup();
    fields
}

/// The cache key of a request: method class (`GET` for GET and HEAD), scheme, authority
/// (lower-case) and path with query.
pub fn cache_key(scheme: &str, authority: &str, path_and_query: &str) -> String {
    format!(
        "GET {}://{}{}",
        scheme,
        authority.to_ascii_lowercase(),
        path_and_query
    )
}

/// The key of one variant: the primary key plus, for each field the response varies on, the
/// request's values of it (RFC 9111 §4.1). `request` must be the headers the origin received
/// (after hop-by-hop removal), so that a variant is keyed on what selected it. Values are keyed
/// on their bytes (leading and trailing whitespace aside): a value that is not text is its own
/// key, never the same as an absent field, and an absent field matches only an absent field.
pub fn variant_key(primary: &str, fields: &[HeaderName], request: &HeaderMap) -> String {
    if fields.is_empty() {
        return primary.to_string();
    }
    let mut key = String::from(primary);
    for f in fields {
        key.push('\n');
        key.push_str(f.as_str());
        let mut values = request.get_all(f).iter();
        match values.next() {
            None => key.push('!'),
            Some(first) => {
                key.push(':');
                push_escaped(&mut key, first.as_bytes());
                for v in values {
                    key.push(',');
                    push_escaped(&mut key, v.as_bytes());
                }
            }
        }
    }
    key
}

/// Appends a field value to a key: printable ASCII as it is, `\\` and every other byte as
/// `\xNN`, so that distinct byte strings give distinct keys.
fn push_escaped(key: &mut String, value: &[u8]) {
    let trimmed = value
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .map_or(&value[..0], |start| {
            let end = value
                .iter()
                .rposition(|b| !matches!(b, b' ' | b'\t'))
                .map_or(start, |e| e + 1);
            &value[start..end]
        });
    for &b in trimmed {
        match b {
            b'\\' => key.push_str("\\\\"),
            b' '..=b'~' => key.push(char::from(b)),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                key.push_str("\\x");
                key.push(char::from(HEX[usize::from(b >> 4)]));
                key.push(char::from(HEX[usize::from(b & 15)]));
            }
        }
    }
}

/// Whether a conditional request is answered by the stored response with 304 (RFC 9110
/// §13.1): `If-None-Match` (weak comparison) takes precedence over `If-Modified-Since`.
pub fn not_modified(
    request: &HeaderMap,
    etag: Option<&HeaderValue>,
    last_modified: Option<&HeaderValue>,
) -> bool {
    if let Some(inm) = request.get(header::IF_NONE_MATCH) {
        let Ok(inm) = inm.to_str() else { return false };
        let Some(etag) = etag.and_then(|e| e.to_str().ok()) else {
            return false;
        };
        let weak = |t: &str| t.trim().trim_start_matches("W/").to_string();
        return inm
            .split(',')
            .any(|t| t.trim() == "*" || weak(t) == weak(etag));
    }
    let ims = request
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| httpdate::parse_http_date(s).ok());
    let lm = last_modified
        .and_then(|v| v.to_str().ok())
        .and_then(|s| httpdate::parse_http_date(s).ok());
    matches!((ims, lm), (Some(ims), Some(lm)) if lm <= ims)
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

/// Removes [`UNKEYED_OVERRIDES`] from a request's headers, also spelt with `_` for `-`.
pub fn strip_unkeyed_overrides(headers: &mut HeaderMap) {
    let found: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            let n = name.as_str();
            UNKEYED_OVERRIDES.iter().any(|o| {
                o.len() == n.len()
                    && o.bytes()
                        .zip(n.bytes())
                        .all(|(a, b)| a == b || (a == b'-' && b == b'_'))
            })
        })
        .cloned()
        .collect();
    for name in found {
        headers.remove(name);
    }
}

/// The request fields forwarded to the origin on GET and HEAD by default: content negotiation,
/// conditionals, ranges, credentials (whose responses are stored only when marked public) and
/// the fields origins commonly log. Everything else a client sends is dropped, so that no input
/// the cache key does not cover can shape a stored response.
pub const DEFAULT_FORWARDED_REQUEST_HEADERS: [&str; 17] = [
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
    "origin",
    "pragma",
    "range",
    "referer",
    "user-agent",
];

/// Hop-by-hop headers (RFC 9110 §7.6.1), removed in both directions, plus any field the
/// `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .filter_map(|f| HeaderName::from_bytes(f.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        m
    }

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn date(secs: u64) -> String {
        httpdate::fmt_http_date(t(secs))
    }

    #[test]
    fn cache_control_parses_case_and_quotes() {
        let cc = CacheControl::parse(&h(&[
            ("cache-control", "Public, MAX-AGE=\"60\""),
            ("cache-control", "s-maxage=10, no-cache=\"set-cookie\""),
        ]));
        assert!(cc.public && cc.no_cache && !cc.private);
        assert_eq!((cc.max_age, cc.s_maxage), (Some(60), Some(10)));
        assert_eq!(
            CacheControl::parse(&h(&[("cache-control", "max-age=x")])).max_age,
            Some(0)
        );
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
    fn freshness_prefers_s_maxage_then_max_age_then_expires() {
        let r = StoreRules::default();
        let ok = StatusCode::OK;
        let f = |hs: &[(&str, &str)]| storability(ok, &h(hs), false, &r, t(0));
        assert_eq!(
            f(&[("cache-control", "max-age=60, s-maxage=30")])
                .unwrap()
                .lifetime,
            Duration::from_secs(30)
        );
        assert_eq!(
            f(&[("cache-control", "max-age=60")]).unwrap().lifetime,
            Duration::from_secs(60)
        );
        let d0 = date(0);
        let d100 = date(100);
        let fr = f(&[("date", &d0), ("expires", &d100)]).unwrap();
        assert_eq!(fr.lifetime, Duration::from_secs(100));
        assert_eq!(
            f(&[("date", &d0), ("expires", "0")]),
            Err(NoStore::NotFresh)
        );
        assert_eq!(f(&[]), Err(NoStore::NotFresh));
        let rules = StoreRules {
            default_ttl: Some(Duration::from_secs(5)),
            ..StoreRules::default()
        };
        assert_eq!(
            storability(ok, &h(&[]), false, &rules, t(0))
                .unwrap()
                .lifetime,
            Duration::from_secs(5)
        );
    }

    #[test]
    fn age_counts_against_freshness() {
        let r = StoreRules::default();
        let d0 = date(0);
        // Age header 20 s, Date 30 s ago: initial age is the larger, 30 s.
        let fr = storability(
            StatusCode::OK,
            &h(&[
                ("cache-control", "max-age=60"),
                ("age", "20"),
                ("date", &d0),
            ]),
            false,
            &r,
            t(30),
        )
        .unwrap();
        assert_eq!(fr.initial_age, Duration::from_secs(30));
        assert_eq!(fr.remaining(), Duration::from_secs(30));
        // Older than its lifetime on arrival: not stored.
        let stale = storability(
            StatusCode::OK,
            &h(&[("cache-control", "max-age=60"), ("age", "61")]),
            false,
            &r,
            t(0),
        );
        assert_eq!(stale, Err(NoStore::NotFresh));
    }

    #[test]
    fn what_is_never_stored() {
        let r = StoreRules::default();
        let ok = StatusCode::OK;
        let cc = |v: &str| vec![("cache-control", v.to_string())];
        let check = |hs: Vec<(&str, String)>, auth: bool| {
            let pairs: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            storability(ok, &h(&pairs), auth, &r, t(0))
        };
        assert_eq!(
            check(cc("no-store, max-age=60"), false),
            Err(NoStore::NoStore)
        );
        assert_eq!(
            check(cc("private, max-age=60"), false),
            Err(NoStore::Private)
        );
        assert_eq!(
            check(cc("no-cache, max-age=60"), false),
            Err(NoStore::NoCache)
        );
        let mut sc = cc("max-age=60");
        sc.push(("set-cookie", "a=b".into()));
        assert_eq!(check(sc, false), Err(NoStore::SetCookie));
        let mut vs = cc("max-age=60");
        vs.push(("vary", "Accept, *".into()));
        assert_eq!(check(vs, false), Err(NoStore::VaryStar));
        assert_eq!(check(cc("max-age=60"), true), Err(NoStore::Authorization));
        assert!(check(cc("public, max-age=60"), true).is_ok());
        assert!(check(cc("s-maxage=60"), true).is_ok());
        assert_eq!(
            storability(
                StatusCode::INTERNAL_SERVER_ERROR,
                &h(&[("cache-control", "max-age=60")]),
                false,
                &r,
                t(0)
            ),
            Err(NoStore::Status)
        );
        for code in [200u16, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501] {
            let s = StatusCode::from_u16(code).unwrap();
            assert!(storability(s, &h(&[("cache-control", "max-age=9")]), false, &r, t(0)).is_ok());
        }
    }

    #[test]
    fn keys_and_variants() {
        assert_eq!(
            cache_key("http", "Example.COM", "/a?b=1"),
            "GET http://example.com/a?b=1"
        );
        let resp = h(&[
            ("vary", "Accept-Encoding, accept-language"),
            ("vary", "accept-encoding"),
        ]);
        let fields = vary_fields(&resp);
        assert_eq!(
            fields,
            vec![header::ACCEPT_ENCODING, header::ACCEPT_LANGUAGE]
        );
        let a = variant_key("k", &fields, &h(&[("accept-encoding", "gzip")]));
        let b = variant_key("k", &fields, &h(&[("accept-encoding", "br")]));
        let c = variant_key(
            "k",
            &fields,
            &h(&[("accept-encoding", "gzip"), ("x-other", "1")]),
        );
        assert_ne!(a, b);
        assert_eq!(a, c);
        assert_eq!(variant_key("k", &[], &h(&[("accept-encoding", "br")])), "k");
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
    }
}
