//! The Bloom filter: a set that can only grow, with no false negatives and a bounded false-positive
//! rate, safe to insert into and query from many threads at once without locks.
//!
//! * Sizing: [`Params::for_rate`] gives the bits `m` and hashes `k` for `n` expected items at a
//!   false-positive rate `p` (`m = ceil(-n ln p / (ln 2)^2)`, `k = round((m / n) ln 2)`, at least
//!   1); [`Params::new`] takes explicit `(m, k)`.
//! * Hashing: one 128-bit [`KeyHash`] per operation; the `k` positions come from it by double
//!   hashing, `g_i = h1 + i * h2` (Kirsch and Mitzenmacher), whatever `k` is.
//! * Layouts: [`Layout::Standard`] spreads the `k` bits over the whole array (fewest bits for a
//!   rate); [`Layout::Blocked`] keeps all `k` bits of a key inside one 64-byte cache line (one
//!   cache miss per operation) and is sized from the exact false-positive rate of that layout so
//!   that it still meets `p`.
//! * Bits live in atomic 64-bit words; [`Bloom::insert`] reports "probably seen" from the same
//!   atomic read-modify-write that sets the bits.
//!
//! [`Counting`] (in `bloom::counting`) is the same structure with 4-bit saturating counters
//! instead of bits: a count-min estimate, used by the `nth-hit` policy.

mod counting;

pub use counting::{Counting, MAX_COUNT};

use crate::hash::KeyHash;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bits in one block of the blocked layout: one 64-byte cache line.
pub const BLOCK_BITS: u64 = 512;

/// The largest filter this crate will build: 2^40 bits (128 GiB).
pub const MAX_BITS: u64 = 1 << 40;

/// The largest number of hash positions per key.
pub const MAX_HASHES: u32 = 32;

/// Where a key's `k` bits go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Layout {
    /// Anywhere in the array: the textbook filter, fewest bits for a given rate, but up to `k`
    /// cache misses per operation on a filter larger than the CPU's cache.
    #[default]
    Standard,
    /// Inside one 512-bit, cache-line-aligned block chosen by the hash: one cache miss per
    /// operation. Needs somewhat more bits for the same rate; [`Params::for_rate`] accounts for it.
    Blocked,
}

impl Layout {
    /// The name used on the command line and in reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            Layout::Standard => "standard",
            Layout::Blocked => "blocked",
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Layout {
    type Err = ParamError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "standard" => Ok(Layout::Standard),
            "blocked" => Ok(Layout::Blocked),
            other => Err(ParamError::UnknownLayout(other.to_string())),
        }
    }
}

/// Why a filter's parameters were refused.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamError {
    /// `items` was 0.
    NoItems,
    /// The false-positive rate is not strictly between 0 and 1.
    Fpr(f64),
    /// Zero bits.
    NoBits,
    /// `k` outside `1..=MAX_HASHES`.
    Hashes(u32),
    /// More bits than [`MAX_BITS`].
    TooLarge {
        /// The bits asked for.
        bits: u64,
    },
    /// A layout name other than `standard` or `blocked`.
    UnknownLayout(String),
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::NoItems => f.write_str("expected items must be at least 1 (got 0)"),
            ParamError::Fpr(p) => write!(
                f,
                "false-positive rate must be strictly between 0 and 1, e.g. 0.01 (got {p})"
            ),
            ParamError::NoBits => f.write_str("a filter needs at least 1 bit (got 0)"),
            ParamError::Hashes(k) => {
                write!(f, "hashes must be between 1 and {MAX_HASHES} (got {k})")
            }
            ParamError::TooLarge { bits } => write!(
                f,
                "{bits} bits ({} GiB) is more than the {} GiB this crate builds; raise the false-positive rate or lower the items",
                bits / 8 / (1 << 30),
                MAX_BITS / 8 / (1 << 30)
            ),
            ParamError::UnknownLayout(name) => write!(
                f,
                "unknown filter layout {name:?}: expected \"standard\" or \"blocked\""
            ),
        }
    }
}

impl std::error::Error for ParamError {}

/// A filter's shape: bits, hashes and layout. Cheap to copy; decides memory and accuracy.
///
/// # Example
/// ```
/// use secondhit_admission::bloom::{Layout, Params};
/// // 100 million keys at 1 %: about 9.6 bits a key, 7 hashes, about 114 MiB.
/// let p = Params::for_rate(100_000_000, 0.01, Layout::Standard).unwrap();
/// assert_eq!(p.hashes, 7);
/// assert!((p.bits_per_item(100_000_000) - 9.585).abs() < 0.001);
/// assert_eq!(p.memory_bytes() / (1 << 20), 114);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Params {
    /// `m`: the number of bit positions (for the blocked layout, a multiple of [`BLOCK_BITS`]).
    pub bits: u64,
    /// `k`: positions set per key.
    pub hashes: u32,
    /// Where the positions go.
    pub layout: Layout,
}

impl Params {
    /// The smallest filter that holds `items` distinct keys at a false-positive rate of at most
    /// `fpr` (for the standard layout, the textbook formula, which meets `fpr` to within the
    /// rounding of `k`).
    pub fn for_rate(items: u64, fpr: f64, layout: Layout) -> Result<Params, ParamError> {
        if items == 0 {
            return Err(ParamError::NoItems);
        }
        if !(fpr > 0.0 && fpr < 1.0) {
            return Err(ParamError::Fpr(fpr));
        }
        let n = items as f64;
        let ln2 = std::f64::consts::LN_2;
        let m = (-n * fpr.ln() / (ln2 * ln2)).ceil();
        if m > MAX_BITS as f64 {
            return Err(ParamError::TooLarge { bits: m as u64 });
        }
        let m = (m as u64).max(1);
        let k = ((m as f64 / n) * ln2).round().clamp(1.0, MAX_HASHES as f64) as u32;
        match layout {
            Layout::Standard => Params::new(m, k, layout),
            Layout::Blocked => blocked_for_rate(n, fpr, m),
        }
    }

    /// A filter of exactly `bits` positions (rounded up to a whole block for the blocked layout)
    /// and `hashes` positions per key.
    pub fn new(bits: u64, hashes: u32, layout: Layout) -> Result<Params, ParamError> {
        if bits == 0 {
            return Err(ParamError::NoBits);
        }
        if bits > MAX_BITS {
            return Err(ParamError::TooLarge { bits });
        }
        if hashes == 0 || hashes > MAX_HASHES {
            return Err(ParamError::Hashes(hashes));
        }
        let bits = match layout {
            Layout::Standard => bits,
            Layout::Blocked => bits.div_ceil(BLOCK_BITS) * BLOCK_BITS,
        };
        Ok(Params {
            bits,
            hashes,
            layout,
        })
    }

    /// Bits per key when holding `items` keys.
    pub fn bits_per_item(&self, items: u64) -> f64 {
        self.bits as f64 / items.max(1) as f64
    }

    /// Heap memory of one filter with these parameters, in bytes (the bit array, rounded up to
    /// whole 64-byte blocks).
    pub fn memory_bytes(&self) -> u64 {
        self.blocks() * 64
    }

    /// The number of 64-byte blocks the bit array takes.
    pub(crate) fn blocks(&self) -> u64 {
        self.bits.div_ceil(BLOCK_BITS)
    }

    /// The false-positive rate predicted after `items` distinct inserts: `(1 - e^(-kn/m))^k`
    /// for the standard layout; for the blocked layout the same per block, averaged over the
    /// Poisson-distributed load of the blocks.
    pub fn expected_fpr(&self, items: u64) -> f64 {
        match self.layout {
            Layout::Standard => standard_fpr(self.bits as f64, self.hashes, items as f64),
            Layout::Blocked => blocked_fpr(self.blocks(), self.hashes, items as f64),
        }
    }
}

fn standard_fpr(m: f64, k: u32, n: f64) -> f64 {
    (1.0 - (-(k as f64) * n / m).exp()).powi(k as i32)
}

/// The false-positive rate of a blocked filter: a key's block holds `i` keys with probability
/// Poisson(i; n / blocks), and a block with `i` keys answers a foreign key "yes" with probability
/// `(1 - (1 - 1/512)^(i k))^k`.
fn blocked_fpr(blocks: u64, k: u32, n: f64) -> f64 {
    let lambda = n / blocks as f64;
    if lambda > 600.0 {
        // e^-lambda underflows; such a filter is hopelessly overfull anyway.
        return standard_fpr((blocks * BLOCK_BITS) as f64, k, n);
    }
    let miss_one = 1.0 - 1.0 / BLOCK_BITS as f64;
    let last = (lambda + 20.0 * lambda.sqrt() + 40.0).ceil() as u64;
    let mut pmf = (-lambda).exp();
    let mut total = 0.0;
    for i in 0..=last {
        let per_block = (1.0 - miss_one.powf((i * k as u64) as f64)).powi(k as i32);
        total += pmf * per_block;
        pmf *= lambda / (i + 1) as f64;
    }
    total
}

/// The blocked layout's sizing: for each `k`, the fewest blocks whose exact rate meets `fpr`;
/// then the `k` that needs the fewest blocks (the smaller `k` on a tie: faster).
fn blocked_for_rate(n: f64, fpr: f64, standard_bits: u64) -> Result<Params, ParamError> {
    let mut best: Option<(u64, u32)> = None;
    let max_blocks = MAX_BITS / BLOCK_BITS;
    for k in 1..=MAX_HASHES.min(24) {
        let mut hi = standard_bits.div_ceil(BLOCK_BITS).max(1);
        while blocked_fpr(hi, k, n) > fpr {
            if hi >= max_blocks {
                break;
            }
            hi = (hi * 2).min(max_blocks);
        }
        if blocked_fpr(hi, k, n) > fpr {
            continue;
        }
        let mut lo = 1;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if blocked_fpr(mid, k, n) <= fpr {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if best.is_none_or(|(b, _)| hi < b) {
            best = Some((hi, k));
        }
    }
    match best {
        Some((blocks, k)) => Params::new(blocks * BLOCK_BITS, k, Layout::Blocked),
        None => Err(ParamError::TooLarge { bits: MAX_BITS + 1 }),
    }
}

/// Maps a uniform 64-bit value onto `0..n` without division (Lemire's multiply-shift).
#[inline(always)]
fn fastrange(x: u64, n: u64) -> u64 {
    ((x as u128 * n as u128) >> 64) as u64
}

/// The `k` positions of a key, in `0..bits`. Calls `visit` for each until it returns `false`;
/// returns whether every position was visited. Shared by [`Bloom`] and [`Counting`] so that both
/// see a key at the same positions.
#[inline(always)]
pub(crate) fn for_each_position(
    params: &Params,
    key: KeyHash,
    mut visit: impl FnMut(u64) -> bool,
) -> bool {
    let (h1, h2) = key.halves();
    match params.layout {
        Layout::Standard => {
            let mut g = h1;
            for _ in 0..params.hashes {
                if !visit(fastrange(g, params.bits)) {
                    return false;
                }
                g = g.wrapping_add(h2);
            }
        }
        Layout::Blocked => {
            let base = fastrange(h1, params.bits / BLOCK_BITS) * BLOCK_BITS;
            // Inside a 512-bit block, double hashing degenerates: a step whose top bits are near
            // a multiple of 512/j visits only j positions, and those keys get a false-positive
            // rate near fill^2 (measured: +51 % over target at p = 0.1 %). So each position is
            // the top 9 bits of h2 times a different odd constant (a multiplicative congruential
            // sequence): still one hash per operation, and positions as good as independent.
            let mut g = h2;
            for _ in 0..params.hashes {
                if !visit(base + (g >> 55)) {
                    return false;
                }
                g = g.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            }
        }
    }
    true
}

/// Eight atomic words aligned to a cache line: the unit of storage for both layouts.
#[derive(Default)]
#[repr(align(64))]
pub(crate) struct Block(pub(crate) [AtomicU64; 8]);

pub(crate) fn zeroed_blocks(n: u64) -> Box<[Block]> {
    (0..n).map(|_| Block::default()).collect()
}

#[inline(always)]
/// Appends every word of `blocks`, little-endian: a generation's contents for a snapshot.
pub(crate) fn save_blocks(blocks: &[Block], out: &mut Vec<u8>) {
    out.reserve(blocks.len() * 64);
    for b in blocks {
        for w in &b.0 {
            out.extend_from_slice(&w.load(Relaxed).to_le_bytes());
        }
    }
}

/// Replaces every word of `blocks` from `bytes` (what [`save_blocks`] wrote for blocks of the
/// same count); `false`, changing nothing, when the length does not match.
pub(crate) fn load_blocks(blocks: &[Block], bytes: &[u8]) -> bool {
    if bytes.len() != blocks.len() * 64 {
        return false;
    }
    let words = bytes.chunks_exact(8);
    for (w, chunk) in blocks.iter().flat_map(|b| b.0.iter()).zip(words) {
        let mut le = [0u8; 8];
        le.copy_from_slice(chunk);
        w.store(u64::from_le_bytes(le), Relaxed);
    }
    true
}

pub(crate) fn word(blocks: &[Block], index: u64) -> &AtomicU64 {
    &blocks[(index >> 3) as usize].0[(index & 7) as usize]
}

/// A concurrent Bloom filter over [`KeyHash`]es.
///
/// All operations take `&self` and are lock-free; share it with an `Arc`. There are no false
/// negatives: once `insert` has returned, `contains` from any thread that has synchronized with
/// the inserting one (or any later call on the same thread) returns `true`, until `clear`.
///
/// # Example
/// ```
/// use secondhit_admission::bloom::{Bloom, Layout, Params};
/// use secondhit_admission::KeyHash;
///
/// let filter = Bloom::new(Params::for_rate(1_000, 0.01, Layout::Standard)?);
/// let key = KeyHash::of(b"/video/42.mp4");
/// assert!(!filter.insert(key)); // first sighting: not seen before
/// assert!(filter.insert(key)); // second: every bit was already set
/// assert!(filter.contains(key));
/// # Ok::<(), secondhit_admission::bloom::ParamError>(())
/// ```
pub struct Bloom {
    blocks: Box<[Block]>,
    params: Params,
}

impl fmt::Debug for Bloom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bloom")
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl Bloom {
    /// An empty filter with these parameters. Allocates [`Params::memory_bytes`] bytes.
    pub fn new(params: Params) -> Bloom {
        Bloom {
            blocks: zeroed_blocks(params.blocks()),
            params,
        }
    }

    /// An empty standard-layout filter for `items` keys at false-positive rate `fpr`.
    pub fn with_rate(items: u64, fpr: f64) -> Result<Bloom, ParamError> {
        Ok(Bloom::new(Params::for_rate(items, fpr, Layout::Standard)?))
    }

    /// The filter's parameters.
    pub fn params(&self) -> Params {
        self.params
    }

    /// Sets the key's bits. Returns `true` if every one of them was already set ("probably seen
    /// before"), `false` if at least one was newly set by this call ("certainly new", barring a
    /// concurrent insert of the same key). The answer comes from the same atomic operations that
    /// set the bits (a bit already seen set by a plain load is not written again: bits only go
    /// from 0 to 1, so the load's answer is final), so there is no window between test and set.
    #[inline]
    pub fn insert(&self, key: KeyHash) -> bool {
        let mut all_set = true;
        for_each_position(&self.params, key, |pos| {
            let w = word(&self.blocks, pos >> 6);
            let mask = 1u64 << (pos & 63);
            if w.load(Relaxed) & mask == 0 && w.fetch_or(mask, Relaxed) & mask == 0 {
                all_set = false;
            }
            true
        });
        all_set
    }

    /// Whether the key's bits are all set: `false` means the key was certainly never inserted
    /// (since the last `clear`); `true` is wrong with probability about [`Bloom::estimated_fpr`].
    #[inline]
    pub fn contains(&self, key: KeyHash) -> bool {
        for_each_position(&self.params, key, |pos| {
            word(&self.blocks, pos >> 6).load(Relaxed) & (1u64 << (pos & 63)) != 0
        })
    }

    /// Shorthand for `insert(KeyHash::of(key))`.
    pub fn insert_bytes(&self, key: &[u8]) -> bool {
        self.insert(KeyHash::of(key))
    }

    /// Shorthand for `contains(KeyHash::of(key))`.
    pub fn contains_bytes(&self, key: &[u8]) -> bool {
        self.contains(KeyHash::of(key))
    }

    /// The number of set bits. Reads the whole array: O(m), for reports and metrics, not for the
    /// request path.
    pub fn set_bits(&self) -> u64 {
        self.blocks
            .iter()
            .flat_map(|b| b.0.iter())
            .map(|w| u64::from(w.load(Relaxed).count_ones()))
            .sum()
    }

    /// The fraction of bits set, in [0, 1]. O(m), like [`Bloom::set_bits`].
    pub fn fill_ratio(&self) -> f64 {
        self.set_bits() as f64 / self.params.bits as f64
    }

    /// The number of distinct keys inserted, estimated from the fill:
    /// `n ≈ -(m / k) ln(1 - X / m)` (Swamidass and Baldi). O(m).
    pub fn estimated_items(&self) -> f64 {
        let m = self.params.bits as f64;
        let fill = self.fill_ratio();
        if fill >= 1.0 {
            return f64::INFINITY;
        }
        -(m / self.params.hashes as f64) * (1.0 - fill).ln()
    }

    /// The false-positive rate the filter has now, estimated as `fill^k`. O(m).
    pub fn estimated_fpr(&self) -> f64 {
        self.fill_ratio().powi(self.params.hashes as i32)
    }

    /// Heap memory of the bit array, in bytes.
    pub fn memory_bytes(&self) -> u64 {
        self.params.memory_bytes()
    }

    /// Appends the filter's bits (for a snapshot of a generation).
    pub(crate) fn save(&self, out: &mut Vec<u8>) {
        save_blocks(&self.blocks, out)
    }

    /// Replaces the filter's bits from what [`Bloom::save`] wrote for the same parameters;
    /// `false`, changing nothing, when the length does not match.
    pub(crate) fn load(&self, bytes: &[u8]) -> bool {
        load_blocks(&self.blocks, bytes)
    }

    /// Empties the filter. Concurrent inserts may survive or not; concurrent lookups may see
    /// a partly cleared filter (so, false negatives for keys inserted before the clear).
    pub fn clear(&self) {
        for b in self.blocks.iter() {
            for w in b.0.iter() {
                w.store(0, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_sizing() {
        let p = Params::for_rate(100_000_000, 0.01, Layout::Standard).unwrap();
        assert_eq!(p.bits, 958_505_838);
        assert_eq!(p.hashes, 7);
        assert_eq!(p.memory_bytes(), 119_813_248);
        let p = Params::for_rate(1000, 0.1, Layout::Standard).unwrap();
        assert_eq!((p.bits, p.hashes), (4793, 3));
        let p = Params::for_rate(1000, 0.001, Layout::Standard).unwrap();
        assert_eq!((p.bits, p.hashes), (14378, 10));
        // k is at least 1 even for a very loose rate.
        assert_eq!(
            Params::for_rate(10, 0.9, Layout::Standard).unwrap().hashes,
            1
        );
    }

    #[test]
    fn blocked_sizing_meets_the_rate_with_more_bits() {
        for fpr in [0.1, 0.01, 0.001] {
            let s = Params::for_rate(1_000_000, fpr, Layout::Standard).unwrap();
            let b = Params::for_rate(1_000_000, fpr, Layout::Blocked).unwrap();
            assert_eq!(b.bits % BLOCK_BITS, 0);
            assert!(b.expected_fpr(1_000_000) <= fpr, "{b:?}");
            // One block fewer would miss the rate: the search found the minimum.
            let smaller = Params::new(b.bits - BLOCK_BITS, b.hashes, Layout::Blocked).unwrap();
            assert!(smaller.expected_fpr(1_000_000) > fpr);
            assert!(b.bits > s.bits, "{fpr}: blocked {b:?} vs standard {s:?}");
            assert!((b.bits as f64) < s.bits as f64 * 1.6, "{fpr}: {b:?}");
        }
    }

    #[test]
    fn bad_parameters_are_refused_with_a_reason() {
        assert_eq!(
            Params::for_rate(0, 0.01, Layout::Standard),
            Err(ParamError::NoItems)
        );
        for bad in [0.0, 1.0, -0.5, f64::NAN, 2.0] {
            assert!(matches!(
                Params::for_rate(10, bad, Layout::Standard),
                Err(ParamError::Fpr(_))
            ));
        }
        assert_eq!(Params::new(0, 3, Layout::Standard), Err(ParamError::NoBits));
        assert_eq!(
            Params::new(64, 0, Layout::Standard),
            Err(ParamError::Hashes(0))
        );
        assert_eq!(
            Params::new(64, 33, Layout::Standard),
            Err(ParamError::Hashes(33))
        );
        let err = Params::for_rate(u64::MAX / 4, 1e-9, Layout::Standard).unwrap_err();
        assert!(
            err.to_string().contains("raise the false-positive rate"),
            "{err}"
        );
        assert_eq!("blocked".parse::<Layout>(), Ok(Layout::Blocked));
        assert!("bloked"
            .parse::<Layout>()
            .unwrap_err()
            .to_string()
            .contains("bloked"));
    }

    #[test]
    fn explicit_parameters_round_blocked_up_to_a_block() {
        let p = Params::new(1000, 4, Layout::Blocked).unwrap();
        assert_eq!(p.bits, 1024);
        assert_eq!(p.memory_bytes(), 128);
        let p = Params::new(1000, 4, Layout::Standard).unwrap();
        assert_eq!(p.bits, 1000);
        assert_eq!(p.memory_bytes(), 128);
    }

    #[test]
    fn positions_stay_in_range_and_blocked_ones_in_one_block() {
        for layout in [Layout::Standard, Layout::Blocked] {
            let p = Params::new(5000, 9, layout).unwrap();
            for i in 0..10_000u64 {
                let mut seen = Vec::new();
                for_each_position(&p, KeyHash::of_u64(i), |pos| {
                    seen.push(pos);
                    true
                });
                assert_eq!(seen.len(), 9);
                assert!(seen.iter().all(|&x| x < p.bits));
                if layout == Layout::Blocked {
                    assert!(seen.iter().all(|&x| x / BLOCK_BITS == seen[0] / BLOCK_BITS));
                }
            }
        }
    }

    #[test]
    fn insert_reports_seen_and_clear_forgets() {
        for layout in [Layout::Standard, Layout::Blocked] {
            let f = Bloom::new(Params::for_rate(1000, 0.01, layout).unwrap());
            assert_eq!(f.set_bits(), 0);
            assert!(!f.insert_bytes(b"a"));
            assert!(f.insert_bytes(b"a"));
            assert!(f.contains_bytes(b"a"));
            assert!(f.set_bits() >= 1 && f.set_bits() <= u64::from(f.params().hashes));
            f.clear();
            assert!(!f.contains_bytes(b"a"));
            assert_eq!(f.fill_ratio(), 0.0);
        }
    }

    #[test]
    fn estimates_track_the_truth() {
        let n = 20_000u64;
        for layout in [Layout::Standard, Layout::Blocked] {
            let f = Bloom::new(Params::for_rate(n, 0.01, layout).unwrap());
            for i in 0..n {
                f.insert(KeyHash::of_u64(i));
            }
            let est = f.estimated_items();
            assert!((est / n as f64 - 1.0).abs() < 0.03, "{layout}: {est}");
            // Half the bits set at the optimal k, give or take.
            let fill = f.fill_ratio();
            assert!((0.4..0.6).contains(&fill), "{layout}: fill {fill}");
            let fpr = f.estimated_fpr();
            assert!((0.005..0.02).contains(&fpr), "{layout}: fpr {fpr}");
        }
    }
}
