//! secondhit's recording format (`serve --record`, [`secondhit_store::recording`]): a 16-byte
//! header, then 40-byte records of time (microseconds), object id, size, the weight the cache
//! charged, how long the object stayed fresh, and whether it was storable. Each request carries
//! those in [`Request::recorded`]; the key is the id's, as for oracleGeneral.

use super::{read_record, Recorded, Request, TraceError};
use crate::hash::KeyHash;
use secondhit_store::recording::{check_header, decode, HEADER, RECORD};
use std::io::BufRead;
use std::path::PathBuf;

pub(crate) struct Reader {
    src: Box<dyn BufRead + Send>,
    path: PathBuf,
    offset: u64,
}

impl Reader {
    pub(crate) fn new(src: Box<dyn BufRead + Send>, path: PathBuf) -> Self {
        Reader {
            src,
            path,
            offset: 0,
        }
    }
}

impl Iterator for Reader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.offset == 0 {
            let mut h = [0u8; HEADER];
            match read_record(&mut self.src, &mut h, &self.path, 0) {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
            if let Err(message) = check_header(&h) {
                return Some(Err(TraceError::parse(&self.path, 1, message)));
            }
            self.offset = HEADER as u64;
        }
        let mut rec = [0u8; RECORD];
        match read_record(&mut self.src, &mut rec, &self.path, self.offset) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(Err(e)),
        }
        self.offset += RECORD as u64;
        let r = decode(&rec);
        Some(Ok(Request {
            time: r.time,
            key: KeyHash::of_u64(r.id),
            size: r.size,
            id: r.id,
            range: None,
            recorded: Some(Recorded {
                weight: r.weight,
                storable: r.storable,
                fresh_for: r.fresh_for,
            }),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secondhit_store::recording::{encode, header, Record};
    use std::io::Cursor;
    use std::time::Duration;

    fn reader(bytes: Vec<u8>) -> Reader {
        Reader::new(Box::new(Cursor::new(bytes)), PathBuf::from("edge.rec"))
    }

    fn record(id: u64) -> Record {
        Record {
            time: Duration::from_micros(1_000 + id),
            id,
            size: 10 * id,
            weight: 1_000 + id,
            fresh_for: (id % 2 == 0).then(|| Duration::from_millis(id)),
            storable: id != 3,
            hit: false,
        }
    }

    #[test]
    fn decodes_records_after_the_header() {
        let mut bytes = header().to_vec();
        for id in 1..=4 {
            bytes.extend_from_slice(&encode(&record(id)));
        }
        let got: Vec<_> = reader(bytes).collect::<Result<_, _>>().unwrap();
        assert_eq!(got.len(), 4);
        assert_eq!(got[2].key, KeyHash::of_u64(3));
        assert_eq!(
            (got[2].size, got[2].time),
            (30, Duration::from_micros(1_003))
        );
        assert_eq!(
            got[2].recorded,
            Some(Recorded {
                weight: 1_003,
                storable: false,
                fresh_for: None,
            })
        );
        assert_eq!(
            got[3].recorded.unwrap().fresh_for,
            Some(Duration::from_millis(4))
        );
    }

    #[test]
    fn a_bad_header_or_a_torn_record_is_named() {
        let mut bad = header().to_vec();
        bad[12] = 9;
        let e = reader(bad).next().unwrap().unwrap_err().to_string();
        assert!(
            e.starts_with("edge.rec:1: a secondhit recording of version 9"),
            "{e}"
        );
        let mut torn = header().to_vec();
        torn.extend_from_slice(&encode(&record(1)));
        torn.extend_from_slice(&[0; 7]);
        let mut r = reader(torn);
        assert!(r.next().unwrap().is_ok());
        let e = r.next().unwrap().unwrap_err().to_string();
        assert_eq!(e, "edge.rec: truncated record at byte 56: 7 of 40 bytes");
    }
}
