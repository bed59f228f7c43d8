//! Conditional and range requests answered from a stored response (RFC 9110 §13, RFC 9111
//! §4.3.2): the preconditions in the order of RFC 9110 §13.2.2, then the range. One pure
//! function, [`conditional_answer`], of the request, the stored response's validators and its length; the
//! proxy builds the answer it names.
//!
//! Steps 1 and 2 of §13.2.2 (`If-Match`, `If-Unmodified-Since`) name the origin server as
//! their recipient, and RFC 9111 §4.3.2 sums up that those two fields "are not applicable to a
//! cache". This cache evaluates them all the same (as nginx does), against the response it is
//! about to send: a stored response that fails them is not the representation the client made
//! its request conditional on, and sending it anyway would, for a resumed download (`If-Match`
//! or `If-Unmodified-Since` with `Range`), splice bytes of two versions of a file. Answering 412
//! is what the origin would answer for the representation the cache holds.

use super::range::{range_answer, RangeAnswer};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use std::time::{Duration, SystemTime};

/// A stored response's validators, as stored (each looked up once, only for a request that
/// carries a condition or a range).
#[derive(Clone, Debug, Default)]
pub struct Validators {
    /// `ETag`.
    pub etag: Option<HeaderValue>,
    /// `Last-Modified`.
    pub last_modified: Option<HeaderValue>,
    /// `Date`.
    pub date: Option<HeaderValue>,
}

/// What a stored response answers to a request, its preconditions and range evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Conditional {
    /// 412: `If-Match` or `If-Unmodified-Since` is false (or `If-None-Match` on a method other
    /// than GET and HEAD).
    PreconditionFailed,
    /// 304: `If-None-Match` or `If-Modified-Since` is false for GET or HEAD.
    NotModified,
    /// The stored response: whole, one range of it (206), or 416.
    Send(RangeAnswer),
}

/// The request fields [`conditional_answer`] reads: a request with none of them gets the stored
/// response whole, and its validators need not be looked up.
const FIELDS: [header::HeaderName; 6] = [
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_RANGE,
    header::RANGE,
];

/// Whether `request` carries a precondition or a range ([`conditional_answer`] has something
/// to do). Every HIT asks: one pass over the request's field names, comparing standard names
/// (no hashing, as six look-ups would).
pub fn is_conditional(request: &HeaderMap) -> bool {
    request.keys().any(|k| FIELDS.contains(k))
}

/// Evaluates `request`'s preconditions against a stored response of `status` with `stored`
/// validators and a body of `len` bytes, in the order RFC 9110 §13.2.2 gives, then its range.
/// Malformed fields never make a stored response served where a well-formed one would not be:
/// an entity-tag list that does not parse matches nothing, and a date that does not parse is
/// ignored where the RFC says so.
pub fn conditional_answer(
    method: &Method,
    status: StatusCode,
    request: &HeaderMap,
    stored: &Validators,
    len: u64,
) -> Conditional {
    // RFC 9110 §13.2.1: "A server MUST ignore all received preconditions if its response to the
    // same request without those conditions, prior to processing the request content, would
    // have been a status code other than a 2xx (Successful) or 412 (Precondition Failed)."
    if !status.is_success() {
        return Conditional::Send(RangeAnswer::Full);
    }
    let get_or_head = *method == Method::GET || *method == Method::HEAD;
    // §13.2.2 step 1: "When recipient is the origin server and If-Match is present, evaluate
    // the If-Match precondition: if true, continue to step 3; if false, respond 412".
    if request.contains_key(header::IF_MATCH) {
        if !if_match(request, stored.etag.as_ref()) {
            return Conditional::PreconditionFailed;
        }
    } else if let Some(since) = single_date(request, &header::IF_UNMODIFIED_SINCE) {
        // Step 2: "When ... If-Match is not present, and If-Unmodified-Since is present,
        // evaluate the If-Unmodified-Since precondition". §13.1.4: "A recipient MUST ignore the
        // If-Unmodified-Since header field if the received field value is not a valid
        // HTTP-date" and "if the resource does not have a modification date available"; false
        // when "the selected representation's last modification date is more recent than the
        // date provided in the field value".
        if date(stored.last_modified.as_ref()).is_some_and(|lm| lm > since) {
            return Conditional::PreconditionFailed;
        }
    }
    // Step 3: "When If-None-Match is present, evaluate the If-None-Match precondition: if
    // false for GET/HEAD, respond 304 (Not Modified); if false for other methods, respond 412".
    if request.contains_key(header::IF_NONE_MATCH) {
        if if_none_match_fails(request, stored.etag.as_ref()) {
            return if get_or_head {
                Conditional::NotModified
            } else {
                Conditional::PreconditionFailed
            };
        }
    } else if get_or_head {
        // Step 4: "When the method is GET or HEAD, If-None-Match is not present, and
        // If-Modified-Since is present, evaluate the If-Modified-Since precondition: if false,
        // respond 304". RFC 9111 §4.3.2: without a Last-Modified, "a cache SHOULD use the stored
        // response's Date field value".
        if let Some(since) = single_date(request, &header::IF_MODIFIED_SINCE) {
            let modified = date(stored.last_modified.as_ref()).or(date(stored.date.as_ref()));
            if modified.is_some_and(|m| m <= since) {
                return Conditional::NotModified;
            }
        }
    }
    // Step 5: "When the method is GET and both Range and If-Range are present, evaluate the
    // If-Range precondition: if true and the Range is applicable to the selected
    // representation, respond 206 (Partial Content); otherwise, ignore the Range header field
    // and respond 200 (OK)". §14.2: "GET is the only method for which range handling is
    // defined"; only a whole stored 200 has ranges to give.
    let range = request.get(header::RANGE);
    if *method != Method::GET || status != StatusCode::OK || range.is_none() {
        return Conditional::Send(RangeAnswer::Full);
    }
    if let Some(condition) = request.get(header::IF_RANGE) {
        if !if_range(condition, stored) {
            return Conditional::Send(RangeAnswer::Full);
        }
    }
    Conditional::Send(range_answer(range, len))
}

/// Whether a conditional request is answered by the stored response with 304 (RFC 9110
/// §13.1): `If-None-Match` (weak comparison) takes precedence over `If-Modified-Since`. The
/// 304 rules of [`conditional_answer`] alone, for a stored 200 answering GET.
pub fn not_modified(
    request: &HeaderMap,
    etag: Option<&HeaderValue>,
    last_modified: Option<&HeaderValue>,
) -> bool {
    let mut only = request.clone();
    only.remove(header::IF_MATCH);
    only.remove(header::IF_UNMODIFIED_SINCE);
    let stored = Validators {
        etag: etag.cloned(),
        last_modified: last_modified.cloned(),
        date: None,
    };
    conditional_answer(&Method::GET, StatusCode::OK, &only, &stored, 0) == Conditional::NotModified
}

/// One entity-tag (RFC 9110 §8.8.3): `entity-tag = [ weak ] opaque-tag`, the opaque tag with
/// its quotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct EntityTag<'a> {
    weak: bool,
    opaque: &'a [u8],
}

impl EntityTag<'_> {
    /// §8.8.3.2: "Strong comparison: two entity tags are equivalent if both are not weak and
    /// their opaque-tags match character-by-character."
    fn strong_eq(&self, other: &EntityTag<'_>) -> bool {
        !self.weak && !other.weak && self.opaque == other.opaque
    }

    /// "Weak comparison: two entity tags are equivalent if their opaque-tags match
    /// character-by-character, regardless of either or both being tagged as "weak"."
    fn weak_eq(&self, other: &EntityTag<'_>) -> bool {
        self.opaque == other.opaque
    }
}

/// `etagc = "!" / %x23-7E / obs-text` (RFC 9110 §8.8.3).
fn is_etagc(b: u8) -> bool {
    b == b'!' || (0x23..=0x7e).contains(&b) || b >= 0x80
}

/// Parses one entity-tag at the start of `v`; returns it and the rest.
fn entity_tag(v: &[u8]) -> Option<(EntityTag<'_>, &[u8])> {
    let (weak, v) = match v.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let body = v.strip_prefix(b"\"")?;
    let close = body.iter().position(|&b| b == b'"')?;
    if !body[..close].iter().all(|&b| is_etagc(b)) {
        return None;
    }
    Some((
        EntityTag {
            weak,
            opaque: &v[..close + 2],
        },
        &body[close + 1..],
    ))
}

fn trim(v: &[u8]) -> &[u8] {
    let ows = |b: &u8| matches!(b, b' ' | b'\t');
    let start = v.iter().position(|b| !ows(b)).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !ows(b)).map_or(start, |e| e + 1);
    &v[start..end.max(start)]
}

/// The stored `ETag`, if it is one entity-tag (a malformed one validates nothing).
fn stored_tag(etag: Option<&HeaderValue>) -> Option<EntityTag<'_>> {
    let (tag, rest) = entity_tag(trim(etag?.as_bytes()))?;
    rest.is_empty().then_some(tag)
}

/// Whether any field line of `name` is `*`, or any entity-tag listed in them satisfies `hit`.
/// A list member that is not an entity-tag is skipped; the rest of a field line after a quote
/// that never closes is dropped.
fn any_listed(
    request: &HeaderMap,
    name: &header::HeaderName,
    hit: impl Fn(EntityTag<'_>) -> bool,
) -> bool {
    for line in request.get_all(name) {
        let mut v = trim(line.as_bytes());
        if v == b"*" {
            return true;
        }
        loop {
            while let [b' ' | b'\t' | b',', rest @ ..] = v {
                v = rest;
            }
            if v.is_empty() {
                break;
            }
            match entity_tag(v) {
                Some((tag, rest)) => {
                    if hit(tag) {
                        return true;
                    }
                    v = rest;
                }
                None => match v.iter().position(|&b| b == b',') {
                    Some(comma) => v = &v[comma..],
                    None => break,
                },
            }
        }
    }
    false
}

/// RFC 9110 §13.1.1: "If the field value is "*", the condition is true if the origin server
/// has a current representation for the target resource" (the stored one). "If the field
/// value is a list of entity tags, the condition is true if any of the listed tags match the
/// entity tag of the selected representation", by strong comparison.
fn if_match(request: &HeaderMap, etag: Option<&HeaderValue>) -> bool {
    let stored = stored_tag(etag);
    any_listed(request, &header::IF_MATCH, |t| {
        stored.is_some_and(|s| s.strong_eq(&t))
    })
}

/// RFC 9110 §13.1.2: "If the field value is "*", the condition is false if the origin server
/// has a current representation for the target resource. If the field value is a list of
/// entity tags, the condition is false if one of the listed tags matches the entity tag of the
/// selected representation", by weak comparison. True here means the condition is false.
fn if_none_match_fails(request: &HeaderMap, etag: Option<&HeaderValue>) -> bool {
    let stored = stored_tag(etag);
    any_listed(request, &header::IF_NONE_MATCH, |t| {
        stored.is_some_and(|s| s.weak_eq(&t))
    })
}

/// RFC 9110 §13.1.5: "1. If the HTTP-date validator provided is not a strong validator in the
/// sense defined by Section 8.8.2.2, the condition is false. 2. If the HTTP-date validator
/// provided exactly matches the Last-Modified field value for the selected representation, the
/// condition is true." For an entity-tag: "the condition is true if the entity-tag strongly
/// matches"; a weak one never does. Anything else is false: the whole response is sent.
fn if_range(condition: &HeaderValue, stored: &Validators) -> bool {
    let v = trim(condition.as_bytes());
    if v.starts_with(b"\"") || v.starts_with(b"W/") {
        let given = match entity_tag(v) {
            Some((tag, [])) => tag,
            _ => return false,
        };
        return stored_tag(stored.etag.as_ref()).is_some_and(|s| s.strong_eq(&given));
    }
    let Some(given) = std::str::from_utf8(v)
        .ok()
        .and_then(|s| httpdate::parse_http_date(s).ok())
    else {
        return false;
    };
    let Some(lm) = date(stored.last_modified.as_ref()) else {
        return false;
    };
    // §8.8.2.2: a Last-Modified compared "by an intermediate cache to the validator stored in
    // its cache entry" is strong only if "that cache entry includes a Date value which is at
    // least one second after the Last-Modified value".
    let strong = date(stored.date.as_ref()).is_some_and(|d| d >= lm + Duration::from_secs(1));
    strong && given == lm
}

/// A field's value as an HTTP-date: `None` if absent, not one date, or on several lines
/// (§13.1.3: "A recipient MUST ignore If-Modified-Since if ... the field value has more than
/// one member").
fn single_date(request: &HeaderMap, name: &header::HeaderName) -> Option<SystemTime> {
    let mut lines = request.get_all(name).iter();
    match (lines.next(), lines.next()) {
        (Some(v), None) => date(Some(v)),
        _ => None,
    }
}

fn date(v: Option<&HeaderValue>) -> Option<SystemTime> {
    httpdate::parse_http_date(v?.to_str().ok()?.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::super::test_headers::h;
    use super::*;

    const LM: &str = "Wed, 01 Jan 2025 00:00:00 GMT";
    const BEFORE: &str = "Tue, 31 Dec 2024 23:59:59 GMT";
    const AFTER: &str = "Wed, 01 Jan 2025 00:00:01 GMT";
    const DATE: &str = "Wed, 01 Jan 2025 00:00:10 GMT";

    fn stored() -> Validators {
        Validators {
            etag: Some(HeaderValue::from_static("\"v1\"")),
            last_modified: Some(HeaderValue::from_static(LM)),
            date: Some(HeaderValue::from_static(DATE)),
        }
    }

    fn get(pairs: &[(&str, &str)]) -> Conditional {
        conditional_answer(&Method::GET, StatusCode::OK, &h(pairs), &stored(), 100)
    }

    const FULL: Conditional = Conditional::Send(RangeAnswer::Full);

    fn partial(start: u64, end: u64) -> Conditional {
        Conditional::Send(RangeAnswer::Partial {
            start,
            end,
            content_range: HeaderValue::from_str(&format!("bytes {start}-{end}/100")).unwrap(),
        })
    }

    #[test]
    fn no_conditions_send_the_whole_response() {
        assert!(!is_conditional(&h(&[("accept", "*/*")])));
        assert!(is_conditional(&h(&[("if-range", "\"v1\"")])));
        assert_eq!(get(&[]), FULL);
    }

    #[test]
    fn if_match_compares_strongly_and_star_matches_what_is_stored() {
        use Conditional::*;
        assert_eq!(get(&[("if-match", "\"v1\"")]), FULL);
        assert_eq!(get(&[("if-match", "\"v0\", \"v1\"")]), FULL);
        assert_eq!(get(&[("if-match", "\"v0\""), ("if-match", "\"v1\"")]), FULL);
        assert_eq!(get(&[("if-match", "*")]), FULL);
        assert_eq!(get(&[("if-match", "\"v2\"")]), PreconditionFailed);
        // A weak tag never matches strongly, nor does a weak stored one.
        assert_eq!(get(&[("if-match", "W/\"v1\"")]), PreconditionFailed);
        let weak = Validators {
            etag: Some(HeaderValue::from_static("W/\"v1\"")),
            ..stored()
        };
        let r = h(&[("if-match", "\"v1\"")]);
        assert_eq!(
            conditional_answer(&Method::GET, StatusCode::OK, &r, &weak, 100),
            PreconditionFailed
        );
        // No stored ETag: only `*` matches. Garbage matches nothing.
        let none = Validators {
            etag: None,
            ..stored()
        };
        assert_eq!(
            conditional_answer(&Method::GET, StatusCode::OK, &r, &none, 100),
            PreconditionFailed
        );
        let star = h(&[("if-match", "*")]);
        assert_eq!(
            conditional_answer(&Method::GET, StatusCode::OK, &star, &none, 100),
            FULL
        );
        assert_eq!(get(&[("if-match", "v1")]), PreconditionFailed);
        assert_eq!(get(&[("if-match", "\"v1")]), PreconditionFailed);
        assert_eq!(get(&[("if-match", "junk, \"v1\"")]), FULL);
        // HEAD too.
        let r = h(&[("if-match", "\"v2\"")]);
        assert_eq!(
            conditional_answer(&Method::HEAD, StatusCode::OK, &r, &stored(), 100),
            PreconditionFailed
        );
    }

    #[test]
    fn if_unmodified_since_only_without_if_match_and_with_a_valid_date() {
        use Conditional::*;
        assert_eq!(get(&[("if-unmodified-since", BEFORE)]), PreconditionFailed);
        assert_eq!(get(&[("if-unmodified-since", LM)]), FULL);
        assert_eq!(get(&[("if-unmodified-since", AFTER)]), FULL);
        // Ignored: not a date, two of them, a matching If-Match present.
        assert_eq!(get(&[("if-unmodified-since", "yesterday")]), FULL);
        assert_eq!(
            get(&[
                ("if-unmodified-since", BEFORE),
                ("if-unmodified-since", BEFORE)
            ]),
            FULL
        );
        assert_eq!(
            get(&[("if-match", "\"v1\""), ("if-unmodified-since", BEFORE)]),
            FULL
        );
        // Ignored without a Last-Modified (the Date is not a modification date).
        let no_lm = Validators {
            last_modified: None,
            ..stored()
        };
        let r = h(&[("if-unmodified-since", BEFORE)]);
        assert_eq!(
            conditional_answer(&Method::GET, StatusCode::OK, &r, &no_lm, 100),
            FULL
        );
    }

    #[test]
    fn if_none_match_compares_weakly_and_wins_over_if_modified_since() {
        use Conditional::*;
        assert_eq!(get(&[("if-none-match", "\"v1\"")]), NotModified);
        assert_eq!(get(&[("if-none-match", "W/\"v1\", \"v2\"")]), NotModified);
        assert_eq!(get(&[("if-none-match", "*")]), NotModified);
        assert_eq!(get(&[("if-none-match", "\"v2\"")]), FULL);
        assert_eq!(
            get(&[("if-none-match", "\"v2\""), ("if-modified-since", AFTER)]),
            FULL
        );
        // `*` needs no stored ETag.
        let none = Validators {
            etag: None,
            ..stored()
        };
        let r = h(&[("if-none-match", "*")]);
        assert_eq!(
            conditional_answer(&Method::GET, StatusCode::OK, &r, &none, 100),
            NotModified
        );
        // A failed If-Match comes first.
        assert_eq!(
            get(&[("if-match", "\"v2\""), ("if-none-match", "\"v1\"")]),
            PreconditionFailed
        );
        // Other methods get 412 (never served from the cache, but the rule is the RFC's).
        let r = h(&[("if-none-match", "\"v1\"")]);
        assert_eq!(
            conditional_answer(&Method::DELETE, StatusCode::OK, &r, &stored(), 100),
            PreconditionFailed
        );
    }

    #[test]
    fn if_modified_since_falls_back_to_the_date() {
        use Conditional::*;
        assert_eq!(get(&[("if-modified-since", LM)]), NotModified);
        assert_eq!(get(&[("if-modified-since", AFTER)]), NotModified);
        assert_eq!(get(&[("if-modified-since", BEFORE)]), FULL);
        assert_eq!(get(&[("if-modified-since", "soon")]), FULL);
        let no_lm = Validators {
            last_modified: None,
            ..stored()
        };
        let r = h(&[("if-modified-since", AFTER)]);
        assert_eq!(
            conditional_answer(&Method::GET, StatusCode::OK, &r, &no_lm, 100),
            FULL
        );
        let r = h(&[("if-modified-since", DATE)]);
        assert_eq!(
            conditional_answer(&Method::GET, StatusCode::OK, &r, &no_lm, 100),
            NotModified
        );
    }

    #[test]
    fn if_range_sends_the_range_only_when_it_matches_strongly() {
        assert_eq!(get(&[("range", "bytes=0-9")]), partial(0, 9));
        assert_eq!(
            get(&[("range", "bytes=0-9"), ("if-range", "\"v1\"")]),
            partial(0, 9)
        );
        assert_eq!(get(&[("range", "bytes=0-9"), ("if-range", "\"v2\"")]), FULL);
        assert_eq!(
            get(&[("range", "bytes=0-9"), ("if-range", "W/\"v1\"")]),
            FULL
        );
        assert_eq!(
            get(&[("range", "bytes=0-9"), ("if-range", LM)]),
            partial(0, 9)
        );
        assert_eq!(get(&[("range", "bytes=0-9"), ("if-range", AFTER)]), FULL);
        assert_eq!(get(&[("range", "bytes=0-9"), ("if-range", "junk")]), FULL);
        // A Last-Modified less than a second before the Date is weak: no range by date.
        let weak_lm = Validators {
            date: Some(HeaderValue::from_static(LM)),
            ..stored()
        };
        let r = h(&[("range", "bytes=0-9"), ("if-range", LM)]);
        assert_eq!(
            conditional_answer(&Method::GET, StatusCode::OK, &r, &weak_lm, 100),
            FULL
        );
        let no_date = Validators {
            date: None,
            ..stored()
        };
        assert_eq!(
            conditional_answer(&Method::GET, StatusCode::OK, &r, &no_date, 100),
            FULL
        );
        // If-Range without Range: nothing to do.
        assert_eq!(get(&[("if-range", "\"v2\"")]), FULL);
    }

    #[test]
    fn ranges_only_for_get_on_a_stored_200_and_conditions_only_on_2xx() {
        let r = h(&[("range", "bytes=0-9")]);
        assert_eq!(
            conditional_answer(&Method::HEAD, StatusCode::OK, &r, &stored(), 100),
            FULL
        );
        assert_eq!(
            conditional_answer(&Method::GET, StatusCode::NO_CONTENT, &r, &stored(), 100),
            FULL
        );
        assert_eq!(
            get(&[("range", "bytes=200-")]),
            Conditional::Send(RangeAnswer::Unsatisfiable {
                content_range: HeaderValue::from_static("bytes */100")
            })
        );
        // A stored 404 ignores every precondition.
        let r = h(&[("if-match", "\"v2\""), ("if-none-match", "\"v1\"")]);
        assert_eq!(
            conditional_answer(&Method::GET, StatusCode::NOT_FOUND, &r, &stored(), 100),
            FULL
        );
    }

    #[test]
    fn entity_tags_parse_as_the_grammar_says() {
        let t =
            |v: &'static str| entity_tag(v.as_bytes()).map(|(t, rest)| (t.weak, t.opaque, rest));
        assert_eq!(t("\"a\""), Some((false, &b"\"a\""[..], &b""[..])));
        assert_eq!(t("W/\"a\", x"), Some((true, &b"\"a\""[..], &b", x"[..])));
        assert_eq!(t("\"\""), Some((false, &b"\"\""[..], &b""[..])));
        assert_eq!(t("a"), None);
        assert_eq!(t("\"a"), None);
        assert_eq!(t("w/\"a\""), None);
        assert_eq!(t("\"a b\""), None);
    }
}
