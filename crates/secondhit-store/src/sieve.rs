//! SIEVE (libCacheSim's `Sieve`; Zhang et al., NSDI 2024): a FIFO queue with a visited bit and
//! a hand.
//!
//! A hit sets the object's visited bit and moves nothing; new objects go to the head. To evict,
//! the hand walks from where it stopped last (the tail at first) towards the head, wrapping to
//! the tail, clearing visited bits, and evicts the first object it finds unvisited; it then rests
//! on that object's newer neighbour (or starts from the tail again if the victim was the head).

use super::arena::{self, Arena, Index, Queue};
use super::{Access, SimStore};

/// SIEVE by bytes.
pub struct Sieve {
    index: Index,
    /// Per object: visited since the hand last passed.
    arena: Arena<bool>,
    queue: Queue,
    hand: Option<u32>,
    capacity: u64,
}

impl Sieve {
    /// An empty store of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Sieve {
            index: arena::index(),
            arena: Arena::default(),
            queue: Queue::default(),
            hand: None,
            capacity,
        }
    }

    fn evict(&mut self) -> bool {
        let Some(mut at) = self.hand.or(self.queue.tail()) else {
            return false;
        };
        loop {
            let node = self.arena.node_mut(at);
            if !node.meta {
                break;
            }
            node.meta = false;
            match self.arena.newer(at).or(self.queue.tail()) {
                Some(next) => at = next,
                None => break,
            }
        }
        self.hand = self.arena.newer(at);
        self.arena.unlink(&mut self.queue, at);
        self.arena.forget(&mut self.index, at);
        true
    }
}

impl SimStore for Sieve {
    #[inline]
    fn get(&mut self, req: &Access) -> bool {
        match self.index.get(&req.key.raw()) {
            Some(&i) => {
                self.arena.node_mut(i).meta = true;
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
        self.arena.insert_head(
            &mut self.index,
            &mut self.queue,
            req.key.raw(),
            req.size,
            false,
        );
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
    fn the_hand_spares_visited_objects_and_stays_where_it_stopped() {
        let mut s = Driver::new(Sieve::new(3));
        assert!(s.put(1, 1) && s.put(2, 1) && s.put(3, 1));
        assert!(s.get(1) && s.get(3));
        // Hand from the tail: 1 visited (cleared), 2 unvisited -> evicted; hand rests on 3.
        assert!(s.put(4, 1));
        assert!(!s.get(2));
        // Hand at 3: visited (cleared), then 4 (newest, unvisited) -> evicted; hand wraps.
        assert!(s.put(5, 1));
        assert!(!s.get(4) && s.get(1) && s.get(3) && s.get(5));
        // All visited now: the hand (at the tail, 1) clears 1, 3, 5 and wraps to 1.
        assert!(s.put(6, 1));
        assert!(!s.get(1) && s.get(3) && s.get(5) && s.get(6));
    }
}
