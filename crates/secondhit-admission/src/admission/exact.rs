//! An exact generation: a hash map from key to count. The reference the Bloom-based
//! generations are measured against; not built for speed or for fixed memory.

use super::{Generation, Kind, Shape};
use crate::hash::{BuildFold, KeyHash};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

type Map = HashMap<u128, u32, BuildFold>;

/// Exact counts behind a mutex. "Exact" up to a collision of two keys' 128-bit hashes (about
/// 10^-20 for a billion keys): no false positives from a bit array.
#[derive(Debug, Default)]
pub struct Exact {
    counts: Mutex<Map>,
}

impl Exact {
    /// An empty generation.
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self) -> MutexGuard<'_, Map> {
        // A panic elsewhere while holding the lock cannot leave a count half-written.
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Generation for Exact {
    const KIND: Kind = Kind::Exact;
    fn record(&self, key: KeyHash) -> u32 {
        let mut map = self.map();
        let c = map.entry(key.raw()).or_insert(0);
        let before = *c;
        *c = c.saturating_add(1);
        before
    }

    fn count(&self, key: KeyHash) -> u32 {
        self.map().get(&key.raw()).copied().unwrap_or(0)
    }

    fn clear(&self) {
        self.map().clear();
    }

    fn accuracy(&self) -> Option<(f64, f64)> {
        None
    }

    fn memory_bytes(&self) -> u64 {
        // hashbrown: one control byte plus the (u128, u32) slot, padded to 32 bytes, per bucket.
        self.map().capacity() as u64 * 33
    }

    fn shape(&self) -> Shape {
        Shape::EXACT
    }

    fn save(&self, out: &mut Vec<u8>) {
        // In key order, so that the same contents always give the same bytes.
        let map = self.map();
        let mut entries: Vec<(&u128, &u32)> = map.iter().collect();
        entries.sort_unstable();
        out.reserve(entries.len() * 20);
        for (k, c) in entries {
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&c.to_le_bytes());
        }
    }

    fn sized_for(_settings: &super::Settings) -> Result<Self, crate::bloom::ParamError> {
        Ok(Exact::new())
    }

    fn load(&self, bytes: &[u8]) -> bool {
        if bytes.len() % 20 != 0 {
            return false;
        }
        let mut map = self.map();
        map.clear();
        for entry in bytes.chunks_exact(20) {
            let (k, c) = entry.split_at(16);
            let mut kb = [0u8; 16];
            kb.copy_from_slice(k);
            let mut cb = [0u8; 4];
            cb.copy_from_slice(c);
            map.insert(u128::from_le_bytes(kb), u32::from_le_bytes(cb));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_exactly_and_clears() {
        let e = Exact::new();
        for i in 0..1000u64 {
            for j in 0..(i % 4) {
                assert_eq!(e.record(KeyHash::of_u64(i)), j as u32);
            }
        }
        for i in 0..1000u64 {
            assert_eq!(e.count(KeyHash::of_u64(i)), (i % 4) as u32);
        }
        assert!(e.memory_bytes() > 0);
        e.clear();
        assert_eq!(e.count(KeyHash::of_u64(3)), 0);
        assert_eq!(e.accuracy(), None);
    }
}
