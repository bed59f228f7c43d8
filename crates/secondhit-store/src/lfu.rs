//! LFU (libCacheSim's `LFU`): the victim is the least frequently used object, and among those
//! the one whose last use (insertion or hit) is oldest. Counts start at 1, rise by one a hit, and
//! are forgotten on eviction.

use super::arena::{self, Arena, Index, Queue};
use super::{Access, SimStore};
use std::collections::BTreeMap;

/// LFU by bytes, with LRU among equal counts.
pub struct Lfu {
    index: Index,
    /// Per object: its count.
    arena: Arena<u64>,
    /// One queue per count (newest use at the head).
    buckets: BTreeMap<u64, Queue>,
    used: u64,
    capacity: u64,
}

impl Lfu {
    /// An empty store of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Lfu {
            index: arena::index(),
            arena: Arena::default(),
            buckets: BTreeMap::new(),
            used: 0,
            capacity,
        }
    }

    fn evict(&mut self) -> bool {
        let Some(mut entry) = self.buckets.first_entry() else {
            return false;
        };
        let queue = entry.get_mut();
        let Some(victim) = self.arena.pop_tail(queue) else {
            return false;
        };
        if queue.is_empty() {
            entry.remove();
        }
        let node = self.arena.node(victim);
        self.used -= node.size;
        self.index.remove(&node.key);
        self.arena.release(victim);
        true
    }
}

impl SimStore for Lfu {
    fn get(&mut self, req: &Access) -> bool {
        let Some(&i) = self.index.get(&req.key.raw()) else {
            return false;
        };
        let count = self.arena.node(i).meta;
        if let Some(queue) = self.buckets.get_mut(&count) {
            self.arena.unlink(queue, i);
            if queue.is_empty() {
                self.buckets.remove(&count);
            }
        }
        self.arena.node_mut(i).meta = count + 1;
        let queue = self.buckets.entry(count + 1).or_default();
        self.arena.push_head(queue, i);
        true
    }

    fn put(&mut self, req: &Access) -> bool {
        if !super::make_room(self, req.size, self.capacity, |s| s.used, Self::evict) {
            return false;
        }
        let i = self.arena.alloc(req.key.raw(), req.size, 1);
        self.arena.push_head(self.buckets.entry(1).or_default(), i);
        self.index.insert(req.key.raw(), i);
        self.used += req.size;
        true
    }

    fn used_bytes(&self) -> u64 {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Driver;

    #[test]
    fn evicts_the_least_frequent_and_among_them_the_least_recent() {
        let mut s = Driver::new(Lfu::new(3));
        assert!(s.put(1, 1) && s.put(2, 1) && s.put(3, 1));
        assert!(s.get(1) && s.get(1) && s.get(2)); // counts 3, 2, 1
        assert!(s.put(4, 1)); // evicts 3 (count 1)
        assert!(!s.get(3));
        assert!(s.get(4)); // counts: 1 -> 3, 2 -> 2, 4 -> 2; 2 was used before 4
        assert!(s.put(5, 1)); // evicts 2
        assert!(!s.get(2) && s.get(1) && s.get(4) && s.get(5));
        assert_eq!(s.store.used_bytes(), 3);
    }
}
