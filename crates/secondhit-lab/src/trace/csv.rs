//! Generic delimited text: the user names which 1-based columns hold the time, the key, the
//! size and, optionally, the byte range asked. Without a time column the request's index is the
//! time; without a size column every size is 1. The key is the column's text. A range is
//! `FIRST-LAST` or `FIRST-` (to the end), as in an HTTP `Range: bytes=` field; empty or `-`
//! for the whole object. A file named `*.ranges.csv` reads `time,key,size,range` by default
//! (what `gen-trace --media` writes).

use super::{Lines, Request, TraceError};
use crate::hash::KeyHash;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// Where the fields are in a delimited text trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvSpec {
    /// Field separator (a single byte; `\t` for tabs).
    pub delimiter: u8,
    /// 1-based column of the time in seconds (integer or decimal); `None`: the request index.
    pub time: Option<usize>,
    /// 1-based column of the key.
    pub key: usize,
    /// 1-based column of the size in bytes; `None`: 1.
    pub size: Option<usize>,
    /// 1-based column of the byte range asked (`FIRST-LAST`, `FIRST-`, or empty); `None`:
    /// every request is for the whole object.
    pub range: Option<usize>,
    /// Skip the first line.
    pub header: bool,
}

impl Default for CsvSpec {
    /// `time,key,size` in columns 1, 2, 3, comma separated, no header (libCacheSim's usual
    /// layout).
    fn default() -> Self {
        CsvSpec {
            delimiter: b',',
            time: Some(1),
            key: 2,
            size: Some(3),
            range: None,
            header: false,
        }
    }
}

impl CsvSpec {
    /// `time,key,size,range` in columns 1 to 4 (`*.ranges.csv`, `gen-trace --media`).
    pub fn with_ranges() -> CsvSpec {
        CsvSpec {
            range: Some(4),
            ..CsvSpec::default()
        }
    }
}

impl FromStr for CsvSpec {
    type Err = String;

    /// Parses `time=1,key=2,size=3[,range=4]` (any order; leave out `time`, `size` or `range`,
    /// or set it to 0, for none). The delimiter and header keep their defaults.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut spec = CsvSpec {
            time: None,
            size: None,
            range: None,
            key: 0,
            ..CsvSpec::default()
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("csv columns: {part:?} is not NAME=COLUMN"))?;
            let col: usize = value.trim().parse().map_err(|_| {
                format!("csv columns: {name}={value:?}: the column must be a number from 1")
            })?;
            match name.trim() {
                "time" => spec.time = (col > 0).then_some(col),
                "key" => spec.key = col,
                "size" => spec.size = (col > 0).then_some(col),
                "range" => spec.range = (col > 0).then_some(col),
                other => {
                    return Err(format!(
                        "csv columns: unknown field {other:?}: expected time, key, size or range"
                    ))
                }
            }
        }
        if spec.key == 0 {
            return Err("csv columns: key=COLUMN is required (columns count from 1)".into());
        }
        Ok(spec)
    }
}

pub(crate) struct Reader {
    lines: Lines,
    spec: CsvSpec,
    index: u64,
}

impl Reader {
    pub(crate) fn new(src: Box<dyn BufRead + Send>, path: PathBuf, spec: CsvSpec) -> Self {
        Reader {
            lines: Lines::new(src, path),
            spec,
            index: 0,
        }
    }
}

/// One record: `index` is the request's position (its time when there is no time column).
fn parse(
    spec: &CsvSpec,
    index: u64,
    path: &Path,
    line: u64,
    fields: &[&str],
) -> Result<Request, TraceError> {
    let hint = if line == 1 && !spec.header {
        " (if the first line is a header, pass --csv-header)"
    } else {
        ""
    };
    let get = |name: &str, col: usize| {
        fields.get(col - 1).copied().ok_or_else(|| {
            TraceError::parse(
                path,
                line,
                format!(
                    "field {name}: no column {col} (the line has {})",
                    fields.len()
                ),
            )
        })
    };
    let time = match spec.time {
        None => Duration::from_secs(index),
        Some(col) => {
            let v = get("time", col)?.trim();
            let secs: f64 = v.parse().ok().filter(|s: &f64| s.is_finite() && *s >= 0.0).ok_or_else(|| {
                    TraceError::parse(
                        path,
                        line,
                        format!("field time (column {col}): {v:?} is not a non-negative number of seconds{hint}"),
                    )
                })?;
            Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
        }
    };
    let key = KeyHash::of(get("key", spec.key)?.trim().as_bytes());
    let size = match spec.size {
        None => 1,
        Some(col) => {
            let v = get("size", col)?.trim();
            v.parse::<u64>().map_err(|_| {
                TraceError::parse(
                    path,
                    line,
                    format!("field size (column {col}): {v:?} is not a non-negative integer{hint}"),
                )
            })?
        }
    };
    let range = match spec.range {
        None => None,
        Some(col) => {
            let v = get("range", col)?.trim();
            parse_range(v).map_err(|why| {
                TraceError::parse(
                    path,
                    line,
                    format!("field range (column {col}): {v:?} {why}{hint}"),
                )
            })?
        }
    };
    Ok(Request {
        range,
        recorded: None,
        time,
        key,
        size,
        id: key.raw() as u64,
    })
}

/// A range column's value: `FIRST-LAST` (inclusive, LAST >= FIRST), `FIRST-` (to the end:
/// LAST is `u64::MAX`), or empty or `-` for none.
fn parse_range(v: &str) -> Result<Option<(u64, u64)>, &'static str> {
    if v.is_empty() || v == "-" {
        return Ok(None);
    }
    let (first, last) = v
        .split_once('-')
        .ok_or("is not FIRST-LAST, FIRST- or empty")?;
    let first: u64 = first
        .trim()
        .parse()
        .map_err(|_| "does not start with a byte offset")?;
    let last = match last.trim() {
        "" => u64::MAX,
        l => l.parse().map_err(|_| "does not end with a byte offset")?,
    };
    if last < first {
        return Err("ends before it starts");
    }
    Ok(Some((first, last)))
}

impl Iterator for Reader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (text, path, line) = match self.lines.next_line()? {
                Ok(l) => l,
                Err(e) => return Some(Err(e)),
            };
            if (line == 1 && self.spec.header) || text.trim().is_empty() {
                continue;
            }
            let fields: Vec<&str> = text.split(char::from(self.spec.delimiter)).collect();
            let parsed = parse(&self.spec, self.index, path, line, &fields);
            self.index += 1;
            return Some(parsed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn read(spec: CsvSpec, text: &str) -> Vec<Result<Request, TraceError>> {
        Reader::new(
            Box::new(Cursor::new(text.as_bytes().to_vec())),
            PathBuf::from("t.csv"),
            spec,
        )
        .collect()
    }

    #[test]
    fn columns_spec_parses_and_rejects() {
        let s: CsvSpec = "key=3,size=1".parse().unwrap();
        assert_eq!((s.time, s.key, s.size), (None, 3, Some(1)));
        assert!("time=1"
            .parse::<CsvSpec>()
            .unwrap_err()
            .contains("key=COLUMN"));
        assert!("key=x".parse::<CsvSpec>().unwrap_err().contains("\"x\""));
        assert!("kee=1".parse::<CsvSpec>().unwrap_err().contains("\"kee\""));
    }

    #[test]
    fn reads_named_columns() {
        let spec = CsvSpec {
            delimiter: b'\t',
            time: Some(2),
            key: 1,
            size: None,
            range: None,
            header: true,
        };
        let got = read(spec, "key\ttime\na\t1.5\nb\t2\na\t3\n");
        let got: Vec<_> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].key, got[2].key);
        assert_eq!(got[0].time, Duration::from_millis(1500));
        assert_eq!(got[1].size, 1);
    }

    #[test]
    fn ranges_are_read_from_their_column() {
        let spec: CsvSpec = "time=1,key=2,size=3,range=4".parse().unwrap();
        assert_eq!(spec, CsvSpec::with_ranges());
        let got: Vec<_> = read(
            spec.clone(),
            "1,a,100,0-9\n2,a,100,50-\n3,a,100,\n4,a,100,-\n",
        )
        .into_iter()
        .map(|r| r.unwrap().range)
        .collect();
        assert_eq!(got, [Some((0, 9)), Some((50, u64::MAX)), None, None]);
        for (bad, why) in [
            ("9-0", "ends before it starts"),
            ("x-1", "byte offset"),
            ("5", "FIRST-LAST"),
        ] {
            let e = read(spec.clone(), &format!("1,a,100,{bad}\n"))
                .pop()
                .unwrap()
                .unwrap_err();
            let text = e.to_string();
            assert!(
                text.starts_with("t.csv:1: field range (column 4)") && text.contains(why),
                "{text}"
            );
        }
    }

    #[test]
    fn errors_name_the_column_and_hint_at_headers() {
        let e = read(CsvSpec::default(), "time,id,size\n")
            .pop()
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("--csv-header"), "{e}");
        let e = read(CsvSpec::default(), "1,a,5\n2,b\n")
            .pop()
            .unwrap()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv:2: field size: no column 3 (the line has 2)"
        );
    }
}
