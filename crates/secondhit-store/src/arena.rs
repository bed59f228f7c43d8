//! The one linked-list plumbing of every exact eviction policy: objects live in slots of one
//! arena, linked by `u32` index into any number of queues, with the key and size inline (no heap
//! node per object, no pointer chasing on lookups). A profile of the first exact LRU on the
//! `lru` crate showed its time in cache misses and the allocator; this layout removed both.
//!
//! Orientation, as libCacheSim's queues: the **head** is the newest end (where objects are
//! pushed), the **tail** the oldest (where eviction looks first).

use secondhit_admission::hash::BuildFold;
use std::collections::HashMap;

/// "No slot": the end of a queue.
pub(crate) const NIL: u32 = u32::MAX;

/// The key index every policy keeps: key -> slot.
pub(crate) type Index = HashMap<u128, u32, BuildFold>;

/// A new, empty [`Index`].
pub(crate) fn index() -> Index {
    HashMap::with_hasher(BuildFold::default())
}

/// One object: key, size, its neighbours, and the policy's own per-object state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Node<T> {
    pub(crate) key: u128,
    pub(crate) size: u64,
    /// Towards the head (newer).
    prev: u32,
    /// Towards the tail (older).
    next: u32,
    pub(crate) meta: T,
}

/// A queue's ends and totals. Several queues can share one arena.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Queue {
    head: u32,
    tail: u32,
    /// Sum of the sizes of its objects.
    pub(crate) bytes: u64,
    /// Objects in it.
    pub(crate) len: u64,
}

impl Default for Queue {
    fn default() -> Self {
        Queue {
            head: NIL,
            tail: NIL,
            bytes: 0,
            len: 0,
        }
    }
}

impl Queue {
    /// The oldest object's slot, if any.
    pub(crate) fn tail(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }

    /// Whether it holds nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.head == NIL
    }
}

/// The objects a store evicted, kept once asked ([`SimStore::keep_evicted`]
/// (super::SimStore::keep_evicted)): what a memory tier hands down to flash.
#[derive(Debug, Default)]
pub(crate) struct EvictionLog(Option<Vec<(u128, u64)>>);

impl EvictionLog {
    /// Keeps evictions from now on.
    pub(crate) fn keep(&mut self) {
        self.0.get_or_insert_with(Vec::new);
    }

    /// Moves what was kept into `out`.
    pub(crate) fn take(&mut self, out: &mut Vec<(u128, u64)>) {
        if let Some(log) = self.0.as_mut() {
            out.append(log);
        }
    }
}

/// Slots of objects; freed slots are reused before the arena grows.
#[derive(Debug)]
pub(crate) struct Arena<T> {
    nodes: Vec<Node<T>>,
    free: Vec<u32>,
}

impl<T: Copy> Default for Arena<T> {
    fn default() -> Self {
        Arena {
            nodes: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T: Copy> Arena<T> {
    /// A slot for a new object, on no queue yet.
    pub(crate) fn alloc(&mut self, key: u128, size: u64, meta: T) -> u32 {
        let node = Node {
            key,
            size,
            prev: NIL,
            next: NIL,
            meta,
        };
        match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                // Slots are u32 indices: 4 billion objects at once is past any trace here (and
                // past this machine's memory at 40 bytes a slot), so running out is a bug.
                let i = u32::try_from(self.nodes.len())
                    .ok()
                    .filter(|&i| i != NIL)
                    .expect("more than 4 billion objects in one simulated store");
                self.nodes.push(node);
                i
            }
        }
    }

    /// A slot for a new object at `q`'s head, indexed under its key.
    pub(crate) fn insert_head(
        &mut self,
        index: &mut Index,
        q: &mut Queue,
        key: u128,
        size: u64,
        meta: T,
    ) -> u32 {
        let i = self.alloc(key, size, meta);
        self.push_head(q, i);
        index.insert(key, i);
        i
    }

    /// Unindexes slot `i` (on no queue) and gives it back.
    pub(crate) fn forget(&mut self, index: &mut Index, i: u32) {
        index.remove(&self.nodes[i as usize].key);
        self.free.push(i);
    }

    /// Gives slot `i` back (it must be on no queue).
    pub(crate) fn release(&mut self, i: u32) {
        self.free.push(i);
    }

    /// Slots ever used (for tests: freed slots are reused).
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.nodes.len()
    }

    #[inline]
    pub(crate) fn node(&self, i: u32) -> &Node<T> {
        &self.nodes[i as usize]
    }

    #[inline]
    pub(crate) fn node_mut(&mut self, i: u32) -> &mut Node<T> {
        &mut self.nodes[i as usize]
    }

    /// The neighbour of `i` towards the head (newer), if any.
    #[inline]
    pub(crate) fn newer(&self, i: u32) -> Option<u32> {
        let p = self.nodes[i as usize].prev;
        (p != NIL).then_some(p)
    }

    /// Puts `i` (on no queue) at `q`'s head.
    pub(crate) fn push_head(&mut self, q: &mut Queue, i: u32) {
        let old = q.head;
        let node = &mut self.nodes[i as usize];
        node.prev = NIL;
        node.next = old;
        q.bytes += node.size;
        q.len += 1;
        match old {
            NIL => q.tail = i,
            h => self.nodes[h as usize].prev = i,
        }
        q.head = i;
    }

    /// Takes `i` off `q` (the slot stays allocated).
    pub(crate) fn unlink(&mut self, q: &mut Queue, i: u32) {
        let Node {
            prev, next, size, ..
        } = self.nodes[i as usize];
        match prev {
            NIL => q.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => q.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
        q.bytes -= size;
        q.len -= 1;
    }

    /// Moves `i`, on `q`, to `q`'s head.
    #[inline]
    pub(crate) fn move_to_head(&mut self, q: &mut Queue, i: u32) {
        if q.head != i {
            self.unlink(q, i);
            self.push_head(q, i);
        }
    }

    /// Evicts the oldest object of `q` from the store (its slot and its `index` entry), noting it
    /// in `log`; false if `q` is empty. The whole of LRU's and FIFO's eviction.
    pub(crate) fn evict_tail(
        &mut self,
        q: &mut Queue,
        index: &mut Index,
        log: &mut EvictionLog,
    ) -> bool {
        let Some(victim) = self.pop_tail(q) else {
            return false;
        };
        if let Some(log) = log.0.as_mut() {
            let n = self.node(victim);
            log.push((n.key, n.size));
        }
        self.forget(index, victim);
        true
    }

    /// Takes `q`'s oldest object off it and returns its slot.
    pub(crate) fn pop_tail(&mut self, q: &mut Queue) -> Option<u32> {
        let i = q.tail()?;
        self.unlink(q, i);
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(a: &Arena<()>, q: &Queue) -> Vec<u128> {
        let mut out = Vec::new();
        let mut at = q.tail();
        while let Some(i) = at {
            out.push(a.node(i).key);
            at = a.newer(i);
        }
        out
    }

    #[test]
    fn queues_share_one_arena_and_keep_their_totals() {
        let mut a = Arena::<()>::default();
        let (mut q1, mut q2) = (Queue::default(), Queue::default());
        let s: Vec<u32> = (0..4).map(|k| a.alloc(k, 10 + k as u64, ())).collect();
        a.push_head(&mut q1, s[0]);
        a.push_head(&mut q1, s[1]);
        a.push_head(&mut q1, s[2]);
        a.push_head(&mut q2, s[3]);
        assert_eq!(order(&a, &q1), vec![0, 1, 2]);
        assert_eq!((q1.bytes, q1.len, q2.bytes), (33, 3, 13));
        a.move_to_head(&mut q1, s[0]);
        assert_eq!(order(&a, &q1), vec![1, 2, 0]);
        let t = a.pop_tail(&mut q1).unwrap();
        assert_eq!(a.node(t).key, 1);
        a.push_head(&mut q2, t);
        assert_eq!(order(&a, &q2), vec![3, 1]);
        assert_eq!((q1.bytes, q1.len, q2.bytes, q2.len), (22, 2, 24, 2));
        a.unlink(&mut q1, s[2]);
        a.unlink(&mut q1, s[0]);
        assert!(q1.is_empty() && q1.tail().is_none());
        a.release(s[2]);
        assert_eq!(a.alloc(9, 1, ()), s[2], "a freed slot is reused");
        assert_eq!(a.slots(), 4);
    }
}
