//! secondhit's recording format: what `serve --record` writes by default and `simulate` reads
//! (recognised by its first bytes, whatever the file is named). Where libCacheSim's
//! oracleGeneral says when, which object and how large, this also says what a live cache knew
//! and the simulator needs to predict it: the weight the cache charged, whether the response
//! could be stored, and how long it stayed fresh.
//!
//! A 16-byte header, then 40-byte records, all little-endian:
//!
//! ```text
//! header  0   magic        12 bytes  "secondhitrec"
//!         12  version      u16       1
//!         14  record size  u16       40
//! record  0   time         u64       microseconds on the proxy's clock
//!         8   object id    u64       the key's 64-bit hash (never the URL)
//!         16  size         u64       the object's bytes
//!         24  weight       u32       bytes the cache charges it (body, key, header fields,
//!                                    bookkeeping), saturating; 0: not known
//!         28  fresh        u32       milliseconds it stays fresh from `time`, saturating at
//!                                    u32::MAX - 1; u32::MAX: could not be stored, or not known
//!         32  flags        u8        1: storable; 2: a hit
//!         33  reserved     7 bytes   zero
//! ```
//!
//! ```
//! use secondhit_store::recording::{decode, encode, Record};
//! use std::time::Duration;
//!
//! let r = Record {
//!     time: Duration::from_micros(1_500),
//!     id: 42,
//!     size: 4096,
//!     weight: 5_325,
//!     fresh_for: Some(Duration::from_secs(60)),
//!     storable: true,
//!     hit: false,
//! };
//! assert_eq!(decode(&encode(&r)), r);
//! ```

use std::time::Duration;

/// The file's first bytes.
pub const MAGIC: [u8; 12] = *b"secondhitrec";
/// The version this code writes and reads.
pub const VERSION: u16 = 1;
/// Bytes of the header.
pub const HEADER: usize = 16;
/// Bytes per record.
pub const RECORD: usize = 40;

const STORABLE: u8 = 1;
const HIT: u8 = 2;
const NOT_FRESH: u32 = u32::MAX;

/// One request as the cache saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// When, on the proxy's clock (microseconds kept).
    pub time: Duration,
    /// The object id.
    pub id: u64,
    /// The object's bytes.
    pub size: u64,
    /// Bytes the cache charges the object against its capacity (0: not known).
    pub weight: u64,
    /// How long the object stays fresh from `time` (milliseconds kept); `None` where it could
    /// not be stored or it is not known.
    pub fresh_for: Option<Duration>,
    /// The response could be stored.
    pub storable: bool,
    /// The cache served it.
    pub hit: bool,
}

/// The header.
pub fn header() -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..12].copy_from_slice(&MAGIC);
    h[12..14].copy_from_slice(&VERSION.to_le_bytes());
    h[14..16].copy_from_slice(&(RECORD as u16).to_le_bytes());
    h
}

/// Whether `prefix` (a file's first bytes, at least 12) starts a recording.
pub fn is_recording(prefix: &[u8]) -> bool {
    prefix.starts_with(&MAGIC)
}

/// Checks a header: `Err` says what is wrong with it.
pub fn check_header(h: &[u8; HEADER]) -> Result<(), String> {
    if !is_recording(h) {
        return Err("not a secondhit recording (no \"secondhitrec\" header)".into());
    }
    let version = u16::from_le_bytes([h[12], h[13]]);
    let size = u16::from_le_bytes([h[14], h[15]]);
    if version != VERSION || usize::from(size) != RECORD {
        return Err(format!(
            "a secondhit recording of version {version} with {size}-byte records: this build reads version {VERSION}, {RECORD}-byte records"
        ));
    }
    Ok(())
}

/// Encodes one record.
pub fn encode(r: &Record) -> [u8; RECORD] {
    let mut b = [0u8; RECORD];
    let micros = u64::try_from(r.time.as_micros()).unwrap_or(u64::MAX);
    b[0..8].copy_from_slice(&micros.to_le_bytes());
    b[8..16].copy_from_slice(&r.id.to_le_bytes());
    b[16..24].copy_from_slice(&r.size.to_le_bytes());
    let weight = u32::try_from(r.weight).unwrap_or(u32::MAX);
    b[24..28].copy_from_slice(&weight.to_le_bytes());
    let fresh = match r.fresh_for {
        Some(d) => u32::try_from(d.as_millis()).map_or(NOT_FRESH - 1, |ms| ms.min(NOT_FRESH - 1)),
        None => NOT_FRESH,
    };
    b[28..32].copy_from_slice(&fresh.to_le_bytes());
    b[32] = if r.storable { STORABLE } else { 0 } | if r.hit { HIT } else { 0 };
    b
}

/// Decodes one record.
pub fn decode(b: &[u8; RECORD]) -> Record {
    let u64_at = |i: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(x)
    };
    let u32_at = |i: usize| {
        let mut x = [0u8; 4];
        x.copy_from_slice(&b[i..i + 4]);
        u32::from_le_bytes(x)
    };
    let fresh = u32_at(28);
    Record {
        time: Duration::from_micros(u64_at(0)),
        id: u64_at(8),
        size: u64_at(16),
        weight: u64::from(u32_at(24)),
        fresh_for: (fresh != NOT_FRESH).then(|| Duration::from_millis(u64::from(fresh))),
        storable: b[32] & STORABLE != 0,
        hit: b[32] & HIT != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_saturate() {
        let r = Record {
            time: Duration::from_micros(u64::MAX),
            id: u64::MAX,
            size: u64::MAX,
            weight: u64::MAX,
            fresh_for: Some(Duration::from_secs(10 << 30)),
            storable: false,
            hit: true,
        };
        let back = decode(&encode(&r));
        assert_eq!(back.weight, u64::from(u32::MAX));
        assert_eq!(
            back.fresh_for,
            Some(Duration::from_millis(u64::from(u32::MAX - 1)))
        );
        assert_eq!((back.time, back.id, back.size), (r.time, r.id, r.size));
        assert_eq!((back.storable, back.hit), (false, true));
        let none = Record {
            fresh_for: None,
            ..r
        };
        assert_eq!(decode(&encode(&none)).fresh_for, None);
        let zero = Record {
            fresh_for: Some(Duration::ZERO),
            ..r
        };
        assert_eq!(decode(&encode(&zero)).fresh_for, Some(Duration::ZERO));
    }

    #[test]
    fn headers_are_checked() {
        assert_eq!(check_header(&header()), Ok(()));
        let mut h = header();
        h[12] = 2;
        assert!(check_header(&h).unwrap_err().contains("version 2"));
        assert!(check_header(&[0u8; HEADER]).is_err());
    }
}
