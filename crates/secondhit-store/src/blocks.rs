//! Block FIFO: a log-structured flash cache as `serve`'s flash tier (foyer's block engine)
//! lays it out. Objects are appended to the current block, each taking its encoded size rounded
//! up to a 4 KiB page; a full block is sealed and the next one begun; when only the reserve of
//! clean blocks is left, the oldest sealed block is evicted whole, with every object in it. An
//! object is never moved or promoted: a hit leaves it where it is.
//!
//! Where it differs from an object FIFO of the same bytes: the page rounding (a 5 KiB object
//! takes 8 KiB), the clean block kept free, and the whole block that leaves at once (objects
//! younger than the next victim would leave with it). What it leaves out: foyer's picker that
//! prefers a block whose entries were mostly replaced (this tier rarely replaces one), the
//! 4 KiB index each blob of up to about 170 entries carries, and the writes foyer drops when its
//! queue is full under load.

use super::{Access, SimStore};
use std::collections::{HashMap, VecDeque};

/// The page every entry is rounded up to.
pub const PAGE: u64 = 4096;

/// Blocks kept clean for the next writes (foyer's `clean_block_threshold`, 1 by default).
pub const CLEAN_BLOCKS: u64 = 1;

/// Block FIFO of `capacity` bytes in blocks of `block_size`.
///
/// # Example
/// ```
/// use secondhit_store::{Access, BlockFifo, SimStore};
///
/// // Three blocks of 8 KiB, one kept clean: two in use. Each 5,000-byte object takes 8 KiB.
/// let mut s = BlockFifo::new(3 * 8192, 8192, 0);
/// for id in 0..3 {
///     assert!(s.put(&Access::new(id, 5_000, id)));
/// }
/// // The third object began a third block: the first one left, with object 0.
/// assert!(!s.get(&Access::new(0, 5_000, 3)));
/// assert!(s.get(&Access::new(1, 5_000, 4)));
/// assert_eq!(s.used_bytes(), 2 * 8192);
/// ```
pub struct BlockFifo {
    block_size: u64,
    /// Blocks that may hold objects (sealed and current).
    blocks: u64,
    /// Bytes each entry carries beside its object's size (headers, key, encoding).
    entry_overhead: u64,
    /// The largest object written.
    max_object: u64,
    /// Sealed blocks, oldest first: their sequence numbers and the objects written into them.
    sealed: VecDeque<(u64, Vec<(u128, u64)>)>,
    /// The block being filled: its sequence number, objects and bytes used.
    current: (u64, Vec<(u128, u64)>, u64),
    /// Where each object is: its block's sequence number.
    index: HashMap<u128, u64>,
    /// Evictions, when asked to keep them.
    keep: bool,
    evicted: Vec<(u128, u64)>,
    /// Blocks evicted.
    evicted_blocks: u64,
}

impl BlockFifo {
    /// An empty tier of `capacity` bytes in blocks of `block_size` (rounded up to a page),
    /// each entry `entry_overhead` bytes larger than its object before rounding.
    pub fn new(capacity: u64, block_size: u64, entry_overhead: u64) -> BlockFifo {
        let block_size = block_size.div_ceil(PAGE).max(1) * PAGE;
        BlockFifo {
            block_size,
            blocks: (capacity / block_size).saturating_sub(CLEAN_BLOCKS).max(1),
            entry_overhead,
            max_object: u64::MAX,
            sealed: VecDeque::new(),
            current: (0, Vec::new(), 0),
            index: HashMap::new(),
            keep: false,
            evicted: Vec::new(),
            evicted_blocks: 0,
        }
    }

    /// Objects larger than `max` bytes are not written (`serve` refuses those over half a
    /// block less 64 KiB). Default: whatever fits in a block.
    pub fn with_max_object(mut self, max: u64) -> BlockFifo {
        self.max_object = max;
        self
    }

    /// The bytes an object of `size` takes in a block.
    pub fn slot(&self, size: u64) -> u64 {
        size.saturating_add(self.entry_overhead).div_ceil(PAGE) * PAGE
    }

    /// Blocks evicted so far.
    pub fn evicted_blocks(&self) -> u64 {
        self.evicted_blocks
    }

    /// Evicts the oldest sealed block; false if there is none.
    fn evict_block(&mut self) -> bool {
        let Some((seq, objects)) = self.sealed.pop_front() else {
            return false;
        };
        for (key, size) in objects {
            // A key written again since lives in a later block.
            if self.index.get(&key) == Some(&seq) {
                self.index.remove(&key);
                if self.keep {
                    self.evicted.push((key, size));
                }
            }
        }
        self.evicted_blocks += 1;
        true
    }
}

impl SimStore for BlockFifo {
    fn get(&mut self, req: &Access) -> bool {
        self.index.contains_key(&req.key.raw())
    }

    fn put(&mut self, req: &Access) -> bool {
        let slot = self.slot(req.size);
        if slot > self.block_size || req.size > self.max_object {
            return false;
        }
        if self.current.2 + slot > self.block_size {
            let seq = self.current.0 + 1;
            let full = std::mem::replace(&mut self.current, (seq, Vec::new(), 0));
            self.sealed.push_back((full.0, full.1));
            while self.sealed.len() as u64 + 1 > self.blocks {
                if !self.evict_block() {
                    break;
                }
            }
        }
        let key = req.key.raw();
        self.current.1.push((key, req.size));
        self.current.2 += slot;
        self.index.insert(key, self.current.0);
        true
    }

    fn used_bytes(&self) -> u64 {
        self.sealed.len() as u64 * self.block_size + self.current.2
    }

    fn keep_evicted(&mut self) -> bool {
        self.keep = true;
        true
    }

    fn take_evicted(&mut self, out: &mut Vec<(u128, u64)>) {
        out.append(&mut self.evicted);
    }

    fn remove(&mut self, key: u128) -> bool {
        // The entry stays in its block (foyer marks it invalid); it is no longer found.
        self.index.remove(&key);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_blocks_leave_oldest_first_with_every_object_in_them() {
        // Four blocks of 16 KiB, one clean: three in use. Objects of 3,000 bytes plus 96 take
        // one page each, four to a block.
        let mut s = BlockFifo::new(4 * 16_384, 16_384, 96);
        assert!(s.keep_evicted());
        assert_eq!(s.slot(3_000), 4096);
        for id in 0..12 {
            assert!(s.put(&Access::new(id, 3_000, id)));
        }
        assert_eq!((s.sealed.len(), s.evicted_blocks()), (2, 0));
        // The thirteenth begins a fourth block: the first leaves with objects 0 to 3.
        assert!(s.put(&Access::new(12, 3_000, 12)));
        assert_eq!(s.evicted_blocks(), 1);
        let mut out = Vec::new();
        s.take_evicted(&mut out);
        let gone: Vec<u128> = out.iter().map(|&(k, _)| k).collect();
        let want: Vec<u128> = (0..4).map(|id| Access::new(id, 1, 0).key.raw()).collect();
        assert_eq!(gone, want);
        for id in 0..13 {
            assert_eq!(s.get(&Access::new(id, 3_000, 20)), id >= 4, "object {id}");
        }
        // An object written again lives in its new block: the old one's eviction leaves it.
        assert!(s.put(&Access::new(5, 3_000, 30)));
        for id in 13..20 {
            assert!(s.put(&Access::new(id, 3_000, id + 30)));
        }
        assert!(s.get(&Access::new(5, 3_000, 60)));
        assert!(!s.get(&Access::new(6, 3_000, 60)));
        // Larger than a block: refused.
        assert!(!s.put(&Access::new(99, 16_384, 70)));
    }
}
