//! secondhit's recording format (`serve --record`, [`secondhit_store::recording`]): a 16-byte
//! header, then 40-byte records of time (microseconds), object id, size, the weight the cache
//! charged, how long the object stayed fresh, and whether it was storable. Each request carries
//! those in [`Request::recorded`]; the key is the id's, as for oracleGeneral.

use super::{Recorded, Records, Request, TraceError};
use crate::hash::KeyHash;
use secondhit_store::recording::{check_header, decode, HEADER, RECORD};
use std::io::BufRead;
use std::path::PathBuf;

pub(crate) struct Reader {
    records: Records<RECORD>,
    /// The header was read and checked.
    started: bool,
}

impl Reader {
    pub(crate) fn new(src: Box<dyn BufRead + Send>, path: PathBuf) -> Self {
        Reader {
            records: Records::new(src, path),
            started: false,
        }
    }
}

impl Iterator for Reader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            let header = match self.records.next_bytes::<HEADER>()? {
                Ok(h) => h,
                Err(e) => return Some(Err(e)),
            };
            if let Err(message) = check_header(&header) {
                return Some(Err(TraceError::parse(self.records.path(), 1, message)));
            }
            self.started = true;
        }
        let r = match self.records.next_record()? {
            Ok(rec) => decode(&rec),
            Err(e) => return Some(Err(e)),
        };
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

    #[test]
    fn arbitrary_bytes_after_a_header_or_instead_of_one_never_panic() {
        // Every record decodes whatever its bytes (no field can be out of range), so a hostile
        // recording can only end in a named error: every cut of a header and three records of
        // noise, and the noise alone.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let noise: Vec<u8> = (0..3 * RECORD)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut whole = header().to_vec();
        whole.extend_from_slice(&noise);
        for cut in 0..=whole.len() {
            let got: Vec<_> = reader(whole[..cut].to_vec()).collect();
            let records = cut.saturating_sub(HEADER) / RECORD;
            let ok = got.iter().filter(|r| r.is_ok()).count();
            assert_eq!(ok, records, "cut at {cut}");
            let torn = cut > 0 && (cut < HEADER || (cut - HEADER) % RECORD != 0);
            assert_eq!(got.iter().any(Result::is_err), torn, "cut at {cut}");
        }
        // (`trace::Reader` stops at the first error.)
        assert!(reader(noise).next().is_some_and(|r| r.is_err()));
    }
}
