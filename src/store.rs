//! The cache store: moka (the proxy's store, and on request the simulator's) and an exact
//! byte-capacity LRU for fast, libCacheSim-comparable sweeps.
//!
//! [`moka_builder`] configures moka the same way for `serve` and `simulate`: byte capacity and
//! eviction policy. [`SimStore`] is what the simulator drives: [`ExactLru`] (the default) or
//! [`MokaStore`], which brings moka's batched maintenance to a fixed point so that its LRU is
//! exact and its results do not depend on timing.

use crate::hash::{BuildFold, KeyHash};
use lru::LruCache;
use moka::policy::EvictionPolicy;
use moka::sync::{Cache, CacheBuilder};
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

/// An exact LRU with byte capacity on the `lru` crate: evicts least recently used objects until
/// the new one fits. A hit does not change an object's stored size.
pub struct ExactLru {
    map: LruCache<u128, u64, BuildFold>,
    capacity: u64,
    used: u64,
}

impl ExactLru {
    /// An empty store of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        ExactLru {
            map: LruCache::unbounded_with_hasher(BuildFold::default()),
            capacity,
            used: 0,
        }
    }
}

impl SimStore for ExactLru {
    #[inline]
    fn get(&mut self, key: KeyHash) -> bool {
        self.map.get(&key.raw()).is_some()
    }

    fn put(&mut self, key: KeyHash, size: u64) -> bool {
        if size > self.capacity {
            return false;
        }
        if let Some(old) = self.map.pop(&key.raw()) {
            self.used -= old;
        }
        while self.used + size > self.capacity {
            match self.map.pop_lru() {
                Some((_, s)) => self.used -= s,
                None => break,
            }
        }
        self.map.push(key.raw(), size);
        self.used += size;
        true
    }

    fn used_bytes(&self) -> u64 {
        self.used
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
