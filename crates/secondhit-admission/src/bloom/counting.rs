//! A counting Bloom filter with 4-bit saturating counters: the count-min estimate of how many
//! times a key was recorded (Cohen and Matias's "spectral" minimum selection).
//!
//! It uses the very same positions as [`Bloom`](super::Bloom) for the same [`Params`]: a counter
//! is non-zero exactly where the Bloom filter's bit would be set, so "count >= 1" answers exactly
//! what `Bloom::contains` answers on the same inserts. That is what makes `nth-hit:2` behave as
//! `second-hit`.

use super::{for_each_position, load_blocks, save_blocks, word, zeroed_blocks, Block, Params};
use crate::hash::KeyHash;
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;

/// The largest count a counter holds; counts saturate there.
pub const MAX_COUNT: u32 = 15;

const COUNTERS_PER_WORD: u64 = 16;

/// A concurrent counting Bloom filter: `increment` and `count` take `&self` and are lock-free.
///
/// `count` never under-estimates (up to [`MAX_COUNT`]): it is the minimum of the key's counters,
/// and every increment of the key raised each of them. It over-estimates when other keys share
/// all of a key's counters, which is rarer than a Bloom false positive for counts above 1.
/// Memory: 4 bits per position, four times a [`Bloom`](super::Bloom) of the same `Params`.
///
/// # Example
/// ```
/// use secondhit_admission::bloom::{Counting, Layout, Params};
/// use secondhit_admission::KeyHash;
/// let c = Counting::new(Params::for_rate(1_000, 0.01, Layout::Standard)?);
/// let k = KeyHash::of(b"/a");
/// assert_eq!(c.increment(k), 0);
/// assert_eq!(c.increment(k), 1);
/// assert_eq!(c.count(k), 2);
/// # Ok::<(), secondhit_admission::bloom::ParamError>(())
/// ```
pub struct Counting {
    blocks: Box<[Block]>,
    params: Params,
}

impl fmt::Debug for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counting")
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl Counting {
    /// Empty counters at the positions of a Bloom filter with these parameters.
    pub fn new(params: Params) -> Counting {
        Counting {
            blocks: zeroed_blocks(params.bits.div_ceil(COUNTERS_PER_WORD).div_ceil(8)),
            params,
        }
    }

    /// The parameters the positions come from.
    pub fn params(&self) -> Params {
        self.params
    }

    /// Adds one to each of the key's counters (saturating at [`MAX_COUNT`]) and returns the
    /// key's count from before this call, read by the same atomic operations.
    #[inline]
    pub fn increment(&self, key: KeyHash) -> u32 {
        let mut before = MAX_COUNT;
        for_each_position(&self.params, key, |pos| {
            let w = word(&self.blocks, pos / COUNTERS_PER_WORD);
            let shift = (pos % COUNTERS_PER_WORD) * 4;
            let old = match w.fetch_update(Relaxed, Relaxed, |x| {
                if (x >> shift) & 0xf == u64::from(MAX_COUNT) {
                    None
                } else {
                    Some(x + (1 << shift))
                }
            }) {
                Ok(x) | Err(x) => x,
            };
            before = before.min(((old >> shift) & 0xf) as u32);
            true
        });
        before
    }

    /// The key's estimated count: the minimum of its counters; 0 means never recorded.
    #[inline]
    pub fn count(&self, key: KeyHash) -> u32 {
        let mut min = MAX_COUNT;
        for_each_position(&self.params, key, |pos| {
            let x = word(&self.blocks, pos / COUNTERS_PER_WORD).load(Relaxed);
            min = min.min(((x >> ((pos % COUNTERS_PER_WORD) * 4)) & 0xf) as u32);
            min > 0
        });
        min
    }

    /// The fraction of counters that are non-zero (the fill of the equivalent Bloom filter).
    /// Reads every counter: O(m).
    pub fn fill_ratio(&self) -> f64 {
        let nonzero: u64 = self
            .blocks
            .iter()
            .flat_map(|b| b.0.iter())
            .map(|w| {
                let x = w.load(Relaxed);
                // A nibble is non-zero iff any of its 4 bits is: fold them into its lowest bit.
                let any = (x | (x >> 1) | (x >> 2) | (x >> 3)) & 0x1111_1111_1111_1111;
                u64::from(any.count_ones())
            })
            .sum();
        nonzero as f64 / self.params.bits as f64
    }

    /// The chance that a key never recorded reads as count >= 1: `fill^k`. O(m).
    pub fn estimated_fpr(&self) -> f64 {
        self.fill_ratio().powi(self.params.hashes as i32)
    }

    /// Heap memory of the counters, in bytes.
    pub fn memory_bytes(&self) -> u64 {
        self.blocks.len() as u64 * 64
    }

    /// Appends the counters (for a snapshot of a generation).
    pub(crate) fn save(&self, out: &mut Vec<u8>) {
        save_blocks(&self.blocks, out)
    }

    /// Replaces the counters from what [`Counting::save`] wrote for the same parameters;
    /// `false`, changing nothing, when the length does not match.
    pub(crate) fn load(&self, bytes: &[u8]) -> bool {
        load_blocks(&self.blocks, bytes)
    }

    /// Sets every counter to zero (same caveats as [`Bloom::clear`](super::Bloom::clear)).
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
    use super::super::{Bloom, Layout};
    use super::*;

    #[test]
    fn counts_saturate_and_clear() {
        let c = Counting::new(Params::new(1024, 4, Layout::Standard).unwrap());
        let k = KeyHash::of(b"k");
        for i in 0..20 {
            assert_eq!(c.increment(k), i.min(MAX_COUNT));
        }
        assert_eq!(c.count(k), MAX_COUNT);
        assert!(c.fill_ratio() > 0.0);
        c.clear();
        assert_eq!(c.count(k), 0);
        assert_eq!(c.fill_ratio(), 0.0);
    }

    #[test]
    fn nonzero_counters_are_exactly_the_bloom_bits() {
        for layout in [Layout::Standard, Layout::Blocked] {
            let p = Params::for_rate(2_000, 0.05, layout).unwrap();
            let (c, b) = (Counting::new(p), Bloom::new(p));
            // Overfill on purpose, with repeats, so collisions are common.
            for i in 0..6_000u64 {
                let k = KeyHash::of_u64(i % 4_000);
                assert_eq!(c.increment(k) >= 1, b.insert(k), "{layout} key {i}");
            }
            for i in 0..20_000u64 {
                let k = KeyHash::of_u64(i);
                assert_eq!(c.count(k) >= 1, b.contains(k));
            }
            assert!((c.fill_ratio() - b.fill_ratio()).abs() < 1e-12);
        }
    }

    #[test]
    fn never_under_counts() {
        let c = Counting::new(Params::for_rate(500, 0.01, Layout::Standard).unwrap());
        let mut truth = std::collections::HashMap::new();
        for i in 0..3_000u64 {
            let key = (i * 7919) % 700;
            let t = truth.entry(key).or_insert(0u32);
            assert!(c.increment(KeyHash::of_u64(key)) >= (*t).min(MAX_COUNT));
            *t += 1;
        }
        for (key, t) in truth {
            assert!(c.count(KeyHash::of_u64(key)) >= t.min(MAX_COUNT));
        }
    }
}
