//! CLOCK (libCacheSim's `Clock` with its defaults: a 1-bit counter, new objects at 0).
//!
//! A hit raises the object's counter by one, up to its maximum, and moves nothing. To evict, the
//! hand looks at the oldest object: one with a counter above 0 loses 1 and goes back to the
//! head (a second chance); the first one found at 0 is the victim.

use super::arena::{self, Arena, Index, Queue};
use super::{Access, SimStore};

/// CLOCK with a `bits`-bit reference counter (libCacheSim's `n-bit-counter`, default 1).
pub struct Clock {
    index: Index,
    /// Per object: its counter.
    arena: Arena<u8>,
    queue: Queue,
    capacity: u64,
    max: u8,
}

impl Clock {
    /// An empty store of `capacity` bytes with a 1-bit counter.
    pub fn new(capacity: u64) -> Self {
        Clock::with_bits(capacity, 1)
    }

    /// An empty store whose counters count to `2^bits - 1` (`bits` from 0, plain FIFO, to 7).
    pub fn with_bits(capacity: u64, bits: u8) -> Self {
        Clock {
            index: arena::index(),
            arena: Arena::default(),
            queue: Queue::default(),
            capacity,
            max: ((1u16 << bits.min(7)) - 1) as u8,
        }
    }

    fn evict(&mut self) -> bool {
        while let Some(i) = self.queue.tail() {
            let node = self.arena.node_mut(i);
            if node.meta == 0 {
                self.arena.unlink(&mut self.queue, i);
                self.arena.forget(&mut self.index, i);
                return true;
            }
            node.meta -= 1;
            self.arena.move_to_head(&mut self.queue, i);
        }
        false
    }
}

impl SimStore for Clock {
    #[inline]
    fn get(&mut self, req: &Access) -> bool {
        match self.index.get(&req.key.raw()) {
            Some(&i) => {
                let node = self.arena.node_mut(i);
                if node.meta < self.max {
                    node.meta += 1;
                }
                true
            }
            None => false,
        }
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
        self.arena
            .insert_head(&mut self.index, &mut self.queue, req.key.raw(), req.size, 0);
        true
    }

    fn used_bytes(&self) -> u64 {
        self.queue.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Driver;

    #[test]
    fn a_referenced_object_gets_a_second_chance() {
        let mut s = Driver::new(Clock::new(3));
        assert!(s.put(1, 1) && s.put(2, 1) && s.put(3, 1));
        assert!(s.get(1) && s.get(1)); // counter 1 (the maximum with one bit)
        assert!(s.put(4, 1)); // 1 is spared (back to the head at 0); 2 goes
        assert!(!s.get(2) && s.get(3) && s.get(4));
        // Oldest first: 3 and 1, 4; 3 and 4 have counters of 1, 1 has 0.
        assert!(s.put(5, 1)); // 3 -> head (now 0), 1 is evicted
        assert!(!s.get(1));
        assert!(s.get(3) && s.get(4) && s.get(5));
    }

    #[test]
    fn zero_bits_is_fifo() {
        let mut s = Driver::new(Clock::with_bits(2, 0));
        assert!(s.put(1, 1) && s.put(2, 1));
        assert!(s.get(1));
        assert!(s.put(3, 1));
        assert!(!s.get(1) && s.get(2));
    }
}
