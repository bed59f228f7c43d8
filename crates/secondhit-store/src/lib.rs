//! # secondhit-store
//!
//! The cache stores `serve` and `simulate` share: moka (the proxy's store, and on request the
//! simulator's) and the exact stores of every eviction policy, for fast sweeps that equal
//! libCacheSim's. It sits below both the proxy and the lab because `serve`'s shadow policies
//! step the same [`Lane`] the simulator does.
//!
//! ## Modules
//!
//! - this file: [`Eviction`], [`StoreKind`], [`Access`], the [`SimStore`] trait, [`exact`],
//!   [`moka_builder`] and [`MokaStore`];
//! - one file per exact eviction (`lru.rs`, `fifo.rs`, `clock.rs`, `sieve.rs`, `s3fifo.rs`,
//!   `arc.rs`, `wtinylfu.rs`, `lfu.rs`, `belady.rs`), all on the slots of `arena.rs`;
//! - `lane.rs`: [`Lane`], an admission policy in front of a store, and its [`Counts`];
//! - `budget.rs`: [`WriteBudget`], a flash tier's token bucket of bytes;
//! - `blocks.rs`: [`BlockFifo`], a flash tier evicting whole blocks, as `serve`'s does;
//! - [`oracle`]: libCacheSim's oracleGeneral record, which `serve --record` can write and
//!   `simulate` reads;
//! - [`recording`]: secondhit's own recording, which `serve --record` writes by default: the
//!   weight charged, whether storable, how long fresh.
//!
//! [`moka_builder`] configures moka the same way for `serve` and `simulate`: byte capacity and
//! eviction policy. [`SimStore`] is what the simulator drives, one [`Access`] per request:
//! [`exact`] builds the exact store of an [`Eviction`] (one file each: [`ExactLru`], [`Fifo`],
//! [`Clock`], [`Sieve`], [`S3Fifo`], [`AdaptiveReplacement`], [`WTinyLfu`], [`Lfu`],
//! [`Belady`], [`BeladySize`], all on the one arena of `arena.rs`), or [`MokaStore`] brings
//! moka's batched maintenance to a fixed point so that its LRU is exact and its results do not
//! depend on timing.
//!
//! # Example
//! ```
//! use secondhit_store::{self as store, Access, Eviction};
//!
//! let mut cache = store::exact(Eviction::S3Fifo, 1_000).expect("the exact store has s3fifo");
//! let req = Access::new(42, 50, 0); // object 42, 50 bytes, the trace's first request
//! assert!(!cache.get(&req)); // a miss...
//! assert!(cache.put(&req)); // ...stored
//! assert!(cache.get(&Access::new(42, 50, 1)));
//! assert!(store::exact(Eviction::TinyLfu, 1_000).is_none()); // moka's only
//! ```

#![warn(missing_docs)]

mod arc;
mod arena;
mod belady;
mod blocks;
mod budget;
mod clock;
mod fifo;
mod lane;
mod lfu;
mod lru;
pub mod oracle;
pub mod recording;
mod s3fifo;
mod sieve;
mod wtinylfu;

pub use arc::AdaptiveReplacement;
pub use belady::{Belady, BeladySize};
pub use clock::Clock;
pub use fifo::Fifo;
pub use lfu::Lfu;
pub use lru::ExactLru;
pub use s3fifo::S3Fifo;
pub use sieve::Sieve;
pub use wtinylfu::WTinyLfu;

pub use blocks::BlockFifo;
pub use budget::WriteBudget;
pub use lane::{Counts, Lane, LaneError, Recorded, Step};

/// "Not requested again": an [`Access::next`] that never comes (a trace's next-access time
/// when the object is not requested again).
pub const NEVER: u64 = u64::MAX;

use moka::policy::EvictionPolicy;
use moka::sync::{Cache, CacheBuilder};
use secondhit_admission::hash::{BuildFold, KeyHash};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// An eviction policy, as on the command line. `lru` and `tinylfu` are moka's (the proxy's
/// store, and the simulator's `--store moka`); the others exist in the simulator's exact store
/// only, each exact against libCacheSim 0.3.5 with its defaults (see this crate's files).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Eviction {
    /// Least recently used.
    Lru,
    /// moka's default: LRU eviction with a TinyLFU frequency filter at the door. That filter is
    /// itself an admission policy: stacked on `second-hit` it can refuse what the Bloom filter
    /// admitted (counted as store rejections).
    TinyLfu,
    /// First in, first out: a hit changes nothing.
    Fifo,
    /// CLOCK (second chance) with a 1-bit reference counter.
    Clock,
    /// SIEVE: a FIFO queue with a visited bit and a hand that moves from the tail.
    Sieve,
    /// S3-FIFO: a small FIFO (10 %), a main FIFO and a ghost FIFO of evicted keys.
    S3Fifo,
    /// ARC: adaptive replacement between a recency and a frequency list, with ghost lists.
    Arc,
    /// Caffeine's W-TinyLFU: a 1 % LRU window in front of a segmented LRU, with a count-min
    /// sketch deciding between the window's and the main cache's victims.
    WTinyLfu,
    /// Least frequently used (ties: the least recently used of the least frequent).
    Lfu,
    /// Belady's MIN: evicts the object whose next request is farthest (offline optimal for
    /// objects of one size).
    Belady,
    /// Belady by next-access distance times size (an offline bound for sized objects).
    BeladySize,
}

impl Eviction {
    /// Every eviction policy, in the order `--eviction all` runs them.
    pub const ALL: [Eviction; 11] = [
        Eviction::Lru,
        Eviction::TinyLfu,
        Eviction::Fifo,
        Eviction::Clock,
        Eviction::Sieve,
        Eviction::S3Fifo,
        Eviction::Arc,
        Eviction::WTinyLfu,
        Eviction::Lfu,
        Eviction::Belady,
        Eviction::BeladySize,
    ];

    /// The name on the command line, in reports and in metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Eviction::Lru => "lru",
            Eviction::TinyLfu => "tinylfu",
            Eviction::Fifo => "fifo",
            Eviction::Clock => "clock",
            Eviction::Sieve => "sieve",
            Eviction::S3Fifo => "s3fifo",
            Eviction::Arc => "arc",
            Eviction::WTinyLfu => "wtinylfu",
            Eviction::Lfu => "lfu",
            Eviction::Belady => "belady",
            Eviction::BeladySize => "belady-size",
        }
    }

    /// Whether moka has it (the proxy's store can use it).
    pub const fn is_moka(self) -> bool {
        matches!(self, Eviction::Lru | Eviction::TinyLfu)
    }

    /// Whether the exact store has it (every policy but moka's `tinylfu`).
    pub const fn is_exact(self) -> bool {
        !matches!(self, Eviction::TinyLfu)
    }

    /// Whether it reads the future (each request's next access), so that the simulator must
    /// compute next-access times first.
    pub const fn needs_future(self) -> bool {
        matches!(self, Eviction::Belady | Eviction::BeladySize)
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
        let s = s.trim();
        let alias = match s {
            "tiny-lfu" => Some(Eviction::TinyLfu),
            "s3-fifo" => Some(Eviction::S3Fifo),
            "w-tinylfu" => Some(Eviction::WTinyLfu),
            _ => None,
        };
        alias
            .or_else(|| Eviction::ALL.into_iter().find(|e| e.as_str() == s))
            .ok_or_else(|| {
                let names: Vec<&str> = Eviction::ALL.iter().map(|e| e.as_str()).collect();
                format!(
                    "unknown eviction {s:?}: expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl serde::Serialize for Eviction {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Eviction {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
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
            Eviction::TinyLfu => EvictionPolicy::tiny_lfu(),
            // The others are refused before a moka store is built (the config's and the
            // simulator's validation); LRU is moka's other policy.
            _ => EvictionPolicy::lru(),
        })
}

/// One request as a simulated store sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The object.
    pub key: KeyHash,
    /// Its integer id (a trace request's id): what W-TinyLFU's sketch
    /// hashes.
    pub id: u64,
    /// Its size in this request, in bytes.
    pub size: u64,
    /// This request's index in the trace, from 0 (virtual time).
    pub vtime: u64,
    /// The index of the next request for the same key, or
    /// [`NEVER`]; computed (or read from the trace) only when
    /// some eviction of the sweep [needs the future](Eviction::needs_future), `NEVER` otherwise.
    pub next: u64,
}

impl Access {
    /// A request for object `id` (keyed as [`KeyHash::of_u64`]) with no known future.
    pub fn new(id: u64, size: u64, vtime: u64) -> Access {
        Access {
            key: KeyHash::of_u64(id),
            id,
            size,
            vtime,
            next: NEVER,
        }
    }
}

/// What the simulator needs of a store. Sizes are bytes; an object larger than the capacity is
/// never stored. Every request is a [`get`](SimStore::get); a miss the admission policy admits
/// is then a [`put`](SimStore::put) of the same request (libCacheSim's order: lookup, admission,
/// insertion).
pub trait SimStore: Send {
    /// Looks the object up; a hit counts as a use (for LRU, it becomes most recent). A hit does
    /// not change the stored size.
    fn get(&mut self, req: &Access) -> bool;
    /// Stores a missed object, evicting as needed. Returns whether it is in the store afterwards
    /// (moka's TinyLFU, or a policy's own rule, may refuse it). Called only right after a
    /// [`get`](SimStore::get) of the same request missed: policies rely on it (the key is not
    /// stored; S3-FIFO's and ARC's ghost lookups happened).
    fn put(&mut self, req: &Access) -> bool;
    /// Bytes stored.
    fn used_bytes(&self) -> u64;
    /// Keeps every object this store evicts from now on, for [`take_evicted`]
    /// (SimStore::take_evicted): a tier above another hands its evictions down. Whether this
    /// store can (default: it cannot).
    ///
    /// [`take_evicted`]: SimStore::take_evicted
    fn keep_evicted(&mut self) -> bool {
        false
    }
    /// Moves the objects evicted since the last call into `out`, as (key, size), in the order
    /// they left.
    fn take_evicted(&mut self, _out: &mut Vec<(u128, u64)>) {}
    /// Drops `key` (an object that expired in the live cache being modelled): whether this
    /// store can (default: it cannot, and the object stays until evicted).
    fn remove(&mut self, _key: u128) -> bool {
        false
    }
}

/// libCacheSim's insertion rule, shared by the single-queue policies: an object larger than the
/// cache is refused with nothing evicted; otherwise `evict` runs until `used + size` fits (or it
/// can evict nothing more). Returns whether to insert.
pub(crate) fn make_room<S>(
    store: &mut S,
    size: u64,
    capacity: u64,
    used: fn(&S) -> u64,
    evict: fn(&mut S) -> bool,
) -> bool {
    if size > capacity {
        return false;
    }
    while used(store) + size > capacity {
        if !evict(store) {
            break;
        }
    }
    true
}

/// The exact store of `eviction` with `capacity` bytes, or `None` for an eviction only moka has.
pub fn exact(eviction: Eviction, capacity: u64) -> Option<Box<dyn SimStore>> {
    Some(match eviction {
        Eviction::Lru => Box::new(ExactLru::new(capacity)),
        Eviction::Fifo => Box::new(Fifo::new(capacity)),
        Eviction::Clock => Box::new(Clock::new(capacity)),
        Eviction::Sieve => Box::new(Sieve::new(capacity)),
        Eviction::Lfu => Box::new(Lfu::new(capacity)),
        Eviction::S3Fifo => Box::new(S3Fifo::new(capacity)),
        Eviction::Arc => Box::new(AdaptiveReplacement::new(capacity)),
        Eviction::WTinyLfu => Box::new(WTinyLfu::new(capacity)),
        Eviction::Belady => Box::new(Belady::new(capacity)),
        Eviction::BeladySize => Box::new(BeladySize::new(capacity, 0)),
        Eviction::TinyLfu => return None,
    })
}

/// A moka cache and, when exact, the maintenance that makes it predictable: run to a fixed point
/// after every write and every [`Maintained::READS_PER_MAINTENANCE`] reads, as the simulator's
/// [`MokaStore`] does and the proxy's `cache.exact_maintenance` (on by default) asks. Otherwise
/// it is moka as it is, maintained when its buffers fill or its timer says.
pub struct Maintained<K, V, S = std::collections::hash_map::RandomState> {
    cache: Cache<K, V, S>,
    /// Reads since the last maintenance run, or `None` when not exact.
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

    /// Wraps `cache`; `exact`: run maintenance to a fixed point as described above.
    pub fn new(cache: Cache<K, V, S>, exact: bool) -> Self {
        Maintained {
            cache,
            reads: exact.then(|| AtomicU32::new(0)),
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
    /// What moka evicted for size, once asked to keep it ([`SimStore::keep_evicted`]): moka's
    /// eviction listener runs in the maintenance that follows every write.
    evicted: Arc<EvictionLog>,
}

/// Evictions a moka listener records while `on`.
#[derive(Default)]
struct EvictionLog {
    on: std::sync::atomic::AtomicBool,
    items: std::sync::Mutex<Vec<(u128, u64)>>,
}

impl MokaStore {
    /// An empty store of `capacity` bytes with `eviction`.
    pub fn new(capacity: u64, eviction: Eviction) -> Self {
        let evicted = Arc::new(EvictionLog::default());
        let log = Arc::clone(&evicted);
        let cache = moka_builder::<u128, u64>(capacity, eviction)
            .weigher(|_, size: &u64| u32::try_from(*size).unwrap_or(u32::MAX))
            .eviction_listener(move |key: Arc<u128>, size: u64, cause| {
                if cause == moka::notification::RemovalCause::Size
                    && log.on.load(std::sync::atomic::Ordering::Relaxed)
                {
                    log.items
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((*key, size));
                }
            })
            .build_with_hasher(BuildFold::default());
        MokaStore {
            store: Maintained::new(cache, true),
            capacity,
            evicted,
        }
    }
}

impl SimStore for MokaStore {
    fn get(&mut self, req: &Access) -> bool {
        self.store.get(&req.key.raw()).is_some()
    }

    fn put(&mut self, req: &Access) -> bool {
        if req.size > self.capacity || req.size > u64::from(u32::MAX) {
            return false;
        }
        self.store.insert(req.key.raw(), req.size);
        self.store.cache().contains_key(&req.key.raw())
    }

    fn used_bytes(&self) -> u64 {
        self.store.cache().weighted_size()
    }

    fn keep_evicted(&mut self) -> bool {
        self.evicted
            .on
            .store(true, std::sync::atomic::Ordering::Relaxed);
        true
    }

    fn take_evicted(&mut self, out: &mut Vec<(u128, u64)>) {
        out.append(&mut self.evicted.items.lock().unwrap_or_else(|p| p.into_inner()));
    }

    fn remove(&mut self, key: u128) -> bool {
        self.store.cache().invalidate(&key);
        self.store.cache().run_pending_tasks();
        true
    }
}

/// Test helpers: drive a store by small integer keys.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Access, SimStore};
    use crate::NEVER;
    use secondhit_admission::hash::KeyHash;

    /// A store driven request by request (each call one request of virtual time).
    pub(crate) struct Driver<S> {
        pub(crate) store: S,
        vtime: u64,
    }

    impl<S: SimStore> Driver<S> {
        pub(crate) fn new(store: S) -> Self {
            Driver { store, vtime: 0 }
        }

        fn access(&mut self, key: u64, size: u64) -> Access {
            let a = Access::new(key, size, self.vtime);
            self.vtime += 1;
            a
        }

        /// A lookup of `key`.
        pub(crate) fn get(&mut self, key: u64) -> bool {
            let a = self.access(key, 1);
            self.store.get(&a)
        }

        /// One request, admit-all: a lookup, and on a miss an insertion (at one virtual time).
        pub(crate) fn request(&mut self, key: u64, size: u64) -> bool {
            let a = self.access(key, size);
            let hit = self.store.get(&a);
            if !hit {
                self.store.put(&a);
            }
            hit
        }

        /// An insertion of `key` with `size` bytes.
        pub(crate) fn put(&mut self, key: u64, size: u64) -> bool {
            let a = self.access(key, size);
            self.store.put(&a)
        }
    }

    /// `(key, size)` requests replayed admit-all with their next accesses: each one's hit.
    pub(crate) fn replay(store: &mut dyn SimStore, trace: &[(u64, u64)]) -> Vec<bool> {
        let mut next = vec![NEVER; trace.len()];
        let mut last = std::collections::HashMap::new();
        for (i, &(k, _)) in trace.iter().enumerate() {
            if let Some(p) = last.insert(k, i) {
                next[p] = i as u64;
            }
        }
        trace
            .iter()
            .enumerate()
            .map(|(i, &(k, size))| {
                let a = Access {
                    key: KeyHash::of_u64(k),
                    id: k,
                    size,
                    vtime: i as u64,
                    next: next[i],
                };
                let hit = store.get(&a);
                if !hit {
                    store.put(&a);
                }
                hit
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(store: impl SimStore) {
        let mut s = testing::Driver::new(store);
        assert!(s.put(1, 40));
        assert!(s.put(2, 40));
        assert!(s.get(1)); // 1 is now most recent
        assert!(s.put(3, 40)); // evicts 2, the least recent
        assert!(!s.get(2));
        assert!(s.get(1) && s.get(3));
        assert_eq!(s.store.used_bytes(), 80);
        assert!(!s.put(4, 101)); // larger than the whole store
        assert!(s.get(1) && s.get(3));
        assert!(s.put(5, 100)); // evicts everything else
        assert!(!s.get(1) && !s.get(3) && s.get(5));
        assert_eq!(s.store.used_bytes(), 100);
    }

    #[test]
    fn exact_lru_evicts_least_recent_by_bytes() {
        exercise(ExactLru::new(100));
    }

    #[test]
    fn moka_lru_store_behaves_the_same() {
        exercise(MokaStore::new(100, Eviction::Lru));
    }

    #[test]
    fn names_parse() {
        assert_eq!("tinylfu".parse::<Eviction>(), Ok(Eviction::TinyLfu));
        assert_eq!("s3-fifo".parse::<Eviction>(), Ok(Eviction::S3Fifo));
        for e in Eviction::ALL {
            assert_eq!(e.as_str().parse::<Eviction>(), Ok(e));
        }
        let err = "lfru".parse::<Eviction>().unwrap_err();
        assert!(
            err.contains("\"lfru\"") && err.contains("belady-size"),
            "{err}"
        );
        assert_eq!("moka".parse::<StoreKind>(), Ok(StoreKind::Moka));
        assert!("lru"
            .parse::<StoreKind>()
            .unwrap_err()
            .contains("exact or moka"));
    }
}
