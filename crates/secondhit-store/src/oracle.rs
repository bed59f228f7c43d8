//! libCacheSim's `oracleGeneral` record: 24 little-endian bytes, no header: `u32` time (s),
//! `u64` object id, `u32` size (bytes), `i64` next access (-1: never). It is here because both
//! sides of the lab use it: `serve --record` writes it, `simulate` reads it.
//!
//! ```
//! use secondhit_store::oracle::{decode, encode, Record};
//!
//! let bytes = encode(5, 42, 4096, -1);
//! assert_eq!(decode(&bytes), Record { time: 5, id: 42, size: 4096, next_access: -1 });
//! ```

/// Bytes per record.
pub const RECORD: usize = 24;

/// One record's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Seconds.
    pub time: u32,
    /// The object id.
    pub id: u64,
    /// Bytes.
    pub size: u32,
    /// The index of the object's next request, -1 (or `i64::MAX`) when there is none.
    pub next_access: i64,
}

/// Encodes one record.
pub fn encode(time: u32, id: u64, size: u32, next_access: i64) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[0..4].copy_from_slice(&time.to_le_bytes());
    r[4..12].copy_from_slice(&id.to_le_bytes());
    r[12..16].copy_from_slice(&size.to_le_bytes());
    r[16..24].copy_from_slice(&next_access.to_le_bytes());
    r
}

/// Decodes one record.
pub fn decode(rec: &[u8; RECORD]) -> Record {
    let [t0, t1, t2, t3, i0, i1, i2, i3, i4, i5, i6, i7, s0, s1, s2, s3, n0, n1, n2, n3, n4, n5, n6, n7] =
        *rec;
    Record {
        time: u32::from_le_bytes([t0, t1, t2, t3]),
        id: u64::from_le_bytes([i0, i1, i2, i3, i4, i5, i6, i7]),
        size: u32::from_le_bytes([s0, s1, s2, s3]),
        next_access: i64::from_le_bytes([n0, n1, n2, n3, n4, n5, n6, n7]),
    }
}
