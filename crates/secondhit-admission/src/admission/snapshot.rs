//! The state of a rotating policy as bytes, so that a host can keep it across restarts (or warm
//! it offline from a trace and ship it): both generations, the current window's age, the
//! sizing and the hash seed, a format version and a checksum. The crate does no I/O; the host
//! writes and reads the bytes.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! 0   magic "SHADMIT\0"        8 bytes
//! 8   format version           u32 (2)
//! 12  kind                     u8  (0 Bloom, 1 Counting, 2 Exact)
//! 13  threshold                u32
//! 17  layout, bits, hashes     u8, u64, u32  (the generations' shape)
//! 30  hash seed                u64
//! 38  saved at (wall clock)    u64 nanoseconds since the Unix epoch
//! 46  current window's age     u64 nanoseconds (u64::MAX: no window started)
//! 54  distinct keys in current u64
//! 62  current's length         u64, then its bytes
//!     previous's length        u64, then its bytes
//! end checksum                 u64: XXH3-64 of everything before it
//! ```
//!
//! Times are stored as an age and a wall-clock instant, not as the policy's own `now`: the
//! policy's clock may be a trace's or a process's, and the state must mean the same after a
//! restart or on another machine.

use super::rotating::{Generation, Kind, Shape};
use crate::hash::SEED;
use std::fmt;
use std::time::Duration;
use xxhash_rust::xxh3::xxh3_64;

const MAGIC: &[u8; 8] = b"SHADMIT\0";
/// The snapshot format version this crate writes and reads. 2: the same layout as 1, whose
/// filters were filled by a `secondhit` that keyed its policy on [`KeyHash::of`]; since 2 it
/// keys on [`KeyHash::of_key`], so a version-1 filter's bits stand for other hashes and is
/// refused (a host that keys differently is unaffected by the change).
///
/// [`KeyHash::of`]: crate::KeyHash::of
/// [`KeyHash::of_key`]: crate::KeyHash::of_key
pub const VERSION: u32 = 2;
const HEADER: usize = 62;

/// Why a snapshot was not loaded. Loading never panics and never half-applies: on any error the
/// policy is left as it was.
#[derive(Clone, Debug, PartialEq)]
pub enum RestoreError {
    /// This policy keeps no state (admit-all).
    Unsupported,
    /// Not a snapshot (wrong magic), or cut short.
    NotASnapshot,
    /// Written by another format version.
    Version(u32),
    /// The checksum does not match: the file is corrupt.
    Checksum,
    /// Written by another kind of policy (e.g. nth-hit for second-hit), or another N.
    Policy {
        /// What the snapshot holds.
        found: String,
        /// What this policy is.
        expected: String,
    },
    /// Sized differently (layout, bits or hashes) from this policy's filters.
    Sizing {
        /// The snapshot's shape.
        found: Shape,
        /// This policy's.
        expected: Shape,
    },
    /// Written with another hash seed: its bits would mean other keys.
    Seed(u64),
    /// Its windows are over: the current window began two or more windows ago.
    TooOld {
        /// The current window's age now.
        age: Duration,
        /// The window.
        window: Duration,
    },
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreError::Unsupported => f.write_str("this policy keeps no state"),
            RestoreError::NotASnapshot => f.write_str("not an admission snapshot, or truncated"),
            RestoreError::Version(v) => {
                write!(f, "snapshot format version {v}, this build reads {VERSION}")
            }
            RestoreError::Checksum => f.write_str("checksum mismatch: the snapshot is corrupt"),
            RestoreError::Policy { found, expected } => {
                write!(f, "written by {found}, this policy is {expected}")
            }
            RestoreError::Sizing { found, expected } => write!(
                f,
                "sized for {} bits and {} hashes (layout {}), the filters now have {} bits and {} hashes (layout {})",
                found.bits, found.hashes, found.layout, expected.bits, expected.hashes, expected.layout
            ),
            RestoreError::Seed(s) => write!(f, "written with hash seed {s:#x}, this build uses {SEED:#x}"),
            RestoreError::TooOld { age, window } => write!(
                f,
                "its window began {} s ago, two windows ({} s each) or more: nothing in it is still remembered",
                age.as_secs(),
                window.as_secs()
            ),
        }
    }
}

impl std::error::Error for RestoreError {}

/// What a snapshot says about the state it holds, once its checksum and format are checked.
pub(super) struct Parsed<'a> {
    pub kind: u8,
    pub threshold: u32,
    pub shape: Shape,
    pub seed: u64,
    pub saved_at: u64,
    pub age: u64,
    pub distinct: u64,
    pub current: &'a [u8],
    pub previous: &'a [u8],
}

pub(super) const NO_WINDOW: u64 = u64::MAX;

pub(super) fn kind_byte(k: Kind) -> u8 {
    match k {
        Kind::Bloom => 0,
        Kind::Counting => 1,
        Kind::Exact => 2,
    }
}

/// Encodes a snapshot. `age`: the current window's age in nanoseconds ([`NO_WINDOW`] if none
/// started); `saved_at`: wall-clock nanoseconds since the Unix epoch.
pub(super) fn encode<G: Generation>(
    threshold: u32,
    saved_at: u64,
    age: u64,
    distinct: u64,
    current: &G,
    previous: &G,
) -> Vec<u8> {
    let shape = current.shape();
    let mut out = Vec::with_capacity(HEADER + 24 + current.memory_bytes() as usize * 2);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(kind_byte(G::KIND));
    out.extend_from_slice(&threshold.to_le_bytes());
    out.push(shape.layout);
    out.extend_from_slice(&shape.bits.to_le_bytes());
    out.extend_from_slice(&shape.hashes.to_le_bytes());
    out.extend_from_slice(&SEED.to_le_bytes());
    out.extend_from_slice(&saved_at.to_le_bytes());
    out.extend_from_slice(&age.to_le_bytes());
    out.extend_from_slice(&distinct.to_le_bytes());
    for g in [current, previous] {
        let at = out.len();
        out.extend_from_slice(&0u64.to_le_bytes());
        g.save(&mut out);
        let len = (out.len() - at - 8) as u64;
        out[at..at + 8].copy_from_slice(&len.to_le_bytes());
    }
    let sum = xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// A little-endian reader over a byte slice that reports running short instead of panicking.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RestoreError> {
        if self.bytes.len() < n {
            return Err(RestoreError::NotASnapshot);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, RestoreError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, RestoreError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, RestoreError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
}

/// Checks a snapshot's magic, version and checksum and splits it into its parts.
pub(super) fn parse(bytes: &[u8]) -> Result<Parsed<'_>, RestoreError> {
    if bytes.len() < HEADER + 24 || &bytes[..8] != MAGIC {
        return Err(RestoreError::NotASnapshot);
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    let mut c = Cursor { bytes: &body[8..] };
    let version = c.u32()?;
    if version != VERSION {
        return Err(RestoreError::Version(version));
    }
    let mut sb = [0u8; 8];
    sb.copy_from_slice(sum);
    if xxh3_64(body) != u64::from_le_bytes(sb) {
        return Err(RestoreError::Checksum);
    }
    let kind = c.u8()?;
    let threshold = c.u32()?;
    let shape = Shape {
        layout: c.u8()?,
        bits: c.u64()?,
        hashes: c.u32()?,
    };
    let seed = c.u64()?;
    let saved_at = c.u64()?;
    let age = c.u64()?;
    let distinct = c.u64()?;
    let mut part = || -> Result<&[u8], RestoreError> {
        let len = usize::try_from(c.u64()?).map_err(|_| RestoreError::NotASnapshot)?;
        c.take(len)
    };
    let current = part()?;
    let previous = part()?;
    if !c.bytes.is_empty() {
        return Err(RestoreError::NotASnapshot);
    }
    Ok(Parsed {
        kind,
        threshold,
        shape,
        seed,
        saved_at,
        age,
        distinct,
        current,
        previous,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{Admission, Decision, Policy, Settings};
    use crate::bloom::Layout;
    use crate::KeyHash;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn settings() -> Settings {
        Settings {
            window: Some(S(60)),
            expected_items: 10_000,
            fpr: 0.01,
            layout: Layout::Blocked,
        }
    }

    fn policy(p: Policy) -> Box<dyn Admission> {
        settings().build(p).unwrap()
    }

    /// A wall clock far from any policy clock, as a real one is.
    const WALL: u64 = 1_700_000_000;

    #[test]
    fn a_restored_policy_remembers_what_the_saved_one_saw() {
        for p in [
            Policy::SecondHit,
            Policy::SecondHitExact,
            Policy::NthHit(3),
            Policy::NthHitExact(3),
        ] {
            let a = policy(p);
            let sightings = if matches!(p, Policy::NthHit(_) | Policy::NthHitExact(_)) {
                2
            } else {
                1
            };
            for _ in 0..sightings {
                for i in 0..1000 {
                    a.on_miss(KeyHash::of_u64(i), S(10));
                }
            }
            // Saved at policy time 20 s (the window began at 10 s: age 10 s)...
            let bytes = a.snapshot(S(20), S(WALL)).unwrap();
            // ...restored 5 s later by the wall clock, into a policy whose own clock reads 1000 s.
            let b = policy(p);
            b.restore(&bytes, S(1000), S(WALL + 5)).unwrap();
            for i in 0..1000 {
                assert_eq!(
                    b.on_miss(KeyHash::of_u64(i), S(1001)),
                    Decision::Admit,
                    "{p} key {i}"
                );
            }
            let fresh = (5000..6000)
                .filter(|&i| b.on_miss(KeyHash::of_u64(i), S(1001)) == Decision::Admit)
                .count();
            assert!(fresh < 50, "{p}: {fresh} unseen keys admitted");
            // The same bytes give the same snapshot again (deterministic contents).
            assert_eq!(
                policy(p).snapshot(S(0), S(0)),
                policy(p).snapshot(S(0), S(0))
            );
        }
    }

    #[test]
    fn the_restored_window_keeps_its_age() {
        let a = policy(Policy::SecondHit);
        let key = KeyHash::of(b"k");
        a.on_miss(key, S(0));
        let bytes = a.snapshot(S(50), S(WALL)); // window began 50 s ago
        let b = policy(Policy::SecondHit);
        b.restore(&bytes.unwrap(), S(5000), S(WALL + 5)).unwrap(); // now 55 s into it
        assert_eq!(b.stats().rotations, 0);
        b.on_miss(KeyHash::of(b"other"), S(5006)); // 61 s: the window is over
        assert_eq!(b.stats().rotations, 1);
        assert_eq!(
            b.on_miss(key, S(5007)),
            Decision::Admit,
            "kept one more window"
        );
    }

    #[test]
    fn mismatched_or_stale_snapshots_are_refused() {
        let a = policy(Policy::SecondHit);
        a.on_miss(KeyHash::of(b"k"), S(0));
        let bytes = a.snapshot(S(1), S(WALL)).unwrap();
        let err = policy(Policy::NthHit(3)).restore(&bytes, S(0), S(WALL));
        assert!(matches!(err, Err(RestoreError::Policy { .. })), "{err:?}");
        let bigger = Settings {
            expected_items: 20_000,
            ..settings()
        }
        .build(Policy::SecondHit)
        .unwrap();
        assert!(matches!(
            bigger.restore(&bytes, S(0), S(WALL)),
            Err(RestoreError::Sizing { .. })
        ));
        // Two windows (120 s) after its window began: nothing in it is remembered any more.
        let err = policy(Policy::SecondHit).restore(&bytes, S(0), S(WALL + 119));
        assert!(matches!(err, Err(RestoreError::TooOld { .. })), "{err:?}");
        assert!(policy(Policy::SecondHit)
            .restore(&bytes, S(0), S(WALL + 118))
            .is_ok());
        let all = settings().build(Policy::AdmitAll).unwrap();
        assert_eq!(all.snapshot(S(0), S(0)), None);
        assert_eq!(
            all.restore(&bytes, S(0), S(0)),
            Err(RestoreError::Unsupported)
        );
        let msg = err.unwrap_err().to_string();
        assert!(msg.contains("window began 120 s ago"), "{msg}");
    }

    #[test]
    fn corrupt_and_truncated_snapshots_never_load_and_never_panic() {
        let a = policy(Policy::SecondHit);
        for i in 0..100 {
            a.on_miss(KeyHash::of_u64(i), S(0));
        }
        let good = a.snapshot(S(1), S(WALL)).unwrap();
        let b = policy(Policy::SecondHit);
        for len in (0..good.len()).step_by(97).chain([good.len() - 1]) {
            assert!(
                b.restore(&good[..len], S(0), S(WALL)).is_err(),
                "truncated to {len}"
            );
        }
        for at in (0..good.len()).step_by(131) {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            assert!(b.restore(&bad, S(0), S(WALL)).is_err(), "flipped byte {at}");
        }
        let mut v1 = good.clone();
        v1[8] = 1;
        assert_eq!(b.restore(&v1, S(0), S(WALL)), Err(RestoreError::Version(1)));
        // Nothing was loaded: b still knows none of a's keys.
        assert_eq!(b.on_miss(KeyHash::of_u64(7), S(2)), Decision::Defer);
        assert!(b.restore(&good, S(0), S(WALL)).is_ok());
        assert_eq!(b.on_miss(KeyHash::of_u64(8), S(2)), Decision::Admit);
    }
}
