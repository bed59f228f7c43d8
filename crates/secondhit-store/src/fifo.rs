//! FIFO (libCacheSim's `FIFO`): objects leave in the order they came; a hit changes nothing.

use super::arena::{self, Arena, EvictionLog, Index, Queue};
use super::{Access, SimStore};

/// First in, first out, by bytes.
pub struct Fifo {
    index: Index,
    arena: Arena<()>,
    queue: Queue,
    capacity: u64,
    /// Evicted objects, when asked to keep them.
    evicted: EvictionLog,
}

impl Fifo {
    /// An empty store of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Fifo {
            index: arena::index(),
            arena: Arena::default(),
            queue: Queue::default(),
            capacity,
            evicted: EvictionLog::default(),
        }
    }
}

impl Fifo {
    /// Evicts the oldest object; false if there is none.
    fn evict(&mut self) -> bool {
        self.arena
            .evict_tail(&mut self.queue, &mut self.index, &mut self.evicted)
    }
}

impl SimStore for Fifo {
    #[inline]
    fn get(&mut self, req: &Access) -> bool {
        self.index.contains_key(&req.key.raw())
    }

    fn put(&mut self, req: &Access) -> bool {
        if !super::make_room(
            self,
            req.size,
            self.capacity,
            |s| s.queue.bytes,
            Self::evict,
        ) {
            return false;
        }
        self.arena.insert_head(
            &mut self.index,
            &mut self.queue,
            req.key.raw(),
            req.size,
            (),
        );
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
    fn evicts_in_insertion_order_whatever_the_hits() {
        let mut s = Driver::new(Fifo::new(10));
        assert!(s.put(1, 4) && s.put(2, 4));
        assert!(s.get(1)); // changes nothing
        assert!(s.put(3, 4)); // evicts 1, the first in
        assert!(!s.get(1) && s.get(2) && s.get(3));
        assert!(!s.put(4, 11));
        assert!(s.put(5, 6)); // 4 + 4 + 6 > 10: evicts 2 only
        assert!(!s.get(2) && s.get(3) && s.get(5));
        assert_eq!(s.store.used_bytes(), 10);
    }
}
