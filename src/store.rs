//! The cache store: moka (the proxy's store, and on request the simulator's) and an exact
//! byte-capacity LRU for fast, libCacheSim-comparable sweeps.
//!
//! [`moka_builder`] configures moka the same way for `serve` and `simulate`: byte capacity and
//! eviction policy. [`SimStore`] is what the simulator drives: [`ExactLru`] (the default) or
//! [`MokaStore`], which brings moka's batched maintenance to a fixed point so that its LRU is
//! exact and its results do not depend on timing.

use crate::hash::{BuildFold, KeyHash};
use moka::policy::EvictionPolicy;
use moka::sync::{Cache, CacheBuilder};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// moka's eviction policy, as on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Eviction {
    /// Least recently used.
    Lru,
    /// moka's default: LRU eviction with a TinyLFU frequency filter at the door. That filter is
    /// itself an admission policy: stacked on `second-hit` it can refuse what the Bloom filter
    /// admitted (counted as store rejections).
    TinyLfu,
}

impl Eviction {
    /// `"lru"` or `"tinylfu"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Eviction::Lru => "lru",
            Eviction::TinyLfu => "tinylfu",
        }
    }
}

impl fmt::Display for Eviction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Eviction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "lru" => Ok(Eviction::Lru),
            "tinylfu" | "tiny-lfu" => Ok(Eviction::TinyLfu),
            other => Err(format!(
                "unknown eviction {other:?}: expected lru or tinylfu"
            )),
        }
    }
}

/// Which store the simulator uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoreKind {
    /// [`ExactLru`]: fast, exact, LRU only.
    Exact,
    /// [`MokaStore`]: the proxy's store, LRU or TinyLFU.
    Moka,
}

impl StoreKind {
    /// `"exact"` or `"moka"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            StoreKind::Exact => "exact",
            StoreKind::Moka => "moka",
        }
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StoreKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "exact" => Ok(StoreKind::Exact),
            "moka" => Ok(StoreKind::Moka),
            other => Err(format!("unknown store {other:?}: expected exact or moka")),
        }
    }
}

/// A moka builder with a byte capacity and an eviction policy: the one place both the proxy
/// and the simulator configure moka. Callers add a weigher that returns bytes.
pub fn moka_builder<K, V>(
    capacity_bytes: u64,
    eviction: Eviction,
) -> CacheBuilder<K, V, Cache<K, V>>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    Cache::builder()
        .max_capacity(capacity_bytes)
        .eviction_policy(match eviction {
            Eviction::Lru => EvictionPolicy::lru(),
            Eviction::TinyLfu => EvictionPolicy::tiny_lfu(),
        })
}

/// What the simulator needs of a store. Sizes are bytes; an object larger than the capacity is
/// never stored.
pub trait SimStore: Send {
    /// Looks the key up; a hit counts as a use (for LRU, it becomes most recent).
    fn get(&mut self, key: KeyHash) -> bool;
    /// Stores a missed object, evicting as needed. Returns whether it is in the store afterwards
    /// (TinyLFU may refuse it).
    fn put(&mut self, key: KeyHash, size: u64) -> bool;
    /// Bytes stored.
    fn used_bytes(&self) -> u64;
}

/// An exact LRU with byte capacity: evicts least recently used objects until the new one fits.
/// A hit does not change an object's stored size.
///
/// The recency list lives in one arena of slots linked by index, and the index maps a key to its
/// slot with the key stored inline. `perf` on a 30 M-request trace showed the `lru` crate's
/// layout (a heap node per object, the map comparing keys through the node's pointer) spending
/// its time in cache misses on every lookup and eviction, and in the allocator.
pub struct ExactLru {
    index: HashMap<u128, u32, BuildFold>,
    nodes: Vec<Node>,
    /// Slots of evicted objects, reused before the arena grows.
    free: Vec<u32>,
    /// Most recently used, or [`NIL`].
    head: u32,
    /// Least recently used, or [`NIL`].
    tail: u32,
    capacity: u64,
    used: u64,
}

const NIL: u32 = u32::MAX;

/// One stored object: its key (to unindex it on eviction), size and neighbours.
#[derive(Clone, Copy)]
struct Node {
    key: u128,
    size: u64,
    /// Towards the most recently used.
    prev: u32,
    /// Towards the least recently used.
    next: u32,
}

impl ExactLru {
    /// An empty store of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        ExactLru {
            index: HashMap::with_hasher(BuildFold::default()),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            capacity,
            used: 0,
        }
    }

    fn unlink(&mut self, i: u32) {
        let Node { prev, next, .. } = self.nodes[i as usize];
        match prev {
            NIL => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        let old = self.head;
        let node = &mut self.nodes[i as usize];
        node.prev = NIL;
        node.next = old;
        match old {
            NIL => self.tail = i,
            h => self.nodes[h as usize].prev = i,
        }
        self.head = i;
    }

    /// Removes slot `i`'s object (its slot is reused later).
    fn remove(&mut self, i: u32) {
        self.unlink(i);
        let node = self.nodes[i as usize];
        self.index.remove(&node.key);
        self.used -= node.size;
        self.free.push(i);
    }

    /// Objects stored.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

impl SimStore for ExactLru {
    #[inline]
    fn get(&mut self, key: KeyHash) -> bool {
        match self.index.get(&key.raw()) {
            Some(&i) => {
                if self.head != i {
                    self.unlink(i);
                    self.push_front(i);
                }
                true
            }
            None => false,
        }
    }

    fn put(&mut self, key: KeyHash, size: u64) -> bool {
        if size > self.capacity {
            return false;
        }
        let key = key.raw();
        if let Some(&i) = self.index.get(&key) {
            self.remove(i);
        }
        while self.used + size > self.capacity && self.tail != NIL {
            self.remove(self.tail);
        }
        let node = Node {
            key,
            size,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                // Slots are u32 indices: a store of 4 billion objects is past any trace here.
                let i = u32::try_from(self.nodes.len()).unwrap_or(NIL - 1);
                self.nodes.push(node);
                i
            }
        };
        self.push_front(i);
        self.index.insert(key, i);
        self.used += size;
        true
    }

    fn used_bytes(&self) -> u64 {
        self.used
    }
}

#[cfg(test)]
mod lru_tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_by_bytes_and_reuses_slots() {
        let k = KeyHash::of_u64;
        let mut s = ExactLru::new(10);
        assert!(s.put(k(1), 4) && s.put(k(2), 4));
        assert!(s.get(k(1))); // 1 is now the most recent
        assert!(s.put(k(3), 4)); // 12 > 10: evicts 2, the least recent
        assert!(!s.get(k(2)) && s.get(k(1)) && s.get(k(3)));
        assert_eq!((s.len(), s.used_bytes()), (2, 8));
        // Too large for the whole store: refused, nothing evicted.
        assert!(!s.put(k(4), 11));
        assert_eq!(s.len(), 2);
        // Exactly the capacity: everything else goes.
        assert!(s.put(k(5), 10));
        assert_eq!((s.len(), s.used_bytes()), (1, 10));
        assert!(s.get(k(5)) && !s.get(k(1)) && !s.get(k(3)));
        // A key stored again replaces its old size.
        assert!(s.put(k(5), 3) && s.put(k(6), 7));
        assert_eq!((s.len(), s.used_bytes()), (2, 10));
        // Slots were reused: never more than the most objects held at once, plus one.
        assert!(s.nodes.len() <= 3, "{} slots", s.nodes.len());
        // Order from most to least recent: 6, 5.
        assert!(s.put(k(7), 3)); // evicts 5
        assert!(!s.get(k(5)) && s.get(k(6)) && s.get(k(7)));
        assert!(!s.is_empty());
    }
}

/// A moka cache and, in lab mode, the maintenance that makes it exact: run to a fixed point after
/// every write and every [`Maintained::READS_PER_MAINTENANCE`] reads, as the simulator's
/// [`MokaStore`] and the proxy's `cache.lab_mode` both need. Without lab mode it is moka as it is.
pub struct Maintained<K, V, S = std::collections::hash_map::RandomState> {
    cache: Cache<K, V, S>,
    /// Reads since the last maintenance run, or `None` when not in lab mode.
    reads: Option<AtomicU32>,
}

impl<K, V, S> Maintained<K, V, S>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    S: std::hash::BuildHasher + Clone + Send + Sync + 'static,
{
    /// Reads buffered before maintenance runs. moka's read log holds more, so none is dropped.
    pub const READS_PER_MAINTENANCE: u32 = 32;

    /// Wraps `cache`; `lab`: run maintenance to a fixed point as described above.
    pub fn new(cache: Cache<K, V, S>, lab: bool) -> Self {
        Maintained {
            cache,
            reads: lab.then(|| AtomicU32::new(0)),
        }
    }

    /// Looks a key up (a read).
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        let found = self.cache.get(key);
        if let Some(reads) = &self.reads {
            if reads.fetch_add(1, Relaxed) + 1 >= Self::READS_PER_MAINTENANCE {
                self.cache.run_pending_tasks();
                reads.store(0, Relaxed);
            }
        }
        found
    }

    /// Inserts or replaces (a write).
    pub fn insert(&self, key: K, value: V) {
        self.cache.insert(key, value);
        if let Some(reads) = &self.reads {
            self.cache.run_pending_tasks();
            reads.store(0, Relaxed);
        }
    }

    /// The cache itself, for what needs no maintenance bookkeeping (invalidation, sizes).
    pub fn cache(&self) -> &Cache<K, V, S> {
        &self.cache
    }
}

/// moka configured by [`moka_builder`], with a fixed hasher and lab-mode maintenance
/// ([`Maintained`]), so that every run gives the same numbers and its LRU is exact. 0.5 to 1.3
/// million requests a second (README, `scripts/bench-simulate.sh`): the price of exact
/// maintenance.
pub struct MokaStore {
    store: Maintained<u128, u64, BuildFold>,
    capacity: u64,
}

impl MokaStore {
    /// An empty store of `capacity` bytes with `eviction`.
    pub fn new(capacity: u64, eviction: Eviction) -> Self {
        let cache = moka_builder::<u128, u64>(capacity, eviction)
            .weigher(|_, size: &u64| u32::try_from(*size).unwrap_or(u32::MAX))
            .build_with_hasher(BuildFold::default());
        MokaStore {
            store: Maintained::new(cache, true),
            capacity,
        }
    }
}

impl SimStore for MokaStore {
    fn get(&mut self, key: KeyHash) -> bool {
        self.store.get(&key.raw()).is_some()
    }

    fn put(&mut self, key: KeyHash, size: u64) -> bool {
        if size > self.capacity || size > u64::from(u32::MAX) {
            return false;
        }
        self.store.insert(key.raw(), size);
        self.store.cache().contains_key(&key.raw())
    }

    fn used_bytes(&self) -> u64 {
        self.store.cache().weighted_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u64) -> KeyHash {
        KeyHash::of_u64(i)
    }

    fn exercise(store: &mut dyn SimStore) {
        assert!(store.put(k(1), 40));
        assert!(store.put(k(2), 40));
        assert!(store.get(k(1))); // 1 is now most recent
        assert!(store.put(k(3), 40)); // evicts 2, the least recent
        assert!(!store.get(k(2)));
        assert!(store.get(k(1)) && store.get(k(3)));
        assert_eq!(store.used_bytes(), 80);
        assert!(!store.put(k(4), 101)); // larger than the whole store
        assert!(store.get(k(1)) && store.get(k(3)));
        assert!(store.put(k(5), 100)); // evicts everything else
        assert!(!store.get(k(1)) && !store.get(k(3)) && store.get(k(5)));
        assert_eq!(store.used_bytes(), 100);
    }

    #[test]
    fn exact_lru_evicts_least_recent_by_bytes() {
        exercise(&mut ExactLru::new(100));
    }

    #[test]
    fn moka_lru_store_behaves_the_same() {
        exercise(&mut MokaStore::new(100, Eviction::Lru));
    }

    #[test]
    fn names_parse() {
        assert_eq!("tinylfu".parse::<Eviction>(), Ok(Eviction::TinyLfu));
        assert!("lfu".parse::<Eviction>().unwrap_err().contains("\"lfu\""));
        assert_eq!("moka".parse::<StoreKind>(), Ok(StoreKind::Moka));
        assert!("lru"
            .parse::<StoreKind>()
            .unwrap_err()
            .contains("exact or moka"));
    }
}
