//! libCacheSim's `oracleGeneral` binary format: 24-byte little-endian records, no header:
//! `u32` time (s), `u64` object id, `u32` size (bytes), `i64` next access (ignored here).

use super::{Records, Request, TraceError};
use crate::hash::KeyHash;
use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) use secondhit_store::oracle::{encode, RECORD};

pub(crate) struct Reader(Records<RECORD>);

impl Reader {
    pub(crate) fn new(src: Box<dyn BufRead + Send>, path: PathBuf) -> Self {
        Reader(Records::new(src, path))
    }
}

impl Iterator for Reader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rec = match self.0.next_record()? {
            Ok(rec) => rec,
            Err(e) => return Some(Err(e)),
        };
        let r = secondhit_store::oracle::decode(&rec);
        Some(Ok(Request {
            range: None,
            recorded: None,
            time: Duration::from_secs(u64::from(r.time)),
            key: KeyHash::of_u64(r.id),
            size: u64::from(r.size),
            id: r.id,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn reader(bytes: Vec<u8>) -> Reader {
        Reader::new(
            Box::new(Cursor::new(bytes)),
            PathBuf::from("t.oracleGeneral.bin"),
        )
    }

    #[test]
    fn decodes_records() {
        let mut bytes = encode(5, 42, 4096, -1).to_vec();
        bytes.extend(encode(6, 7, 512, 3));
        let got: Vec<_> = reader(bytes).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            vec![
                Request {
                    range: None,
                    recorded: None,
                    time: Duration::from_secs(5),
                    key: KeyHash::of_u64(42),
                    size: 4096,
                    id: 42,
                },
                Request {
                    range: None,
                    recorded: None,
                    time: Duration::from_secs(6),
                    key: KeyHash::of_u64(7),
                    size: 512,
                    id: 7,
                },
            ]
        );
    }

    #[test]
    fn a_truncated_record_names_its_offset() {
        let mut bytes = encode(5, 42, 4096, -1).to_vec();
        bytes.extend_from_slice(&[1, 2, 3]);
        let mut r = reader(bytes);
        assert!(r.next().unwrap().is_ok());
        let e = r.next().unwrap().unwrap_err().to_string();
        assert_eq!(
            e,
            "t.oracleGeneral.bin: truncated record at byte 24: 3 of 24 bytes"
        );
    }
}
