//! cache2k's binary traces: a flat stream of big-endian `i32` keys, one per request. No time
//! (the request's index stands in) and no size (1).

use super::{read_record, Request, TraceError};
use crate::hash::KeyHash;
use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) struct Reader {
    src: Box<dyn BufRead + Send>,
    path: PathBuf,
    index: u64,
}

impl Reader {
    pub(crate) fn new(src: Box<dyn BufRead + Send>, path: PathBuf) -> Self {
        Reader {
            src,
            path,
            index: 0,
        }
    }
}

impl Iterator for Reader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut rec = [0u8; 4];
        match read_record(&mut self.src, &mut rec, &self.path, self.index * 4) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(Err(e)),
        }
        let key = i32::from_be_bytes(rec);
        let time = Duration::from_secs(self.index);
        self.index += 1;
        Some(Ok(Request {
            range: None,
            recorded: None,
            time,
            // The key's bits as an unsigned value: negative keys stay distinct.
            key: KeyHash::of_u64(u64::from(key as u32)),
            size: 1,
            id: u64::from(key as u32),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn reads_big_endian_keys_with_index_time() {
        let mut bytes = Vec::new();
        for k in [7i32, -1, 7] {
            bytes.extend(k.to_be_bytes());
        }
        bytes.push(0);
        let mut r = Reader::new(Box::new(Cursor::new(bytes)), PathBuf::from("w.trc"));
        let a = r.next().unwrap().unwrap();
        let b = r.next().unwrap().unwrap();
        let c = r.next().unwrap().unwrap();
        assert_eq!(
            (a.key, a.size, a.time),
            (KeyHash::of_u64(7), 1, Duration::ZERO)
        );
        assert_eq!(b.key, KeyHash::of_u64(u64::from(u32::MAX)));
        assert_eq!((c.key, c.time), (a.key, Duration::from_secs(2)));
        let e = r.next().unwrap().unwrap_err().to_string();
        assert_eq!(e, "w.trc: truncated record at byte 12: 1 of 4 bytes");
    }
}
