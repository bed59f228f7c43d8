//! Next-access times, and any readable trace rewritten as libCacheSim's `oracleGeneral`
//! (`secondhit trace-convert`), so that another simulator sees the same objects in the same
//! order and an offline-optimal policy (Belady) has the future it needs.
//!
//! * [`next_accesses`] gives, for every request, the index of the next request for the same
//!   key ([`NEVER`] when there is none): what `belady` and `belady-size` evict by.
//! * [`to_oracle_general`] writes 24-byte records: the request's time in whole seconds, a dense
//!   object id (numbered from 0 in first-seen order, one per key of the source's key rule, so a
//!   `(id, size)` key of a webcachesim trace stays one object), the size, and the next access.

use super::{oracle, Request, TraceError};
use crate::hash::BuildFold;
use std::collections::HashMap;
use std::io::{self, Write};

/// "Not requested again", in [`next_accesses`]' output (the stores' own constant).
pub use secondhit_store::NEVER;

/// For each request (by index from 0), the index of the next request for the same key, or
/// [`NEVER`]. Holds one `u64` per request and one map entry per object while it runs.
pub fn next_accesses(
    requests: impl Iterator<Item = Result<Request, TraceError>>,
) -> Result<Vec<u64>, TraceError> {
    let mut next = Vec::new();
    let mut last: HashMap<u128, u64, BuildFold> = HashMap::with_hasher(BuildFold::default());
    for (i, r) in requests.enumerate() {
        let r = r?;
        let i = i as u64;
        next.push(NEVER);
        if let Some(prev) = last.insert(r.key.raw(), i) {
            next[prev as usize] = i;
        }
    }
    Ok(next)
}

/// The next accesses an oracleGeneral file carries (the 1-based `next_access_vtime` of each
/// record, -1 for never), as [`next_accesses`] gives them, for the first `limit` records: what
/// libCacheSim's Belady reads, and a pass with no hash map. `Ok(None)` when the file carries
/// none (every value -1, as `gen-trace` writes) or an inconsistent set (a value that does not
/// point forward, to a record of another object, or to a record another one points to). Then
/// the caller computes them. A chain that skips an occurrence of its object is not detected
/// (that needs the map this pass avoids): values are trusted that far, as libCacheSim trusts
/// them; `trace-convert` writes them right. Holds 17 bytes per record while it runs.
pub fn carried_next_accesses(
    path: &std::path::Path,
    limit: u64,
) -> Result<Option<Vec<u64>>, TraceError> {
    let mut src = super::open_bytes(path)?;
    let mut rec = [0u8; oracle::RECORD];
    let field = |rec: &[u8; oracle::RECORD], at: usize| {
        let mut v = [0u8; 8];
        v.copy_from_slice(&rec[at..at + 8]);
        v
    };
    let (mut ids, mut next) = (Vec::new(), Vec::new());
    let mut offset = 0u64;
    let mut carried = false;
    while (ids.len() as u64) < limit && super::read_record(&mut src, &mut rec, path, offset)? {
        offset += oracle::RECORD as u64;
        let i = ids.len() as u64;
        ids.push(u64::from_le_bytes(field(&rec, 4)));
        next.push(match i64::from_le_bytes(field(&rec, 16)) {
            -1 | i64::MAX => NEVER,
            // 1-based, strictly after this record.
            v if v > 0 && (v as u64) > i + 1 => {
                carried = true;
                v as u64 - 1
            }
            _ => return Ok(None),
        });
    }
    if !carried {
        return Ok(None);
    }
    let mut targeted = vec![false; ids.len()];
    for i in 0..next.len() {
        let j = next[i];
        if j == NEVER {
            continue;
        }
        match ids.get(j as usize) {
            // Past the records read (a --limit): not requested again within them.
            None => next[i] = NEVER,
            Some(&id) if id == ids[i] && !std::mem::replace(&mut targeted[j as usize], true) => {}
            Some(_) => return Ok(None),
        }
    }
    Ok(Some(next))
}

/// What [`to_oracle_general`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Converted {
    /// Records written.
    pub requests: u64,
    /// Distinct objects (ids 0 to `objects - 1`).
    pub objects: u64,
    /// Requests whose size did not fit the format's `u32` and was written as `u32::MAX`.
    pub clamped_sizes: u64,
}

/// Why a conversion failed: reading the source or writing the output.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The source trace.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// Writing the output.
    #[error("writing the output: {0}")]
    Write(#[from] io::Error),
}

/// Writes `requests` as `oracleGeneral` to `out`, given their [`next_accesses`] (`next[i]` for
/// request `i`). The record's next access is libCacheSim's `next_access_vtime`: the 1-based
/// position of the next request for the object (so `next[i] + 1`), -1 for never. Times are whole
/// seconds, clamped to `u32`.
pub fn to_oracle_general(
    requests: impl Iterator<Item = Result<Request, TraceError>>,
    next: &[u64],
    out: &mut dyn Write,
) -> Result<Converted, ConvertError> {
    let mut ids: HashMap<u128, u64, BuildFold> = HashMap::with_hasher(BuildFold::default());
    let mut done = Converted::default();
    for (i, r) in requests.enumerate() {
        let r = r?;
        let fresh = ids.len() as u64;
        let id = *ids.entry(r.key.raw()).or_insert(fresh);
        let size = u32::try_from(r.size).unwrap_or_else(|_| {
            done.clamped_sizes += 1;
            u32::MAX
        });
        let time = u32::try_from(r.time.as_secs()).unwrap_or(u32::MAX);
        let next_access = match next.get(i).copied() {
            Some(NEVER) | None => -1,
            Some(n) => i64::try_from(n + 1).unwrap_or(-1),
        };
        out.write_all(&oracle::encode(time, id, size, next_access))?;
        done.requests += 1;
    }
    done.objects = ids.len() as u64;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{open_static, Format};
    use crate::KeyHash;
    use std::time::Duration;

    fn req(time: u64, key: u64, size: u64) -> Result<Request, TraceError> {
        Ok(Request {
            range: None,
            recorded: None,
            time: Duration::from_secs(time),
            key: KeyHash::of_u64(key),
            size,
            id: key,
        })
    }

    #[test]
    fn next_access_is_the_index_of_the_same_keys_next_request() {
        let trace = vec![
            req(0, 7, 1),
            req(1, 8, 1),
            req(2, 7, 1),
            req(3, 9, 1),
            req(4, 7, 1),
        ];
        assert_eq!(
            next_accesses(trace.into_iter()).unwrap(),
            vec![2, NEVER, 4, NEVER, NEVER]
        );
    }

    #[test]
    fn carried_next_accesses_are_read_back_or_refused() {
        let dir = std::env::temp_dir().join(format!("secondhit-carried-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, recs: &[(u64, i64)]| {
            let p = dir.join(name);
            let bytes: Vec<u8> = recs
                .iter()
                .flat_map(|&(id, next)| oracle::encode(0, id, 1, next))
                .collect();
            std::fs::write(&p, bytes).unwrap();
            p
        };
        // 7 8 7: the first 7 is next requested third (1-based 3).
        let good = write("good.oracleGeneral.bin", &[(7, 3), (8, -1), (7, -1)]);
        assert_eq!(
            carried_next_accesses(&good, u64::MAX).unwrap(),
            Some(vec![2, NEVER, NEVER])
        );
        // Within a limit of 2 records, the third is out of reach.
        assert_eq!(
            carried_next_accesses(&good, 2).unwrap(),
            Some(vec![NEVER, NEVER])
        );
        let none = write("none.oracleGeneral.bin", &[(7, -1), (8, -1), (7, -1)]);
        assert_eq!(carried_next_accesses(&none, u64::MAX).unwrap(), None);
        let backwards = write("back.oracleGeneral.bin", &[(7, 1), (8, -1), (7, -1)]);
        assert_eq!(carried_next_accesses(&backwards, u64::MAX).unwrap(), None);
        let twice = write("twice.oracleGeneral.bin", &[(7, 3), (7, 3), (7, -1)]);
        assert_eq!(carried_next_accesses(&twice, u64::MAX).unwrap(), None);
        let other = write("other.oracleGeneral.bin", &[(7, 2), (8, -1), (7, -1)]);
        assert_eq!(carried_next_accesses(&other, u64::MAX).unwrap(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn converted_records_read_back_as_the_same_objects_with_dense_ids() {
        let trace = || vec![req(5, 700, 10), req(6, 800, 20), req(9, 700, 10)].into_iter();
        let next = next_accesses(trace()).unwrap();
        let mut out = Vec::new();
        let done = to_oracle_general(trace(), &next, &mut out).unwrap();
        assert_eq!(
            done,
            Converted {
                requests: 3,
                objects: 2,
                clamped_sizes: 0
            }
        );
        assert_eq!(out.len(), 3 * 24);
        // Record 0: time 5, id 0, size 10, next request the third (1-based, as libCacheSim);
        // record 1 is never requested again.
        assert_eq!(&out[..24], &oracle::encode(5, 0, 10, 3));
        assert_eq!(&out[24..48], &oracle::encode(6, 1, 20, -1));
        let back: Vec<Request> = open_static(
            "t.oracleGeneral.bin",
            out.leak(),
            Some(&Format::OracleGeneral),
        )
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
        let ids: Vec<KeyHash> = back.iter().map(|r| r.key).collect();
        assert_eq!(
            ids,
            vec![KeyHash::of_u64(0), KeyHash::of_u64(1), KeyHash::of_u64(0)]
        );
        assert_eq!(back[2].time, Duration::from_secs(9));
    }
}
