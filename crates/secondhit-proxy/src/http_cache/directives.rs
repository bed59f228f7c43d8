//! Cache directives: `Cache-Control` (RFC 9111 §5.2), its stale extensions (RFC 5861), and the
//! targeted fields (RFC 9213: `CDN-Cache-Control`, or a configured name such as
//! `Surrogate-Control`) that take its place for this cache.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// RFC 9111 §1.2.2: a delta-seconds value too large to represent, or a calculation on it that
/// overflows, is taken as 2^31 seconds.
pub const DELTA_SECONDS_MAX: u64 = 1 << 31;

/// The directives that matter to a shared cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `no-store`.
    pub no_store: bool,
    /// `no-cache` (with or without field names: treated the same, revalidate on every use).
    pub no_cache: bool,
    /// `private` (with or without field names: treated the same, never stored here).
    pub private: bool,
    /// `public`.
    pub public: bool,
    /// `must-revalidate` or `proxy-revalidate`: never served stale.
    pub must_revalidate: bool,
    /// `must-understand`: store only statuses this cache understands (and then ignore
    /// `no-store`).
    pub must_understand: bool,
    /// `max-age=N` seconds (an invalid value is 0: stale).
    pub max_age: Option<u64>,
    /// `s-maxage=N` seconds (an invalid value is 0: stale).
    pub s_maxage: Option<u64>,
    /// `stale-while-revalidate=N` seconds (RFC 5861 §3).
    pub stale_while_revalidate: Option<u64>,
    /// `stale-if-error=N` seconds (RFC 5861 §4).
    pub stale_if_error: Option<u64>,
}

/// A delta-seconds argument: digits only (quotes and spaces around them allowed), capped at
/// 2^31; anything else is `None` (invalid).
fn delta_seconds(arg: &[u8]) -> Option<u64> {
    let mut arg = arg.trim_ascii();
    while let [b'"', rest @ ..] = arg {
        arg = rest;
    }
    while let [rest @ .., b'"'] = arg {
        arg = rest;
    }
    if arg.is_empty() || !arg.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // Past 2^31 the value is capped, so the digits after the eleventh do not matter.
    Some(arg.iter().fold(0u64, |n, &d| {
        (n * 10 + u64::from(d - b'0')).min(DELTA_SECONDS_MAX)
    }))
}

impl CacheControl {
    /// Parses every `Cache-Control` field of `headers`.
    pub fn parse(headers: &HeaderMap) -> CacheControl {
        Self::parse_field(headers, &header::CACHE_CONTROL)
    }

    /// Parses every line of the field `name`. Directive names are case-insensitive. When a
    /// directive repeats, the first occurrence counts (RFC 9111 §4.2.1); an invalid
    /// `max-age`/`s-maxage` value makes the response stale (0), as §4.2.1 encourages; invalid
    /// stale extensions are ignored.
    pub fn parse_field(headers: &HeaderMap, name: &HeaderName) -> CacheControl {
        let mut cc = CacheControl::default();
        for value in headers.get_all(name) {
            cc.read(value);
        }
        cc
    }

    /// Adds the directives of one field line; the lines of a field are read in order, so a
    /// directive already set by an earlier line keeps its first value. A line that is not
    /// visible ASCII is ignored.
    pub fn read(&mut self, value: &HeaderValue) {
        // Visible ASCII only, then compared as bytes.
        let Ok(text) = value.to_str() else { return };
        for directive in text.as_bytes().split(|&b| b == b',') {
            let (name, arg) = match directive.iter().position(|&b| b == b'=') {
                Some(i) => (directive[..i].trim_ascii(), Some(&directive[i + 1..])),
                None => (directive.trim_ascii(), None),
            };
            let first = |slot: &mut Option<u64>, invalid_is_zero: bool| {
                if slot.is_none() {
                    *slot = match arg.map(delta_seconds) {
                        Some(Some(n)) => Some(n),
                        _ if invalid_is_zero => Some(0),
                        _ => None,
                    };
                }
            };
            // Compared in place: no lowercased copy of each directive.
            let is = |d: &str| name.eq_ignore_ascii_case(d.as_bytes());
            if is("max-age") {
                first(&mut self.max_age, true);
            } else if is("public") {
                self.public = true;
            } else if is("no-cache") {
                self.no_cache = true;
            } else if is("no-store") {
                self.no_store = true;
            } else if is("private") {
                self.private = true;
            } else if is("s-maxage") {
                first(&mut self.s_maxage, true);
            } else if is("must-revalidate") || is("proxy-revalidate") {
                self.must_revalidate = true;
            } else if is("must-understand") {
                self.must_understand = true;
            } else if is("stale-while-revalidate") {
                first(&mut self.stale_while_revalidate, false);
            } else if is("stale-if-error") {
                first(&mut self.stale_if_error, false);
            }
        }
    }

    /// The directives that govern this cache's use of a response (RFC 9213 §2.1): those of the
    /// first field of `targeted` present with a non-empty value, in which case `Cache-Control`
    /// and `Expires` are ignored (the second value says so); else `Cache-Control`'s.
    pub fn for_this_cache(headers: &HeaderMap, targeted: &[HeaderName]) -> (CacheControl, bool) {
        super::freshness::ResponseFields::read(headers, targeted).directives(headers, targeted)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_headers::h;
    use super::*;

    #[test]
    fn directives_parse_case_quotes_and_first_occurrence() {
        let cc = CacheControl::parse(&h(&[
            ("cache-control", "Public, MAX-AGE=\"60\""),
            (
                "cache-control",
                "s-maxage=10, no-cache=\"set-cookie\", max-age=5",
            ),
        ]));
        assert!(cc.public && cc.no_cache && !cc.private);
        // RFC 9111 §4.2.1: the first max-age counts.
        assert_eq!((cc.max_age, cc.s_maxage), (Some(60), Some(10)));
    }

    #[test]
    fn invalid_delta_seconds_are_stale_and_huge_ones_are_capped() {
        // §4.2.1: invalid freshness information is treated as stale.
        for bad in [
            "max-age=x",
            "max-age=-1",
            "max-age=1.5",
            "max-age=",
            "max-age",
        ] {
            let cc = CacheControl::parse(&h(&[("cache-control", bad)]));
            assert_eq!(cc.max_age, Some(0), "{bad}");
        }
        // §1.2.2: too large to represent is 2^31.
        let cc = CacheControl::parse(&h(&[("cache-control", "max-age=99999999999999999999999")]));
        assert_eq!(cc.max_age, Some(DELTA_SECONDS_MAX));
        let cc = CacheControl::parse(&h(&[("cache-control", "stale-while-revalidate=abc")]));
        assert_eq!(cc.stale_while_revalidate, None);
    }

    #[test]
    fn stale_extensions_and_must_understand() {
        let cc = CacheControl::parse(&h(&[(
            "cache-control",
            "max-age=1, stale-while-revalidate=30, stale-if-error=600, must-understand, proxy-revalidate",
        )]));
        assert_eq!(cc.stale_while_revalidate, Some(30));
        assert_eq!(cc.stale_if_error, Some(600));
        assert!(cc.must_understand && cc.must_revalidate);
    }

    #[test]
    fn a_targeted_field_replaces_cache_control() {
        // RFC 9213 §2.1.
        let targeted = [HeaderName::from_static("cdn-cache-control")];
        let headers = h(&[
            ("cache-control", "no-store"),
            ("cdn-cache-control", "max-age=600"),
        ]);
        let (cc, used) = CacheControl::for_this_cache(&headers, &targeted);
        assert!(used && !cc.no_store);
        assert_eq!(cc.max_age, Some(600));
        let headers = h(&[("cache-control", "max-age=5"), ("cdn-cache-control", " ")]);
        let (cc, used) = CacheControl::for_this_cache(&headers, &targeted);
        assert!(!used);
        assert_eq!(cc.max_age, Some(5));
        // By the names' precedence, not their order in the head; an empty line is no field.
        let targeted = [
            HeaderName::from_static("cdn-cache-control"),
            HeaderName::from_static("surrogate-control"),
        ];
        let headers = h(&[
            ("surrogate-control", "max-age=7"),
            ("cache-control", "max-age=5"),
            ("cdn-cache-control", "max-age=9"),
        ]);
        let (cc, used) = CacheControl::for_this_cache(&headers, &targeted);
        assert!(used);
        assert_eq!(cc.max_age, Some(9));
        let headers = h(&[
            ("cdn-cache-control", ""),
            ("surrogate-control", "max-age=7"),
            ("cache-control", "max-age=5"),
        ]);
        assert_eq!(
            CacheControl::for_this_cache(&headers, &targeted).0.max_age,
            Some(7)
        );
        // Every Cache-Control line counts, the first occurrence of a directive first.
        let headers = h(&[
            ("cache-control", "max-age=5"),
            ("date", "x"),
            ("cache-control", "max-age=6, private"),
        ]);
        let (cc, used) = CacheControl::for_this_cache(&headers, &targeted);
        assert!(!used && cc.private);
        assert_eq!(cc.max_age, Some(5));
    }

    #[test]
    fn an_invalid_targeted_field_is_ignored_as_a_whole() {
        // RFC 9213 §2.1: not a Structured Field Dictionary, or a directive of the wrong type:
        // as though absent, so Cache-Control (or the next targeted field) governs.
        let targeted = [
            HeaderName::from_static("cdn-cache-control"),
            HeaderName::from_static("surrogate-control"),
        ];
        for bad in ["max-age=10000, &&&&&", "max-age=\"10000\"", "max-age =100"] {
            let headers = h(&[("cdn-cache-control", bad), ("cache-control", "no-store")]);
            let (cc, used) = CacheControl::for_this_cache(&headers, &targeted);
            assert!(!used && cc.no_store && cc.max_age.is_none(), "{bad}");
        }
        // Every line together: a bad second line spoils the field.
        let headers = h(&[
            ("cdn-cache-control", "max-age=600"),
            ("cdn-cache-control", "s-maxage=\"5\""),
            ("surrogate-control", "max-age=60+30"),
            ("cache-control", "no-store"),
        ]);
        let (cc, used) = CacheControl::for_this_cache(&headers, &targeted);
        // Surrogate-Control is not a Structured Field: read as it comes (max-age=60+30 is not
        // delta-seconds, so stale), and it governs since CDN-Cache-Control is ignored.
        assert!(used && !cc.no_store);
        assert_eq!(cc.max_age, Some(0));
        let headers = h(&[
            ("cdn-cache-control", "max-age=600"),
            ("cdn-cache-control", "stale-if-error=30"),
            ("cache-control", "no-store"),
        ]);
        let (cc, used) = CacheControl::for_this_cache(&headers, &targeted);
        assert!(used && !cc.no_store);
        assert_eq!((cc.max_age, cc.stale_if_error), (Some(600), Some(30)));
    }
}
