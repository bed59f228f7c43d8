//! The offline bounds: Belady's MIN (libCacheSim's `Belady`) and its size-aware relative
//! (libCacheSim's `BeladySize`). Both read each request's next access
//! ([`Access::next`], computed by the simulator in a pass before the run).
//!
//! * [`Belady`] evicts the object whose next request is farthest (never-again objects first);
//!   a hit takes the request's next access. Optimal for objects of one size; with sizes it is a
//!   strong bound, not the optimum. Exact against libCacheSim: hit counts do not depend on the
//!   order among never-again objects (they are never hit), which is the only tie.
//! * [`BeladySize`] evicts, of 128 objects sampled at random, the one with the largest
//!   `size x distance to its next request` (the first sampled wins ties); it never keeps an
//!   object with no next request (bypassed on a miss, after the evictions its insertion asked
//!   for, and dropped on its last hit). libCacheSim samples by drawing buckets of its own hash
//!   table with its own generator, so its choices cannot be reproduced without its table; ours
//!   sample uniformly with a seeded generator, and the README bounds the difference.

use super::arena::{self, Arena, Index};
use super::{Access, SimStore};
use crate::NEVER;
use std::collections::BinaryHeap;

/// Belady's MIN by bytes.
pub struct Belady {
    index: Index,
    /// Per object: its next access.
    arena: Arena<u64>,
    /// (next access, slot), largest first; entries go stale when an object is hit or evicted
    /// and are skipped when they surface.
    heap: BinaryHeap<(u64, u32)>,
    used: u64,
    capacity: u64,
}

impl Belady {
    /// An empty store of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Belady {
            index: arena::index(),
            arena: Arena::default(),
            heap: BinaryHeap::new(),
            used: 0,
            capacity,
        }
    }

    fn evict(&mut self) -> bool {
        while let Some((next, slot)) = self.heap.pop() {
            // Current if the slot holds an object that still waits for `next`: a finite next
            // access belongs to one object only, and stale ones are in the past.
            let node = self.arena.node(slot);
            if node.meta != next || self.index.get(&node.key) != Some(&slot) {
                continue;
            }
            self.used -= node.size;
            self.index.remove(&node.key);
            self.arena.release(slot);
            return true;
        }
        false
    }

    /// Drops stale heap entries once they outnumber the live ones (so memory follows the
    /// cache, not the trace).
    fn compact(&mut self) {
        if self.heap.len() > 2 * self.index.len() + 1024 {
            let live: Vec<(u64, u32)> = self
                .index
                .values()
                .map(|&slot| (self.arena.node(slot).meta, slot))
                .collect();
            self.heap = live.into();
        }
    }
}

impl SimStore for Belady {
    fn get(&mut self, req: &Access) -> bool {
        let Some(&slot) = self.index.get(&req.key.raw()) else {
            return false;
        };
        self.arena.node_mut(slot).meta = req.next;
        self.heap.push((req.next, slot));
        self.compact();
        true
    }

    fn put(&mut self, req: &Access) -> bool {
        if !super::make_room(self, req.size, self.capacity, |s| s.used, Self::evict) {
            return false;
        }
        let slot = self.arena.alloc(req.key.raw(), req.size, req.next);
        self.index.insert(req.key.raw(), slot);
        self.heap.push((req.next, slot));
        self.used += req.size;
        true
    }

    fn used_bytes(&self) -> u64 {
        self.used
    }
}

/// Per object of [`BeladySize`]: its next access and its place in the sampling list.
#[derive(Clone, Copy, Debug)]
struct Sampled {
    next: u64,
    at: u32,
}

/// Belady by `size x distance`, sampled (libCacheSim's `BeladySize`, 128 samples).
pub struct BeladySize {
    index: Index,
    arena: Arena<Sampled>,
    /// Every stored object's slot, for uniform sampling.
    resident: Vec<u32>,
    rng: SplitMix64,
    used: u64,
    capacity: u64,
}

/// Objects sampled per eviction (libCacheSim's `n-sample` default).
pub const SAMPLES: usize = 128;

impl BeladySize {
    /// An empty store of `capacity` bytes whose sampling starts from `seed`.
    pub fn new(capacity: u64, seed: u64) -> Self {
        BeladySize {
            index: arena::index(),
            arena: Arena::default(),
            resident: Vec::new(),
            rng: SplitMix64(seed),
            used: 0,
            capacity,
        }
    }

    fn remove(&mut self, slot: u32) {
        let Sampled { at, .. } = self.arena.node(slot).meta;
        self.resident.swap_remove(at as usize);
        if let Some(&moved) = self.resident.get(at as usize) {
            self.arena.node_mut(moved).meta.at = at;
        }
        let node = self.arena.node(slot);
        self.used -= node.size;
        self.index.remove(&node.key);
        self.arena.release(slot);
    }

    fn evict(&mut self, now: u64) -> bool {
        if self.resident.is_empty() {
            return false;
        }
        let mut best: Option<(u128, u32)> = None;
        for _ in 0..SAMPLES {
            let pick = (self.rng.next() % self.resident.len() as u64) as usize;
            let slot = self.resident[pick];
            let node = self.arena.node(slot);
            let score = u128::from(node.size) * u128::from(node.meta.next.saturating_sub(now));
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, slot));
            }
        }
        match best {
            Some((_, slot)) => {
                self.remove(slot);
                true
            }
            None => false,
        }
    }
}

impl SimStore for BeladySize {
    fn get(&mut self, req: &Access) -> bool {
        let Some(&slot) = self.index.get(&req.key.raw()) else {
            return false;
        };
        if req.next == NEVER {
            self.remove(slot);
        } else {
            self.arena.node_mut(slot).meta.next = req.next;
        }
        true
    }

    fn put(&mut self, req: &Access) -> bool {
        if req.size > self.capacity {
            return false;
        }
        while self.used + req.size > self.capacity {
            if !self.evict(req.vtime) {
                break;
            }
        }
        if req.next == NEVER {
            return false;
        }
        let at = u32::try_from(self.resident.len()).unwrap_or(u32::MAX);
        let slot = self
            .arena
            .alloc(req.key.raw(), req.size, Sampled { next: req.next, at });
        self.resident.push(slot);
        self.index.insert(req.key.raw(), slot);
        self.used += req.size;
        true
    }

    fn used_bytes(&self) -> u64 {
        self.used
    }
}

/// A small, seeded generator (SplitMix64): the same samples on every run.
#[derive(Clone, Copy, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::replay;

    #[test]
    fn belady_evicts_the_farthest_next_request() {
        // Capacity 2, unit sizes: 1 2 3 1 2 1. At 3, 1 is next at 3, 2 at 4: evict 2... and 3
        // (never again) is stored and goes first at the next eviction.
        let trace = [(1, 1), (2, 1), (3, 1), (1, 1), (2, 1), (1, 1)];
        let hits = replay(&mut Belady::new(2), &trace);
        assert_eq!(hits, vec![false, false, false, true, false, true]);
    }

    #[test]
    fn belady_is_optimal_on_a_small_trace() {
        // 1 2 3 4 1 2 5 1 2 3 4 5 with 3 slots: MIN has 5 hits here (a textbook trace).
        let trace: Vec<(u64, u64)> = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5]
            .iter()
            .map(|&k| (k, 1))
            .collect();
        let hits = replay(&mut Belady::new(3), &trace);
        assert_eq!(hits.iter().filter(|h| **h).count(), 5);
    }

    #[test]
    fn belady_size_keeps_nothing_without_a_future() {
        let trace = [(1, 5), (2, 5), (1, 5), (3, 5), (2, 5)];
        let mut s = BeladySize::new(10, 0);
        let hits = replay(&mut s, &trace);
        // 1 and 2 are stored (both come back); 1's last hit drops it; 3 is never stored.
        assert_eq!(hits, vec![false, false, true, false, true]);
        assert_eq!(s.used_bytes(), 0, "the last hit of 2 dropped it too");
    }
}
