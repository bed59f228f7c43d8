//! The exact byte-capacity LRU (libCacheSim's `LRU`): a hit moves the object to the head; the
//! victim is the tail, the least recently used.

use super::arena::{self, Arena, EvictionLog, Index, Queue};
use super::{Access, SimStore};

/// An exact LRU with byte capacity: evicts least recently used objects until the new one fits.
/// A hit does not change an object's stored size.
pub struct ExactLru {
    index: Index,
    arena: Arena<()>,
    queue: Queue,
    capacity: u64,
    /// Evicted objects, when asked to keep them.
    evicted: EvictionLog,
}

impl ExactLru {
    /// An empty store of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        ExactLru {
            index: arena::index(),
            arena: Arena::default(),
            queue: Queue::default(),
            capacity,
            evicted: EvictionLog::default(),
        }
    }

    /// Objects stored.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Evicts the least recently used object; false if there is none.
    fn evict(&mut self) -> bool {
        self.arena
            .evict_tail(&mut self.queue, &mut self.index, &mut self.evicted)
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

impl SimStore for ExactLru {
    #[inline]
    fn get(&mut self, req: &Access) -> bool {
        match self.index.get(&req.key.raw()) {
            Some(&i) => {
                self.arena.move_to_head(&mut self.queue, i);
                true
            }
            None => false,
        }
    }

    fn put(&mut self, req: &Access) -> bool {
        let key = req.key.raw();
        if let Some(i) = self.index.remove(&key) {
            self.arena.unlink(&mut self.queue, i);
            self.arena.release(i);
        }
        if !super::make_room(
            self,
            req.size,
            self.capacity,
            |s| s.queue.bytes,
            Self::evict,
        ) {
            return false;
        }
        let i = self.arena.alloc(key, req.size, ());
        self.arena.push_head(&mut self.queue, i);
        self.index.insert(key, i);
        true
    }

    fn remove(&mut self, key: u128) -> bool {
        if let Some(i) = self.index.remove(&key) {
            self.arena.unlink(&mut self.queue, i);
            self.arena.release(i);
        }
        true
    }

    fn used_bytes(&self) -> u64 {
        self.queue.bytes
    }

    fn keep_evicted(&mut self) -> bool {
        self.evicted.keep();
        true
    }

    fn take_evicted(&mut self, out: &mut Vec<(u128, u64)>) {
        self.evicted.take(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Driver;

    #[test]
    fn evicts_least_recently_used_by_bytes_and_reuses_slots() {
        let mut s = Driver::new(ExactLru::new(10));
        assert!(s.put(1, 4) && s.put(2, 4));
        assert!(s.get(1)); // 1 is now the most recent
        assert!(s.put(3, 4)); // 12 > 10: evicts 2, the least recent
        assert!(!s.get(2) && s.get(1) && s.get(3));
        assert_eq!((s.store.len(), s.store.used_bytes()), (2, 8));
        // Too large for the whole store: refused, nothing evicted.
        assert!(!s.put(4, 11));
        assert_eq!(s.store.len(), 2);
        // Exactly the capacity: everything else goes.
        assert!(s.put(5, 10));
        assert_eq!((s.store.len(), s.store.used_bytes()), (1, 10));
        assert!(s.get(5) && !s.get(1) && !s.get(3));
        // A key stored again replaces its old size.
        assert!(s.put(5, 3) && s.put(6, 7));
        assert_eq!((s.store.len(), s.store.used_bytes()), (2, 10));
        // Slots were reused: never more than the most objects held at once, plus one.
        assert!(
            s.store.arena.slots() <= 3,
            "{} slots",
            s.store.arena.slots()
        );
        // Order from most to least recent: 6, 5.
        assert!(s.put(7, 3)); // evicts 5
        assert!(!s.get(5) && s.get(6) && s.get(7));
        assert!(!s.store.is_empty());
    }
}
