//! Whether a response may be stored, how long it stays fresh, and what may be done with it once
//! stale (RFC 9111 §3, §4.2; RFC 5861; RFC 9213): pure functions of the response head, the
//! configured rules and `now`.

use super::directives::{CacheControl, DELTA_SECONDS_MAX};
use super::NoStore;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use std::time::{Duration, SystemTime};

/// Statuses this cache understands (RFC 9111 §5.2.2.3 `must-understand`): their semantics for
/// caching are defined by RFC 9110.
const UNDERSTOOD: [u16; 18] = [
    200, 203, 204, 300, 301, 302, 303, 307, 308, 400, 403, 404, 405, 410, 414, 500, 501, 503,
];

/// The rules a response must pass to be stored, from configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreRules {
    /// Statuses stored without explicit freshness (by the heuristic or `default_ttl`); the
    /// heuristically cacheable ones of RFC 9110 §15.1 by default. Any other final status is
    /// stored only with explicit freshness (`max-age`, `s-maxage`, `Expires`).
    pub statuses: Vec<u16>,
    /// Freshness for responses that give none and get no heuristic (`None`: do not store them).
    pub default_ttl: Option<Duration>,
    /// The heuristic freshness cap (RFC 9111 §4.2.2): a response with `Last-Modified` and no
    /// explicit freshness is fresh for 10 % of its age since then, at most this. `None`: no
    /// heuristic.
    pub heuristic_max: Option<Duration>,
    /// Whether responses with `Set-Cookie` may be stored (the cookie is then stored too and sent
    /// to every client: almost never what you want).
    pub store_set_cookie: bool,
    /// Targeted cache-control fields for this cache, by precedence (RFC 9213):
    /// `CDN-Cache-Control`, then `Surrogate-Control` (the Edge Architecture field CDNs honour),
    /// by default.
    pub targeted: Vec<HeaderName>,
    /// How long a stale response may answer when the origin fails, if the response does not
    /// say (`stale-if-error`); zero: only when it says.
    pub stale_if_error: Duration,
    /// Whether a response fetched for a request with `Cookie` is shared like any other (RFC 9111
    /// alone). `false` (the default) follows Varnish's builtin rule: it is stored for others only
    /// when it says `public` or `s-maxage`, so a personal page with heuristic freshness (web
    /// cache deception: `/account/x.css` with a session cookie) is never served to anyone else.
    pub share_cookie_requests: bool,
}

/// The credentials a request sent to the origin carried: what decides whether its response may
/// be shared (RFC 9111 §3.5 for `Authorization`; `Cookie` by [`StoreRules::share_cookie_requests`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// `Authorization` was sent.
    pub authorization: bool,
    /// `Cookie` was sent.
    pub cookie: bool,
}

impl Credentials {
    /// No credentials: a request made on behalf of the cache, or an anonymous client's.
    pub const NONE: Credentials = Credentials {
        authorization: false,
        cookie: false,
    };

    /// The credentials in `headers`.
    pub fn of(headers: &HeaderMap) -> Self {
        Credentials {
            authorization: headers.contains_key(header::AUTHORIZATION),
            cookie: headers.contains_key(header::COOKIE),
        }
    }

    /// Those the origin receives: a field the forwarding rule drops carries nothing to it.
    #[must_use]
    pub fn forwarded(self, keeps: impl Fn(&HeaderName) -> bool) -> Self {
        Credentials {
            authorization: self.authorization && keeps(&header::AUTHORIZATION),
            cookie: self.cookie && keeps(&header::COOKIE),
        }
    }
}

impl Default for StoreRules {
    fn default() -> Self {
        StoreRules {
            statuses: vec![200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501],
            default_ttl: None,
            heuristic_max: Some(Duration::from_secs(86_400)),
            store_set_cookie: false,
            targeted: vec![
                HeaderName::from_static("cdn-cache-control"),
                HeaderName::from_static("surrogate-control"),
            ],
            stale_if_error: Duration::ZERO,
            share_cookie_requests: false,
        }
    }
}

/// How long a stored response stays fresh, and what may be done with it after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freshness {
    /// The freshness lifetime (RFC 9111 §4.2.1).
    pub lifetime: Duration,
    /// The response's age when it arrived (§4.2.3): `max(Age, now - Date)`.
    pub initial_age: Duration,
    /// `no-cache`: stored, but revalidated before every use.
    pub no_cache: bool,
    /// How long past its freshness it may be served while it is refreshed in the background
    /// (RFC 5861 §3); zero under `must-revalidate` and `no-cache`.
    pub stale_while_revalidate: Duration,
    /// How long past its freshness it may be served when the origin fails (RFC 5861 §4, or the
    /// configured default); zero under `must-revalidate` and `no-cache`.
    pub stale_if_error: Duration,
}

impl Freshness {
    /// How long it stays fresh from its arrival (zero under `no-cache`).
    pub fn remaining(&self) -> Duration {
        if self.no_cache {
            return Duration::ZERO;
        }
        self.lifetime.saturating_sub(self.initial_age)
    }
}

/// Parses an HTTP date in any of its three formats (RFC 9110 §5.6.7), also in the wrong letter
/// case (`thu, 01 JAN 2026 00:00:00 gmt`), as real traffic sends it.
pub fn parse_date(value: &str) -> Option<SystemTime> {
    let value = value.trim();
    // Every miss parses the origin's `Date` and often a `Last-Modified`: the form senders must
    // use is read here without the general parser (which checks a date by formatting it back).
    if let Ok(fixdate) = <&[u8; 29]>::try_from(value.as_bytes()) {
        if let Some(t) = parse_fixdate(fixdate) {
            return Some(t);
        }
    }
    if let Ok(t) = httpdate::parse_http_date(value) {
        return Some(t);
    }
    // Day and month names capitalised, GMT in capitals: the form the parser accepts.
    let mut fixed = String::with_capacity(value.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.eq_ignore_ascii_case("gmt") {
            out.push_str("GMT");
        } else {
            for (i, c) in word.chars().enumerate() {
                out.push(if i == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                });
            }
        }
        word.clear();
    };
    for c in value.chars() {
        if c.is_ascii_alphabetic() {
            word.push(c);
        } else {
            flush(&mut word, &mut fixed);
            fixed.push(c);
        }
    }
    flush(&mut word, &mut fixed);
    httpdate::parse_http_date(&fixed).ok()
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) in exactly that form and case, with the
/// checks `httpdate` makes: fields in range, years 1970 to 9999, the day of the week right.
/// `None` for anything else (the caller falls back to the general parser).
fn parse_fixdate(s: &[u8; 29]) -> Option<SystemTime> {
    if s[3..5] != *b", " || s[16] != b' ' || s[19] != b':' || s[22] != b':' || s[25..] != *b" GMT" {
        return None;
    }
    let digits = |from: usize, to: usize| {
        s[from..to].iter().try_fold(0u64, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0'))
        })
    };
    let (day, year) = (digits(5, 7)?, digits(12, 16)?);
    let (hour, min, sec) = (digits(17, 19)?, digits(20, 22)?, digits(23, 25)?);
    // Matched against fixed-length literals (compared as integers), not searched for in a table.
    let month = match &s[7..12] {
        b" Jan " => 1,
        b" Feb " => 2,
        b" Mar " => 3,
        b" Apr " => 4,
        b" May " => 5,
        b" Jun " => 6,
        b" Jul " => 7,
        b" Aug " => 8,
        b" Sep " => 9,
        b" Oct " => 10,
        b" Nov " => 11,
        b" Dec " => 12,
        _ => return None,
    };
    // Monday first, as `(days since 1970-01-01 + 3) % 7` counts (that day was a Thursday).
    let weekday = match &s[..3] {
        b"Mon" => 0,
        b"Tue" => 1,
        b"Wed" => 2,
        b"Thu" => 3,
        b"Fri" => 4,
        b"Sat" => 5,
        b"Sun" => 6,
        _ => return None,
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    let in_range = (1970..=9999).contains(&year) && (1..=month_days).contains(&day);
    if !in_range || hour > 23 || min > 59 || sec > 59 {
        return None;
    }
    // Days since 1970-01-01 of a civil date (years from March, so that a leap day ends one).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let (era, year_of_era) = (y / 400, y % 400);
    let day_of_year = (153 * m + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    if (days + 3) % 7 != weekday {
        return None;
    }
    let secs = days * 86_400 + hour * 3_600 + min * 60 + sec;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

fn date_of(value: Option<&HeaderValue>) -> Option<SystemTime> {
    value.and_then(|v| v.to_str().ok()).and_then(parse_date)
}

/// The `Age` of a response (RFC 9111 §5.1): the first member of the field's first line, capped
/// at 2^31 s (§1.2.2); absent, zero. An invalid value (not a non-negative integer: `abc`, `-5`,
/// `1.5`, `7200;foo=bar`) is ignored, as §5.1 says a cache SHOULD: the age is then zero, and
/// `Date` alone says how old the response is.
pub fn age_field(headers: &HeaderMap) -> Duration {
    age_of(headers.get(header::AGE))
}

/// [`age_field`] of the first `Age` line, if any.
fn age_of(value: Option<&HeaderValue>) -> Duration {
    let Some(value) = value else {
        return Duration::ZERO;
    };
    let first = value
        .to_str()
        .ok()
        .and_then(|s| s.split(',').next())
        .map(str::trim)
        .unwrap_or("");
    if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
        return Duration::ZERO;
    }
    let secs = first
        .parse::<u64>()
        .map_or(DELTA_SECONDS_MAX, |n| n.min(DELTA_SECONDS_MAX));
    Duration::from_secs(secs)
}

/// Whether a response can be revalidated: it carries an `ETag` or a `Last-Modified`.
pub fn has_validator(headers: &HeaderMap) -> bool {
    headers.contains_key(header::ETAG) || headers.contains_key(header::LAST_MODIFIED)
}

/// The fields of a response that decide whether and how long it is stored, found in one pass
/// over the map rather than a hash lookup for each (every miss asks for about ten fields, most
/// absent, and a lookup hashes the name each time). Where a field repeats, the first line counts, as
/// `HeaderMap::get` gives it, except `Cache-Control` (every line read) and `Vary` (every line
/// searched).
#[derive(Debug, Default)]
pub(super) struct ResponseFields<'a> {
    /// The directives of every `Cache-Control` line.
    cache_control: CacheControl,
    /// The index in the targeted names of the first one present with a non-empty value.
    targeted: Option<usize>,
    set_cookie: bool,
    /// A `Vary` line has the member `*`.
    vary_star: bool,
    date: Option<&'a HeaderValue>,
    expires: Option<&'a HeaderValue>,
    age: Option<&'a HeaderValue>,
    last_modified: Option<&'a HeaderValue>,
    etag: bool,
}

impl<'a> ResponseFields<'a> {
    /// Reads `headers` once; `targeted`: the targeted cache-control names, by precedence.
    pub(super) fn read(headers: &'a HeaderMap, targeted: &[HeaderName]) -> Self {
        let mut f = ResponseFields::default();
        let first = |slot: &mut Option<&'a HeaderValue>, v: &'a HeaderValue| {
            slot.get_or_insert(v);
        };
        for (name, value) in headers {
            if name == header::CACHE_CONTROL {
                f.cache_control.read(value);
            } else if name == header::DATE {
                first(&mut f.date, value);
            } else if name == header::LAST_MODIFIED {
                first(&mut f.last_modified, value);
            } else if name == header::ETAG {
                f.etag = true;
            } else if name == header::EXPIRES {
                first(&mut f.expires, value);
            } else if name == header::AGE {
                first(&mut f.age, value);
            } else if name == header::SET_COOKIE {
                f.set_cookie = true;
            } else if name == header::VARY {
                f.vary_star |= value
                    .to_str()
                    .is_ok_and(|s| s.split(',').any(|m| m.trim() == "*"));
            } else if let Some(i) = targeted.iter().position(|t| t == name) {
                if f.targeted.is_none_or(|j| i < j) && has_text(value) {
                    f.targeted = Some(i);
                }
            }
        }
        f
    }

    /// The directives that govern this cache's use of the response (RFC 9213 §2.1), and whether
    /// they came from a targeted field (then `Expires` is ignored too).
    pub(super) fn directives(
        &self,
        headers: &HeaderMap,
        targeted: &[HeaderName],
    ) -> (CacheControl, bool) {
        // The first targeted field present, non-empty and a valid Structured Field Dictionary;
        // an invalid one is ignored as though absent (RFC 9213 §2.1). `read` found the first
        // present one; those after it are looked up only when it is invalid.
        let valid = self.targeted.and_then(|first| {
            targeted[first..].iter().enumerate().find_map(|(k, name)| {
                let present = k == 0 || headers.get_all(name).iter().any(has_text);
                (present && super::structured::targeted_field_is_valid(headers, name))
                    .then_some(name)
            })
        });
        match valid {
            Some(name) => (CacheControl::parse_field(headers, name), true),
            None => (self.cache_control.clone(), false),
        }
    }
}

/// Whether a field line is text with something other than spaces in it (an empty targeted
/// field is as though absent).
fn has_text(value: &HeaderValue) -> bool {
    value.to_str().is_ok_and(|s| !s.trim().is_empty())
}

/// Decides whether a response may be stored and, if so, its freshness. `credentials`: what the
/// request that fetched it carried (see [`Credentials::of`]); a fetch made on behalf of a stored
/// entry passes the credentials it actually sent. `now` is the wall-clock time the response
/// arrived.
pub fn storability(
    status: StatusCode,
    headers: &HeaderMap,
    credentials: Credentials,
    rules: &StoreRules,
    now: SystemTime,
) -> Result<Freshness, NoStore> {
    // Only final, complete responses: a 206 is part of one, a 304 says nothing by itself.
    if status.is_informational()
        || status == StatusCode::PARTIAL_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Err(NoStore::Status);
    }
    let fields = ResponseFields::read(headers, &rules.targeted);
    let (cc, targeted) = fields.directives(headers, &rules.targeted);
    // RFC 9111 §5.2.2.3: with must-understand, store only understood statuses, and then
    // no-store does not apply.
    if cc.must_understand {
        if !UNDERSTOOD.contains(&status.as_u16()) {
            return Err(NoStore::MustUnderstand);
        }
    } else if cc.no_store {
        return Err(NoStore::NoStore);
    }
    if cc.private {
        return Err(NoStore::Private);
    }
    if !rules.store_set_cookie && fields.set_cookie {
        return Err(NoStore::SetCookie);
    }
    if fields.vary_star {
        return Err(NoStore::VaryStar);
    }
    // §3.5: a shared cache stores a response to an authorized request only if the response
    // explicitly allows it.
    if credentials.authorization && !(cc.public || cc.s_maxage.is_some() || cc.must_revalidate) {
        return Err(NoStore::Authorization);
    }
    // A cookie often carries a session the origin answers for without saying so in `Vary`:
    // shared only when the response says it is for everyone (Varnish's builtin rule).
    if credentials.cookie && !rules.share_cookie_requests && !(cc.public || cc.s_maxage.is_some()) {
        return Err(NoStore::CookieRequest);
    }
    let date = date_of(fields.date);
    // §4.2.1: s-maxage, then max-age, then Expires - Date (Expires is ignored when a targeted
    // field governs, RFC 9213 §2.1).
    let explicit = if let Some(s) = cc.s_maxage.or(cc.max_age) {
        Some(Duration::from_secs(s))
    } else if !targeted && fields.expires.is_some() {
        // §5.3: an invalid Expires (e.g. "0") means already expired.
        match date_of(fields.expires) {
            Some(exp) => Some(
                exp.duration_since(date.unwrap_or(now))
                    .unwrap_or(Duration::ZERO),
            ),
            None => Some(Duration::ZERO),
        }
    } else {
        None
    };
    let lifetime = match explicit {
        Some(l) => l,
        // §5.2.2.4: no-cache responses are stored to be revalidated on every use; their
        // lifetime does not matter (a validator is checked below).
        None if cc.no_cache => Duration::ZERO,
        // §3: any final status with explicit freshness may be stored; without it, only the
        // heuristically cacheable ones.
        None if !rules.statuses.contains(&status.as_u16()) => return Err(NoStore::Status),
        None => match (rules.heuristic_max, date_of(fields.last_modified)) {
            // §4.2.2: a fraction (10 %) of the time since Last-Modified.
            (Some(cap), Some(lm)) => date
                .unwrap_or(now)
                .duration_since(lm)
                .map_or(Duration::ZERO, |d| d / 10)
                .min(cap),
            _ => rules.default_ttl.ok_or(NoStore::NotFresh)?,
        },
    };
    let apparent = date
        .and_then(|d| now.duration_since(d).ok())
        .unwrap_or(Duration::ZERO);
    let may_serve_stale = !(cc.must_revalidate || cc.no_cache);
    let stale = |d: Duration| if may_serve_stale { d } else { Duration::ZERO };
    let freshness = Freshness {
        lifetime,
        initial_age: age_of(fields.age).max(apparent),
        no_cache: cc.no_cache,
        stale_while_revalidate: stale(Duration::from_secs(cc.stale_while_revalidate.unwrap_or(0))),
        stale_if_error: stale(
            cc.stale_if_error
                .map_or(rules.stale_if_error, Duration::from_secs),
        ),
    };
    // Stale on arrival: worth keeping only if it can be revalidated.
    if freshness.remaining().is_zero() && !(fields.etag || fields.last_modified.is_some()) {
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

/// Fields a 304 never updates (RFC 9111 §3.2): those that describe the stored body itself (its
/// length, coding, digest, range) and the validator that selected it.
const NOT_UPDATED_BY_304: [&str; 5] = [
    "content-length",
    "content-encoding",
    "content-md5",
    "content-range",
    "etag",
];

/// The stored header fields updated by a `304 Not Modified` (RFC 9111 §3.2, §4.3.4): every field
/// the 304 carries replaces the stored field of that name, except those that describe the stored
/// body (`Content-Length`, `Content-Encoding`, `Content-MD5`, `Content-Range`) and its `ETag`.
pub fn updated_headers(stored: &HeaderMap, not_modified: &HeaderMap) -> HeaderMap {
    let mut out = stored.clone();
    for name in not_modified.keys() {
        if NOT_UPDATED_BY_304.contains(&name.as_str()) {
            continue;
        }
        out.remove(name);
        for v in not_modified.get_all(name) {
            if let Ok(v) = HeaderValue::from_bytes(v.as_bytes()) {
                out.append(name.clone(), v);
            }
        }
    }
    out
}

/// Whether a 304 is about the stored response (RFC 9111 §4.3.4): its ETag, if it has one,
/// matches the stored one (weak comparison).
pub fn validates(stored: &HeaderMap, not_modified: &HeaderMap) -> bool {
    let weak = |v: &HeaderValue| {
        v.to_str()
            .map(|s| s.trim().trim_start_matches("W/").to_string())
            .ok()
    };
    match (
        stored.get(header::ETAG).and_then(weak),
        not_modified.get(header::ETAG).and_then(weak),
    ) {
        (Some(a), Some(b)) => a == b,
        (None, Some(_)) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_headers::h;
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn date(secs: u64) -> String {
        httpdate::fmt_http_date(t(secs))
    }

    fn ok(hs: &[(&str, &str)]) -> Result<Freshness, NoStore> {
        storability(
            StatusCode::OK,
            &h(hs),
            Credentials::NONE,
            &StoreRules::default(),
            t(0),
        )
    }

    /// The fast IMF-fixdate reading agrees with `httpdate` on every input of its length.
    fn agrees(s: &str) {
        let fast = <&[u8; 29]>::try_from(s.as_bytes())
            .ok()
            .and_then(parse_fixdate);
        assert_eq!(fast, httpdate::parse_http_date(s).ok(), "{s:?}");
    }

    #[test]
    fn fixdates_read_as_httpdate_reads_them() {
        let at =
            |secs: u64| httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
        // Every day of the first four years from 1970 and of two years either side of 2000 and
        // 2100 (the leap-year rules' edges), then 200,000 dates in a stride through 1970-9999
        // at varied times of day.
        for year_start in [0, 946_684_800 - 800 * 86_400, 4_102_444_800 - 800 * 86_400] {
            for day in 0..1_600u64 {
                agrees(&at(year_start + day * 86_400 + day * 37 % 86_400));
            }
        }
        let last = 253_402_300_799; // 9999-12-31T23:59:59Z
        for i in 0..200_000u64 {
            agrees(&at(i * (last / 200_000) + i % 86_400));
        }
        agrees(&at(last));
        // One byte changed anywhere: other names, digits out of range, wrong weekdays, the
        // wrong case, separators gone (each then read, or refused, as `httpdate` does).
        for base in [at(951_782_400), at(1_700_000_000), at(last)] {
            for i in 0..29 {
                for c in b"0123456789 :,-ADFGJMNOSTWabcdefgilmnoprstuvy\x7f".iter() {
                    let mut b = base.clone().into_bytes();
                    b[i] = *c;
                    if let Ok(s) = String::from_utf8(b) {
                        agrees(&s);
                    }
                }
            }
        }
        // Past 9999 and before 1970, day 00, 31 of a 30-day month, 29 February off leap years.
        for s in [
            "Fri, 01 Jan 1960 00:00:00 GMT",
            "Mon, 00 Jan 2024 00:00:00 GMT",
            "Mon, 31 Apr 2024 00:00:00 GMT",
            "Thu, 29 Feb 2100 00:00:00 GMT",
            "Tue, 29 Feb 2000 00:00:00 GMT",
            "Sun, 31 Dec 9999 23:59:60 GMT",
        ] {
            agrees(s);
        }
        // The general path still takes what the fast one leaves.
        assert_eq!(
            parse_date("Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777))
        );
        assert_eq!(
            parse_date("sun, 06 NOV 1994 08:49:37 gmt"),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777))
        );
        assert_eq!(parse_date("Xue, 14 Nov 2023 22:13:22 GMT"), None);
    }

    #[test]
    fn freshness_prefers_s_maxage_then_max_age_then_expires() {
        // RFC 9111 §4.2.1.
        assert_eq!(
            ok(&[("cache-control", "max-age=60, s-maxage=30")])
                .unwrap()
                .lifetime,
            Duration::from_secs(30)
        );
        assert_eq!(
            ok(&[("cache-control", "max-age=60")]).unwrap().lifetime,
            Duration::from_secs(60)
        );
        let (d0, d100) = (date(0), date(100));
        let fr = ok(&[("date", &d0), ("expires", &d100)]).unwrap();
        assert_eq!(fr.lifetime, Duration::from_secs(100));
        // §5.3: an invalid Expires is already expired; with no validator it is not kept.
        assert_eq!(
            ok(&[("date", &d0), ("expires", "0")]),
            Err(NoStore::NotFresh)
        );
        assert_eq!(ok(&[]), Err(NoStore::NotFresh));
        let rules = StoreRules {
            default_ttl: Some(Duration::from_secs(5)),
            ..StoreRules::default()
        };
        let f = storability(StatusCode::OK, &h(&[]), Credentials::NONE, &rules, t(0)).unwrap();
        assert_eq!(f.lifetime, Duration::from_secs(5));
    }

    #[test]
    fn expires_in_all_three_formats_and_any_case() {
        // RFC 9110 §5.6.7: IMF-fixdate, RFC 850, asctime; real traffic also gets the case wrong.
        let d0 = date(0);
        for exp in [
            "Tue, 14 Nov 2023 22:15:00 GMT",
            "Tuesday, 14-Nov-23 22:15:00 GMT",
            "Tue Nov 14 22:15:00 2023",
            "tue, 14 NOV 2023 22:15:00 gmt",
        ] {
            let f =
                ok(&[("date", &d0), ("expires", exp)]).unwrap_or_else(|e| panic!("{exp}: {e:?}"));
            assert_eq!(f.lifetime, Duration::from_secs(100), "{exp}");
        }
    }

    #[test]
    fn age_counts_against_freshness_and_invalid_ages_are_ignored() {
        // A max-age=60 response dated at 0 with this Age, stored at 30 s.
        let dated = |age: &str| {
            storability(
                StatusCode::OK,
                &h(&[
                    ("cache-control", "max-age=60"),
                    ("age", age),
                    ("date", &date(0)),
                ]),
                Credentials::NONE,
                &StoreRules::default(),
                t(30),
            )
            .unwrap()
        };
        // §4.2.3: the initial age is max(Age, now - Date).
        let fr = dated("20");
        assert_eq!(fr.initial_age, Duration::from_secs(30));
        assert_eq!(fr.remaining(), Duration::from_secs(30));
        assert_eq!(
            ok(&[("cache-control", "max-age=60"), ("age", "61")]),
            Err(NoStore::NotFresh)
        );
        // §5.1: the first member of a list; an invalid value is ignored.
        assert_eq!(age_field(&h(&[("age", "10, 50")])), Duration::from_secs(10));
        assert_eq!(
            age_field(&h(&[("age", "7200, 0")])),
            Duration::from_secs(7200)
        );
        assert_eq!(age_field(&h(&[])), Duration::ZERO);
        for bad in ["-5", "-7200", "1.5", "7200.0", "abc", "", "7200;foo=bar"] {
            assert_eq!(age_field(&h(&[("age", bad)])), Duration::ZERO, "{bad}");
        }
        let fresh = ok(&[("cache-control", "max-age=3600"), ("age", "abc")]).unwrap();
        assert_eq!(fresh.remaining(), Duration::from_secs(3600));
        // An ignored Age leaves Date to say how old the response is; a valid one counts.
        assert_eq!(dated("-7200").initial_age, Duration::from_secs(30));
        assert_eq!(dated("45").initial_age, Duration::from_secs(45));
        // §1.2.2: too large is 2^31.
        assert_eq!(
            age_field(&h(&[("age", "99999999999999999999")])),
            Duration::from_secs(DELTA_SECONDS_MAX)
        );
    }

    #[test]
    fn heuristic_freshness_is_a_tenth_of_the_age_since_last_modified() {
        // §4.2.2, capped by the rule.
        let (d0, lm) = (
            date(0),
            httpdate::fmt_http_date(t(0) - Duration::from_secs(1000)),
        );
        let f = ok(&[("date", &d0), ("last-modified", &lm)]).unwrap();
        assert_eq!(f.lifetime, Duration::from_secs(100));
        let old = httpdate::fmt_http_date(t(0) - Duration::from_secs(100 * 86_400));
        assert_eq!(
            ok(&[("date", &d0), ("last-modified", &old)])
                .unwrap()
                .lifetime,
            Duration::from_secs(86_400)
        );
        // Not for statuses outside the heuristic list.
        let r = storability(
            StatusCode::FOUND,
            &h(&[("date", &d0), ("last-modified", &lm)]),
            Credentials::NONE,
            &StoreRules::default(),
            t(0),
        );
        assert_eq!(r, Err(NoStore::Status));
    }

    #[test]
    fn any_final_status_with_explicit_freshness_may_be_stored() {
        // §3: 302, 307, 400 and 5xx with max-age; never 1xx or 206.
        for code in [302u16, 307, 400, 500, 502, 503] {
            let s = StatusCode::from_u16(code).unwrap();
            let r = storability(
                s,
                &h(&[("cache-control", "max-age=9")]),
                Credentials::NONE,
                &StoreRules::default(),
                t(0),
            );
            assert!(r.is_ok(), "{code}");
        }
        let r = storability(
            StatusCode::PARTIAL_CONTENT,
            &h(&[("cache-control", "max-age=9")]),
            Credentials::NONE,
            &StoreRules::default(),
            t(0),
        );
        assert_eq!(r, Err(NoStore::Status));
    }

    #[test]
    fn must_understand_overrides_no_store_for_understood_statuses_only() {
        // §5.2.2.3.
        let cc = [("cache-control", "must-understand, no-store, max-age=60")];
        assert!(ok(&cc).is_ok());
        let r = storability(
            StatusCode::from_u16(299).unwrap(),
            &h(&cc),
            Credentials::NONE,
            &StoreRules::default(),
            t(0),
        );
        assert_eq!(r, Err(NoStore::MustUnderstand));
    }

    #[test]
    fn no_cache_and_must_revalidate_are_stored_but_never_served_stale() {
        // §5.2.2.4 / §5.2.2.2: stored, revalidated on every use / once stale.
        let f = ok(&[("cache-control", "no-cache, max-age=60"), ("etag", "\"1\"")]).unwrap();
        assert!(f.no_cache);
        assert_eq!(f.remaining(), Duration::ZERO);
        assert_eq!(f.stale_while_revalidate, Duration::ZERO);
        // Without a validator a no-cache response cannot be revalidated: not kept; with one,
        // it is kept even without any freshness information.
        assert_eq!(ok(&[("cache-control", "no-cache")]), Err(NoStore::NotFresh));
        assert!(ok(&[("cache-control", "no-cache"), ("etag", "\"a\"")]).is_ok());
        let f = ok(&[("cache-control", "max-age=0"), ("last-modified", &date(0))]).unwrap();
        assert_eq!(f.remaining(), Duration::ZERO);
        let f = ok(&[(
            "cache-control",
            "max-age=10, must-revalidate, stale-while-revalidate=60, stale-if-error=60",
        )])
        .unwrap();
        assert_eq!(
            (f.stale_while_revalidate, f.stale_if_error),
            (Duration::ZERO, Duration::ZERO)
        );
    }

    #[test]
    fn stale_extensions_and_the_configured_default() {
        // RFC 5861 §3, §4.
        let f = ok(&[(
            "cache-control",
            "max-age=10, stale-while-revalidate=30, stale-if-error=600",
        )])
        .unwrap();
        assert_eq!(f.stale_while_revalidate, Duration::from_secs(30));
        assert_eq!(f.stale_if_error, Duration::from_secs(600));
        let rules = StoreRules {
            stale_if_error: Duration::from_secs(3600),
            ..StoreRules::default()
        };
        let f = storability(
            StatusCode::OK,
            &h(&[("cache-control", "max-age=10")]),
            Credentials::NONE,
            &rules,
            t(0),
        )
        .unwrap();
        assert_eq!(f.stale_if_error, Duration::from_secs(3600));
    }

    #[test]
    fn cdn_cache_control_governs_this_cache() {
        // RFC 9213 §2.1: the targeted field wins, and Expires is ignored with it.
        let d0 = date(0);
        let f = ok(&[
            ("cache-control", "no-store"),
            ("cdn-cache-control", "max-age=600"),
        ])
        .unwrap();
        assert_eq!(f.lifetime, Duration::from_secs(600));
        let r = ok(&[
            ("cache-control", "max-age=600"),
            ("cdn-cache-control", "no-store"),
        ]);
        assert_eq!(r, Err(NoStore::NoStore));
        let d100 = date(100);
        let r = ok(&[
            ("date", &d0),
            ("expires", &d100),
            ("cdn-cache-control", "public"),
        ]);
        assert_eq!(
            r,
            Err(NoStore::NotFresh),
            "Expires does not apply under a targeted field"
        );
    }

    #[test]
    fn a_cookie_request_shares_only_what_says_it_is_for_everyone() {
        let cookie = Credentials {
            authorization: false,
            cookie: true,
        };
        let both = Credentials {
            authorization: true,
            cookie: true,
        };
        let lm = httpdate::fmt_http_date(t(0) - Duration::from_secs(86_400 * 30));
        let check = |cc: &str, who: Credentials, rules: &StoreRules| {
            let mut hs = vec![("last-modified", lm.as_str())];
            if !cc.is_empty() {
                hs.push(("cache-control", cc));
            }
            storability(StatusCode::OK, &h(&hs), who, rules, t(0))
        };
        let rules = StoreRules::default();
        // Heuristic freshness only (web cache deception): never shared.
        assert_eq!(check("", cookie, &rules), Err(NoStore::CookieRequest));
        assert_eq!(
            check("max-age=60", cookie, &rules),
            Err(NoStore::CookieRequest)
        );
        assert_eq!(
            check("must-revalidate, max-age=60", cookie, &rules),
            Err(NoStore::CookieRequest)
        );
        assert!(check("public", cookie, &rules).is_ok());
        assert!(check("s-maxage=60", cookie, &rules).is_ok());
        assert!(check("", Credentials::NONE, &rules).is_ok());
        // With both, each rule holds: must-revalidate satisfies §3.5 but not the cookie rule.
        assert_eq!(
            check("must-revalidate, max-age=60", both, &rules),
            Err(NoStore::CookieRequest)
        );
        assert!(check("public, max-age=60", both, &rules).is_ok());
        let sharing = StoreRules {
            share_cookie_requests: true,
            ..StoreRules::default()
        };
        assert!(check("", cookie, &sharing).is_ok());
        assert!(check("max-age=60", cookie, &sharing).is_ok());
        assert_eq!(
            check("max-age=60", both, &sharing),
            Err(NoStore::Authorization)
        );
    }

    #[test]
    fn what_is_never_stored() {
        let cc = |v: &str| vec![("cache-control", v.to_string())];
        let check = |hs: Vec<(&str, String)>, auth: bool| {
            let pairs: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            storability(
                StatusCode::OK,
                &h(&pairs),
                Credentials {
                    authorization: auth,
                    cookie: false,
                },
                &StoreRules::default(),
                t(0),
            )
        };
        assert_eq!(
            check(cc("no-store, max-age=60"), false),
            Err(NoStore::NoStore)
        );
        assert_eq!(
            check(cc("private, max-age=60"), false),
            Err(NoStore::Private)
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
        for code in [200u16, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501] {
            let s = StatusCode::from_u16(code).unwrap();
            let r = storability(
                s,
                &h(&[("cache-control", "max-age=9")]),
                Credentials::NONE,
                &StoreRules::default(),
                t(0),
            );
            assert!(r.is_ok(), "{code}");
        }
    }

    #[test]
    fn a_304_updates_the_stored_fields_but_not_the_length() {
        // §3.2, §4.3.4.
        let stored = h(&[
            ("etag", "\"1\""),
            ("cache-control", "max-age=10"),
            ("content-length", "5"),
            ("x-a", "old"),
        ]);
        let nm = h(&[
            ("etag", "\"1\""),
            ("cache-control", "max-age=99"),
            ("content-length", "0"),
            ("content-encoding", "gzip"),
            ("x-b", "new"),
        ]);
        assert!(validates(&stored, &nm));
        let u = updated_headers(&stored, &nm);
        assert_eq!(u["cache-control"], "max-age=99");
        assert_eq!(u["content-length"], "5");
        assert!(
            !u.contains_key("content-encoding"),
            "describes the body: never from a 304"
        );
        assert_eq!(
            (&u["x-a"], &u["x-b"]),
            (
                &"old".parse::<HeaderValue>().unwrap(),
                &"new".parse::<HeaderValue>().unwrap()
            )
        );
        assert!(!validates(&stored, &h(&[("etag", "\"2\"")])));
        assert!(validates(&stored, &h(&[("etag", "W/\"1\"")])));
        assert!(validates(&stored, &h(&[])));
    }
}
