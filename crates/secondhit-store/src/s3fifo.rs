//! S3-FIFO (libCacheSim 0.3.5's `S3FIFO` with its defaults; Yang et al., SOSP 2023): a small
//! FIFO for new objects, a main FIFO for proven ones, and a ghost FIFO of keys recently evicted
//! from the small one.
//!
//! libCacheSim's rules, which decide exact hit counts:
//! * Sizes: small `floor(0.1 C)` (only an admission limit: a new object must be smaller than it,
//!   one back from the ghost at most as large),
//!   main `C - small`, ghost `floor(0.9 C)` (bytes of the keys' object sizes). Stored bytes are
//!   small + main; ghost keys hold no bytes of the cache.
//! * A hit in either queue adds one to the object's count and moves nothing. A request whose key
//!   is a ghost is a miss; the ghost entry is consumed by the lookup (even if the object is then
//!   not stored), and the object, if stored, goes straight to main.
//! * Until the first eviction, once small holds its share, new objects go to main.
//! * Eviction: from main when main is over its share or small is empty, otherwise from small.
//!   Small's oldest moves to main (count reset to 0) when it was hit at least twice, and the
//!   scan goes on; the first one hit less is evicted, its key to the ghost. Main's oldest with a
//!   count goes back to main's head with `min(count, 3) - 1`; the first with 0 is evicted.

use super::arena::{self, Arena, Index, Queue};
use super::{Access, SimStore};

/// Which queue an object (or ghost key) is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum On {
    Small,
    Main,
    Ghost,
}

#[derive(Clone, Copy, Debug)]
struct Meta {
    count: u32,
    on: On,
}

/// S3-FIFO by bytes.
pub struct S3Fifo {
    index: Index,
    arena: Arena<Meta>,
    small: Queue,
    main: Queue,
    ghost: Queue,
    capacity: u64,
    small_share: u64,
    main_share: u64,
    ghost_share: u64,
    /// The current request's key was a ghost (so a store goes to main).
    ghost_hit: bool,
    /// Whether anything was ever evicted.
    has_evicted: bool,
}

/// An object moves from small to main when it was hit this many times there.
const MOVE_TO_MAIN: u32 = 2;

impl S3Fifo {
    /// An empty store of `capacity` bytes with libCacheSim's shares: small 10 %, ghost 90 %.
    pub fn new(capacity: u64) -> Self {
        // As libCacheSim: a double product, truncated.
        let small_share = (capacity as f64 * 0.1) as u64;
        S3Fifo {
            index: arena::index(),
            arena: Arena::default(),
            small: Queue::default(),
            main: Queue::default(),
            ghost: Queue::default(),
            capacity,
            small_share,
            main_share: capacity - small_share,
            ghost_share: (capacity as f64 * 0.9) as u64,
            ghost_hit: false,
            has_evicted: false,
        }
    }

    fn evict(&mut self) {
        self.has_evicted = true;
        if self.main.bytes > self.main_share || self.small.bytes == 0 {
            self.evict_main();
        } else {
            self.evict_small();
        }
    }

    fn evict_small(&mut self) {
        while let Some(i) = self.arena.pop_tail(&mut self.small) {
            let meta = &mut self.arena.node_mut(i).meta;
            if meta.count >= MOVE_TO_MAIN {
                *meta = Meta {
                    count: 0,
                    on: On::Main,
                };
                self.arena.push_head(&mut self.main, i);
                continue;
            }
            self.make_ghost(i);
            return;
        }
    }

    /// Slot `i`, just evicted from small, becomes a ghost key (if the ghost can hold it).
    fn make_ghost(&mut self, i: u32) {
        let size = self.arena.node(i).size;
        if size > self.ghost_share {
            self.arena.forget(&mut self.index, i);
            return;
        }
        while self.ghost.bytes + size > self.ghost_share {
            let Some(old) = self.arena.pop_tail(&mut self.ghost) else {
                break;
            };
            self.arena.forget(&mut self.index, old);
        }
        self.arena.node_mut(i).meta = Meta {
            count: 0,
            on: On::Ghost,
        };
        self.arena.push_head(&mut self.ghost, i);
    }

    fn evict_main(&mut self) {
        while let Some(i) = self.arena.pop_tail(&mut self.main) {
            let meta = &mut self.arena.node_mut(i).meta;
            if meta.count >= 1 {
                meta.count = meta.count.min(3) - 1;
                self.arena.push_head(&mut self.main, i);
                continue;
            }
            self.arena.forget(&mut self.index, i);
            return;
        }
    }

    fn insert(&mut self, req: &Access, on: On) {
        let i = self
            .arena
            .alloc(req.key.raw(), req.size, Meta { count: 0, on });
        let q = match on {
            On::Small => &mut self.small,
            _ => &mut self.main,
        };
        self.arena.push_head(q, i);
        self.index.insert(req.key.raw(), i);
    }
}

impl SimStore for S3Fifo {
    fn get(&mut self, req: &Access) -> bool {
        self.ghost_hit = false;
        let Some(&i) = self.index.get(&req.key.raw()) else {
            return false;
        };
        let meta = &mut self.arena.node_mut(i).meta;
        match meta.on {
            On::Small | On::Main => {
                meta.count = meta.count.saturating_add(1);
                true
            }
            On::Ghost => {
                self.arena.unlink(&mut self.ghost, i);
                self.arena.forget(&mut self.index, i);
                self.ghost_hit = true;
                false
            }
        }
    }

    fn put(&mut self, req: &Access) -> bool {
        if req.size > self.small_share || req.size > self.capacity {
            return false;
        }
        while self.small.bytes + self.main.bytes + req.size > self.capacity {
            if self.small.is_empty() && self.main.is_empty() {
                break;
            }
            self.evict();
        }
        if std::mem::take(&mut self.ghost_hit) {
            self.insert(req, On::Main);
        } else if req.size >= self.small_share {
            // libCacheSim makes room first, then refuses an object as large as small's share.
            return false;
        } else if !self.has_evicted && self.small.bytes >= self.small_share {
            self.insert(req, On::Main);
        } else {
            self.insert(req, On::Small);
        }
        true
    }

    fn used_bytes(&self) -> u64 {
        self.small.bytes + self.main.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Driver;

    #[test]
    fn one_hit_wonders_leave_through_small_and_a_ghost_hit_goes_to_main() {
        // 100 bytes: small's share 10, main's 90, ghost 90. Objects of 5 bytes.
        let mut s = Driver::new(S3Fifo::new(100));
        for k in 0..20 {
            assert!(s.put(k, 5));
        }
        // Before any eviction, small took 10 bytes (0 and 1), the rest went to main.
        assert_eq!((s.store.small.bytes, s.store.main.bytes), (10, 90));
        assert!(s.get(0) && s.get(0)); // 0 is hit twice in small
                                       // A miss: main is at its share (not over) and small is not empty: evict from small.
                                       // 0 (hit twice) moves to main; 1 goes to the ghost.
        assert!(s.put(20, 5));
        assert_eq!(
            s.store.arena.node(s.store.index[&s.key(1)]).meta.on,
            On::Ghost
        );
        assert_eq!(
            s.store.arena.node(s.store.index[&s.key(0)]).meta.on,
            On::Main
        );
        // 1 comes back: a miss that consumes the ghost key; stored, it goes to main.
        assert!(!s.get(1));
        assert!(!s.store.index.contains_key(&s.key(1)));
        assert!(s.put(1, 5));
        assert_eq!(
            s.store.arena.node(s.store.index[&s.key(1)]).meta.on,
            On::Main
        );
        assert_eq!((s.store.small.bytes, s.store.main.bytes), (5, 95));
        // Too large for small's share: refused, nothing evicted.
        let used = s.store.used_bytes();
        assert!(!s.put(99, 11));
        assert_eq!(s.store.used_bytes(), used);
    }

    impl Driver<S3Fifo> {
        fn key(&self, k: u64) -> u128 {
            secondhit_admission::hash::KeyHash::of_u64(k).raw()
        }
    }
}
