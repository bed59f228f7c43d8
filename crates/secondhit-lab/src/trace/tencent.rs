//! The SNIA IOTTA Tencent photo-cache text format: eight space-separated columns,
//! `YYYYMMDDhhmmss photo-id format tier bytes flag terminal number`. The key is
//! (photo id, format, tier), as in Caffeine's reader; the size is column 5; rows of size 0 are
//! skipped (as libCacheSim does by default). Columns 6 to 8 are not used.

use super::{field_u64, Lines, Request, TraceError};
use crate::hash::KeyHash;
use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) struct Reader {
    lines: Lines,
    key: Vec<u8>,
}

impl Reader {
    pub(crate) fn new(src: Box<dyn BufRead + Send>, path: PathBuf) -> Self {
        Reader {
            lines: Lines::new(src, path),
            key: Vec::with_capacity(64),
        }
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYYMMDDhhmmss` to seconds since 1970-01-01 UTC, or `None` if it is not such a stamp.
fn parse_stamp(s: &str) -> Option<u64> {
    if s.len() != 14 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |a: usize, b: usize| s[a..b].parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (
        n(0, 4)?,
        n(4, 6)?,
        n(6, 8)?,
        n(8, 10)?,
        n(10, 12)?,
        n(12, 14)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se;
    u64::try_from(secs).ok()
}

impl Iterator for Reader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (text, path, line) = match self.lines.next_line()? {
                Ok(l) => l,
                Err(e) => return Some(Err(e)),
            };
            let mut f = text.split_ascii_whitespace();
            let Some(stamp) = f.next() else {
                continue;
            };
            let Some(time) = parse_stamp(stamp) else {
                return Some(Err(TraceError::parse(
                    path,
                    line,
                    format!("field time: {stamp:?} is not a YYYYMMDDhhmmss timestamp"),
                )));
            };
            let (Some(id), Some(format), Some(tier)) = (f.next(), f.next(), f.next()) else {
                return Some(Err(TraceError::parse(
                    path,
                    line,
                    "expected 8 columns: time photo-id format tier bytes flag terminal number",
                )));
            };
            let size = match field_u64(path, line, "bytes", f.next()) {
                Ok(s) => s,
                Err(e) => return Some(Err(e)),
            };
            if size == 0 {
                continue;
            }
            self.key.clear();
            for (i, part) in [id, format, tier].iter().enumerate() {
                if i > 0 {
                    self.key.push(b' ');
                }
                self.key.extend_from_slice(part.as_bytes());
            }
            let key = KeyHash::of(&self.key);
            return Some(Ok(Request {
                range: None,
                recorded: None,
                time: Duration::from_secs(time),
                key,
                size,
                id: key.raw() as u64,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn read(text: &str) -> Vec<Result<Request, TraceError>> {
        Reader::new(
            Box::new(Cursor::new(text.as_bytes().to_vec())),
            PathBuf::from("p.bz2"),
        )
        .collect()
    }

    #[test]
    fn stamps_are_unix_seconds() {
        assert_eq!(parse_stamp("19700101000000"), Some(0));
        assert_eq!(parse_stamp("20160201164604"), Some(1_454_345_164));
        assert_eq!(parse_stamp("2016020116460"), None);
        assert_eq!(parse_stamp("20161301164604"), None);
    }

    #[test]
    fn keys_on_id_format_tier_and_skips_empty_rows() {
        let got = read(
            "20160201164604 aa 5 m 100 1 PHONE 1\n\
             20160201164605 aa 5 b 200 1 PHONE 1\n\
             20160201164605 aa 0 m 0 1 PC 0\n\
             20160201164606 aa 5 m 100 1 PC 0\n",
        );
        let got: Vec<_> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(got.len(), 3);
        assert_ne!(got[0].key, got[1].key);
        assert_eq!(got[0].key, got[2].key);
        assert_eq!(got[2].time - got[0].time, Duration::from_secs(2));
    }

    #[test]
    fn bad_rows_name_line_and_field() {
        let e = read("2016020116460x aa 5 m 100 1 PHONE 1\n")
            .pop()
            .unwrap()
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("p.bz2:1: field time: \"2016020116460x\""),
            "{e}"
        );
        let e = read("20160201164604 aa 5\n").pop().unwrap().unwrap_err();
        assert!(e.to_string().contains("expected 8 columns"), "{e}");
        let e = read("20160201164604 aa 5 m big 1 PHONE 1\n")
            .pop()
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("field bytes: \"big\""), "{e}");
    }
}
