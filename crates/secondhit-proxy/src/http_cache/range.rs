//! `Range: bytes=...` requests against a stored body (RFC 9110 §14). Only single ranges are
//! served as 206; a multi-range request gets the whole body (200), which the RFC allows.

use http::HeaderValue;

/// What a `Range` header asks of a body of a known length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeRequest {
    /// No usable range: send the whole body with 200.
    Full,
    /// Send bytes `start..=end` with 206 and `Content-Range: bytes start-end/len`.
    Partial {
        /// First byte.
        start: u64,
        /// Last byte, inclusive.
        end: u64,
    },
    /// A syntactically valid range that selects nothing: 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// Interprets a `Range` header value for a body of `len` bytes. Anything that is not a single
/// `bytes` range (other units, several ranges, garbage) is [`RangeRequest::Full`].
pub fn parse_range(value: &str, len: u64) -> RangeRequest {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return RangeRequest::Full;
    };
    if spec.contains(',') {
        return RangeRequest::Full;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return RangeRequest::Full;
    };
    let (first, last) = (first.trim(), last.trim());
    let num = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match (first.is_empty(), num(first), num(last)) {
        // bytes=-N: the last N bytes.
        (true, _, Some(n)) => {
            if n == 0 || len == 0 {
                RangeRequest::Unsatisfiable
            } else {
                RangeRequest::Partial {
                    start: len.saturating_sub(n),
                    end: len - 1,
                }
            }
        }
        // bytes=A- or bytes=A-B.
        (false, Some(start), end) if last.is_empty() || end.is_some() => {
            if let Some(e) = end {
                if e < start {
                    return RangeRequest::Full; // invalid: ignore the header
                }
            }
            if start >= len {
                return RangeRequest::Unsatisfiable;
            }
            let end = end.map_or(len - 1, |e| e.min(len - 1));
            RangeRequest::Partial { start, end }
        }
        _ => RangeRequest::Full,
    }
}

/// How to answer a request's `Range` field for a whole body of `len` bytes: what the cache and
/// the synthetic origin both send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeAnswer {
    /// 200 with the whole body.
    Full,
    /// 206 with bytes `start..=end` and this `Content-Range`.
    Partial {
        /// First byte.
        start: u64,
        /// Last byte, inclusive.
        end: u64,
        /// `bytes start-end/len`.
        content_range: HeaderValue,
    },
    /// 416 with this `Content-Range` (`bytes */len`).
    Unsatisfiable {
        /// `bytes */len`.
        content_range: HeaderValue,
    },
}

/// The answer to a `Range` field (absent, or not text: the whole body).
pub fn range_answer(range: Option<&HeaderValue>, len: u64) -> RangeAnswer {
    let request = range
        .and_then(|v| v.to_str().ok())
        .map_or(RangeRequest::Full, |v| parse_range(v, len));
    match request {
        RangeRequest::Full => RangeAnswer::Full,
        RangeRequest::Partial { start, end } => RangeAnswer::Partial {
            start,
            end,
            content_range: HeaderValue::from_str(&format!("bytes {start}-{end}/{len}"))
                .unwrap_or(HeaderValue::from_static("bytes */0")),
        },
        RangeRequest::Unsatisfiable => RangeAnswer::Unsatisfiable {
            content_range: HeaderValue::from_str(&format!("bytes */{len}"))
                .unwrap_or(HeaderValue::from_static("bytes */0")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeRequest::*;

    #[test]
    fn single_ranges() {
        assert_eq!(
            parse_range("bytes=0-99", 1000),
            Partial { start: 0, end: 99 }
        );
        assert_eq!(
            parse_range("bytes=900-", 1000),
            Partial {
                start: 900,
                end: 999
            }
        );
        assert_eq!(
            parse_range("bytes=-100", 1000),
            Partial {
                start: 900,
                end: 999
            }
        );
        assert_eq!(
            parse_range("bytes=-5000", 1000),
            Partial { start: 0, end: 999 }
        );
        assert_eq!(
            parse_range("bytes=990-2000", 1000),
            Partial {
                start: 990,
                end: 999
            }
        );
    }

    #[test]
    fn unsatisfiable_and_ignored() {
        assert_eq!(parse_range("bytes=1000-", 1000), Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 1000), Unsatisfiable);
        assert_eq!(parse_range("bytes=0-0", 0), Unsatisfiable);
        assert_eq!(parse_range("bytes=5-1", 1000), Full);
        assert_eq!(parse_range("bytes=0-1,5-6", 1000), Full);
        assert_eq!(parse_range("items=0-1", 1000), Full);
        assert_eq!(parse_range("bytes=a-b", 1000), Full);
        assert_eq!(parse_range("bytes=-", 1000), Full);
        assert_eq!(parse_range("bytes=+1-2", 1000), Full);
    }

    #[test]
    fn answers_carry_their_content_range() {
        let v = HeaderValue::from_static("bytes=10-19");
        assert_eq!(
            range_answer(Some(&v), 100),
            RangeAnswer::Partial {
                start: 10,
                end: 19,
                content_range: HeaderValue::from_static("bytes 10-19/100")
            }
        );
        let v = HeaderValue::from_static("bytes=200-");
        assert_eq!(
            range_answer(Some(&v), 100),
            RangeAnswer::Unsatisfiable {
                content_range: HeaderValue::from_static("bytes */100")
            }
        );
        assert_eq!(range_answer(None, 100), RangeAnswer::Full);
    }
}
