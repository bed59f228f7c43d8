//! webcachesim / AdaptSize text traces: `time id size` per line, space separated. The key is
//! (id, size): the same id with a new size is a new object, as in webcachesim and Caffeine.

use super::{field_u64, Lines, Request, TraceError};
use crate::hash::KeyHash;
use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) struct Reader {
    lines: Lines,
}

impl Reader {
    pub(crate) fn new(src: Box<dyn BufRead + Send>, path: PathBuf) -> Self {
        Reader {
            lines: Lines::new(src, path),
        }
    }
}

/// The key of object `id` at `size` bytes.
pub(crate) fn key(id: u64, size: u64) -> KeyHash {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&id.to_le_bytes());
    b[8..].copy_from_slice(&size.to_le_bytes());
    KeyHash::of(&b)
}

impl Iterator for Reader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (text, path, line) = match self.lines.next_line()? {
                Ok(l) => l,
                Err(e) => return Some(Err(e)),
            };
            let mut fields = text.split_ascii_whitespace();
            let Some(first) = fields.next() else {
                continue; // blank line
            };
            let parsed = (|| {
                let time = field_u64(path, line, "time", Some(first))?;
                let id = field_u64(path, line, "id", fields.next())?;
                let size = field_u64(path, line, "size", fields.next())?;
                if let Some(extra) = fields.next() {
                    return Err(TraceError::parse(
                        path,
                        line,
                        format!("unexpected 4th field {extra:?}: expected `time id size`"),
                    ));
                }
                let key = key(id, size);
                Ok(Request {
                    range: None,
                    recorded: None,
                    time: Duration::from_secs(time),
                    key,
                    size,
                    id: key.raw() as u64,
                })
            })();
            return Some(parsed);
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
            PathBuf::from("r.tr"),
        )
        .collect()
    }

    #[test]
    fn keys_on_id_and_size() {
        let got = read("1 5 100\n\n2 5 200\r\n3 5 100\n");
        let got: Vec<_> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(got.len(), 3);
        assert_ne!(got[0].key, got[1].key);
        assert_eq!(got[0].key, got[2].key);
        assert_eq!((got[1].size, got[1].time), (200, Duration::from_secs(2)));
    }

    #[test]
    fn errors_name_line_field_and_value() {
        let e = read("1 5 100\n2 x 100\n").pop().unwrap().unwrap_err();
        assert_eq!(
            e.to_string(),
            "r.tr:2: field id: \"x\" is not a non-negative integer"
        );
        let e = read("1 5\n").pop().unwrap().unwrap_err();
        assert_eq!(e.to_string(), "r.tr:1: missing field size");
        let e = read("1 5 6 7\n").pop().unwrap().unwrap_err();
        assert!(e.to_string().contains("4th field \"7\""));
        let e = read("1 5 -6\n").pop().unwrap().unwrap_err();
        assert!(e.to_string().contains("\"-6\""));
    }
}
