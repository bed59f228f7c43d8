//! `Range: bytes=...` requests against a stored body (RFC 9110 §14). Only single ranges are
//! served as 206; a multi-range request gets the whole body (200), which the RFC allows.

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
}
