//! ARC (libCacheSim 0.3.5's `ARC`; Megiddo and Modha, FAST 2003), in bytes.
//!
//! T1 holds objects seen once recently, T2 objects seen at least twice; B1 and B2 are their
//! ghosts (keys of objects evicted from T1 and T2). A hit in T1 or T2 moves the object to T2's
//! head. A request whose key is a ghost is a miss that moves the target `p` (T1's share): up by
//! `max(|B2| / |B1|, 1)` bytes after a B1 ghost, down by `max(|B1| / |B2|, 1)` after a B2 ghost,
//! each ratio of ghost bytes taken before the ghost is removed and never scaled by the object's
//! size (as libCacheSim); the object, if stored, goes to T2's head, making room by REPLACE only.
//! A key seen nowhere is stored at T1's head after evictions that each trim at most one ghost:
//! if `|T1| + |B1| + size > C`, B1's oldest goes (then REPLACE), or with B1 empty T1's oldest is
//! dropped outright; otherwise, when everything adds up to `2C` or more, B2's oldest goes, then
//! REPLACE. REPLACE moves T1's oldest to B1 when T1 is over `p` (or at `p` after a B2 ghost), or
//! when T2 is empty, and T2's oldest to B2 otherwise.

use super::arena::{self, Arena, Index, Queue};
use super::{Access, SimStore};

/// The list an entry is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum List {
    T1,
    T2,
    B1,
    B2,
}

/// ARC by bytes.
pub struct AdaptiveReplacement {
    index: Index,
    arena: Arena<List>,
    t1: Queue,
    t2: Queue,
    b1: Queue,
    b2: Queue,
    /// The target size of T1, in bytes (a float, as libCacheSim's).
    p: f64,
    in_b1: bool,
    /// The last key found in the index was a B2 ghost (libCacheSim keeps this until a later
    /// request finds a key, and REPLACE reads it).
    in_b2: bool,
    /// The request whose key was a ghost, while it is being stored.
    ghost_request: Option<u64>,
    capacity: u64,
}

impl AdaptiveReplacement {
    /// An empty store of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        AdaptiveReplacement {
            index: arena::index(),
            arena: Arena::default(),
            t1: Queue::default(),
            t2: Queue::default(),
            b1: Queue::default(),
            b2: Queue::default(),
            p: 0.0,
            in_b1: false,
            in_b2: false,
            ghost_request: None,
            capacity,
        }
    }

    fn ghost_mode(&self, vtime: u64) -> bool {
        self.ghost_request == Some(vtime) && (self.in_b1 || self.in_b2)
    }

    /// Forgets the oldest entry of `list` entirely; false if it is empty.
    fn drop_oldest(&mut self, list: List) -> bool {
        let q = match list {
            List::T1 => &mut self.t1,
            List::T2 => &mut self.t2,
            List::B1 => &mut self.b1,
            List::B2 => &mut self.b2,
        };
        let Some(i) = self.arena.pop_tail(q) else {
            return false;
        };
        self.arena.forget(&mut self.index, i);
        true
    }

    /// Moves `from`'s oldest to the head of its ghost list.
    fn demote(&mut self, from: List) -> bool {
        let (q, ghost, to) = match from {
            List::T1 => (&mut self.t1, &mut self.b1, List::B1),
            _ => (&mut self.t2, &mut self.b2, List::B2),
        };
        let Some(i) = self.arena.pop_tail(q) else {
            return false;
        };
        self.arena.node_mut(i).meta = to;
        self.arena.push_head(ghost, i);
        true
    }

    fn replace(&mut self) -> bool {
        let t1 = self.t1.bytes as f64;
        let from_t1 = (self.t1.bytes > 0 && (t1 > self.p || (t1 == self.p && self.in_b2)))
            || self.t2.bytes == 0;
        self.demote(if from_t1 { List::T1 } else { List::T2 })
    }

    /// One eviction (one resident object leaves); false if nothing could.
    fn evict(&mut self, req: &Access) -> bool {
        if self.ghost_mode(req.vtime) {
            return self.replace();
        }
        let c = self.capacity;
        if self.t1.bytes + self.b1.bytes + req.size > c {
            if self.b1.bytes > 0 {
                self.drop_oldest(List::B1);
                self.replace()
            } else {
                self.drop_oldest(List::T1)
            }
        } else {
            let total = self.t1.bytes + self.t2.bytes + self.b1.bytes + self.b2.bytes;
            if total >= c.saturating_mul(2) && self.b2.bytes > 0 {
                self.drop_oldest(List::B2);
            }
            self.replace()
        }
    }
}

/// `a / b` with C's IEEE rules (x/0 is infinite, 0/0 NaN), then `max(.., 1)` as C's ternary
/// (a NaN compares false and gives 1).
fn ratio_at_least_one(a: u64, b: u64) -> f64 {
    let r = a as f64 / b as f64;
    if r > 1.0 {
        r
    } else {
        1.0
    }
}

impl SimStore for AdaptiveReplacement {
    fn get(&mut self, req: &Access) -> bool {
        let Some(&i) = self.index.get(&req.key.raw()) else {
            return false;
        };
        self.in_b1 = false;
        self.in_b2 = false;
        match self.arena.node(i).meta {
            List::T1 => {
                self.arena.unlink(&mut self.t1, i);
                self.arena.node_mut(i).meta = List::T2;
                self.arena.push_head(&mut self.t2, i);
                true
            }
            List::T2 => {
                self.arena.move_to_head(&mut self.t2, i);
                true
            }
            List::B1 => {
                self.ghost_request = Some(req.vtime);
                self.in_b1 = true;
                let delta = ratio_at_least_one(self.b2.bytes, self.b1.bytes);
                self.p = (self.p + delta).min(self.capacity as f64);
                self.arena.unlink(&mut self.b1, i);
                self.index.remove(&req.key.raw());
                self.arena.release(i);
                false
            }
            List::B2 => {
                self.ghost_request = Some(req.vtime);
                self.in_b2 = true;
                let delta = ratio_at_least_one(self.b1.bytes, self.b2.bytes);
                self.p = (self.p - delta).max(0.0);
                self.arena.unlink(&mut self.b2, i);
                self.index.remove(&req.key.raw());
                self.arena.release(i);
                false
            }
        }
    }

    fn put(&mut self, req: &Access) -> bool {
        if req.size > self.capacity {
            return false;
        }
        while self.t1.bytes + self.t2.bytes + req.size > self.capacity {
            if !self.evict(req) {
                break;
            }
        }
        let ghost = self.ghost_mode(req.vtime);
        let list = if ghost { List::T2 } else { List::T1 };
        let i = self.arena.alloc(req.key.raw(), req.size, list);
        if ghost {
            self.arena.push_head(&mut self.t2, i);
            self.in_b1 = false;
            self.in_b2 = false;
            self.ghost_request = None;
        } else {
            self.arena.push_head(&mut self.t1, i);
        }
        self.index.insert(req.key.raw(), i);
        true
    }

    fn used_bytes(&self) -> u64 {
        self.t1.bytes + self.t2.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Driver;

    #[test]
    fn a_second_request_promotes_and_a_ghost_moves_the_target() {
        let mut s = Driver::new(AdaptiveReplacement::new(3));
        assert!(s.put(1, 1) && s.put(2, 1) && s.put(3, 1));
        assert!(s.get(1)); // 1 -> T2
        assert_eq!((s.store.t1.bytes, s.store.t2.bytes), (2, 1));
        // 4 misses: |T1| + |B1| + 1 = 3, not over C; REPLACE: T1 (2) > p (0): 2 -> B1.
        assert!(s.put(4, 1));
        assert_eq!(s.store.b1.bytes, 1);
        // 2 again: a B1 ghost, a miss; p rises by max(0 / 1, 1) = 1; stored in T2.
        assert!(!s.request(2, 1));
        assert_eq!(s.store.p, 1.0);
        assert_eq!((s.store.t1.bytes, s.store.t2.bytes), (1, 2));
        assert!(s.get(2) && s.get(1));
        assert_eq!(s.store.used_bytes(), 3);
    }
}
