//! Two tiers: a memory cache above a flash cache, each with its own admission policy, and the
//! flash writes as the budget (`simulate --disk-capacity`).
//!
//! A request is looked up in memory, then on disk; a disk hit is promoted to memory if the
//! memory policy admits it. A miss in both asks both policies: memory stores what its policy
//! admits; what the disk policy admits reaches disk once, when memory evicts it (or at once, if
//! memory did not take it). An object promoted from disk is not written again. With a write
//! rate, a token bucket of that many bytes a second of trace time (holding one second's worth)
//! refuses the writes that would exceed it, and counts them, as CacheLib's write-rate admission
//! keeps flash endurance a setting.
//!
//! Memory evicts by the exact store's `lru` or `fifo`, or moka's `lru` or `tinylfu` (`--store
//! moka`, the proxy's memory tier): the stores that hand their evictions down; flash by
//! [`FLASH_EVICTIONS`], `fifo` by default (a log-structured flash cache evicts whole regions in
//! order). A write larger than the budget's bucket is let through when the bucket is full (the
//! bucket then owes it), so no object is kept off flash by its size alone.

use super::SimError;
use crate::admission::{Admission, Policy, Settings};
use crate::hash::BuildFold;
use crate::store::{self, Access, Eviction, MokaStore, SimStore, StoreKind};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::time::Duration;

/// The evictions a flash tier may use: those that key on the object alone (ARC's ghosts and
/// W-TinyLFU's sketch follow each request's own position and id, which a write handed down
/// from memory does not have).
pub const FLASH_EVICTIONS: [Eviction; 6] = [
    Eviction::Fifo,
    Eviction::Lru,
    Eviction::Clock,
    Eviction::Sieve,
    Eviction::S3Fifo,
    Eviction::Lfu,
];

/// The flash tier of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DiskSpec {
    /// Bytes.
    pub capacity: u64,
    /// Which objects reach flash.
    pub policy: Policy,
    /// How flash evicts.
    pub eviction: Eviction,
    /// At most this many bytes written a second of trace time (`None`: no budget).
    pub write_rate: Option<u64>,
    /// Evict whole blocks of this many bytes, as `serve`'s flash tier does ([`BlockFifo`](crate::store::BlockFifo);
    /// `eviction` must be FIFO); `None`: object by object.
    pub block_size: Option<u64>,
}

/// Bytes a flash entry of `serve` carries beside its body before it is rounded up to a page:
/// foyer's entry header (36), the key with its length (about 70 for a replayed trace's URL),
/// and the object's encoding (68) with its header fields (about 215 from `secondhit origin`).
pub const FLASH_ENTRY_OVERHEAD: u64 = 390;

/// What to simulate below memory (`Options::disk`).
#[derive(Clone, Debug, PartialEq)]
pub struct DiskOptions {
    /// Flash sizes, bytes.
    pub capacities: Vec<u64>,
    /// Flash admission policies.
    pub policies: Vec<Policy>,
    /// Flash eviction.
    pub eviction: Eviction,
    /// The write budget, bytes a second.
    pub write_rate: Option<u64>,
    /// Whole blocks of this many bytes evicted at once ([`DiskSpec::block_size`]).
    pub block_size: Option<u64>,
}

/// The flash tier's figures in a run. Sizes are bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskResult {
    /// Flash admission policy.
    pub policy: String,
    /// Flash eviction.
    pub eviction: String,
    /// Flash capacity.
    pub capacity_bytes: u64,
    /// The write budget, bytes a second, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_rate: Option<u64>,
    /// Whole blocks of this many bytes evicted at once (`--disk-block-size`), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u64>,
    /// Requests served from memory.
    pub memory_hits: u64,
    /// Their bytes.
    pub memory_hit_bytes: u64,
    /// Requests served from flash.
    pub disk_hits: u64,
    /// Their bytes.
    pub disk_hit_bytes: u64,
    /// `memory_hits / requests`.
    pub memory_hit_ratio: f64,
    /// `disk_hits / requests`.
    pub disk_hit_ratio: f64,
    /// Objects written to flash.
    pub disk_writes: u64,
    /// Bytes written to flash.
    pub disk_write_bytes: u64,
    /// Writes the budget refused.
    pub disk_refusals: u64,
    /// Objects flash evicted (`None`: its eviction does not count them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_evictions: Option<u64>,
    /// Flash bytes written per byte served to clients: the endurance cost of the traffic.
    pub disk_write_bytes_per_served_byte: f64,
    /// The flash policy's rotations because a generation filled before its window ended.
    #[serde(default)]
    pub rotations_on_count: u64,
    /// At those, the most distinct keys a window would hold at the pace seen.
    #[serde(default)]
    pub keys_per_window: u64,
}

/// Counts of a two-tier cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierCounts {
    /// Requests.
    pub requests: u64,
    /// Their bytes.
    pub requested_bytes: u64,
    /// Memory hits.
    pub memory_hits: u64,
    /// Their bytes.
    pub memory_hit_bytes: u64,
    /// Disk hits.
    pub disk_hits: u64,
    /// Their bytes.
    pub disk_hit_bytes: u64,
    /// Objects written to memory (misses admitted, and promotions).
    pub memory_writes: u64,
    /// Their bytes.
    pub memory_write_bytes: u64,
    /// Objects written to flash.
    pub disk_writes: u64,
    /// Their bytes.
    pub disk_write_bytes: u64,
    /// Flash writes the budget refused.
    pub disk_refusals: u64,
    /// Objects flash evicted.
    pub disk_evictions: u64,
}

/// A memory cache above a flash cache.
///
/// # Example
/// ```
/// use secondhit_lab::admission::{Policy, Settings};
/// use secondhit_lab::sim::{DiskSpec, TwoTier};
/// use secondhit_lab::store::{Access, Eviction, StoreKind};
/// use std::time::Duration;
///
/// let disk = DiskSpec { capacity: 1_000, policy: Policy::SecondHitExact,
///     eviction: Eviction::Fifo, write_rate: None, block_size: None };
/// let mut c = TwoTier::new(Policy::AdmitAll, Eviction::Lru, StoreKind::Exact, 10, disk,
///     &Settings::default()).unwrap();
/// let t = Duration::ZERO;
/// c.step(&Access::new(1, 10, 0), t); // miss: into memory; flash said not yet
/// c.step(&Access::new(2, 10, 1), t); // evicts 1 from memory: not written to flash
/// c.step(&Access::new(1, 10, 2), t); // miss again: flash admits it now
/// c.step(&Access::new(3, 10, 3), t); // evicts 1: written to flash once
/// c.step(&Access::new(1, 10, 4), t); // a flash hit
/// assert_eq!((c.counts().disk_writes, c.counts().disk_hits), (1, 1));
/// ```
pub struct TwoTier {
    memory: Box<dyn SimStore>,
    memory_policy: Box<dyn Admission>,
    memory_capacity: u64,
    /// Bytes memory charges each object beside its body ([`TwoTier::with_object_cost`]).
    object_cost: u64,
    disk: Box<dyn SimStore>,
    disk_policy: Box<dyn Admission>,
    disk_capacity: u64,
    /// Objects in memory the disk policy admitted, not yet on disk.
    bound_for_disk: HashSet<u128, BuildFold>,
    budget: Option<secondhit_store::WriteBudget>,
    /// Whether flash's store counts its evictions.
    counts_evictions: bool,
    /// Scratch: what memory evicted in one step.
    evicted: Vec<(u128, u64)>,
    /// Scratch: what flash evicted in one write.
    disk_evicted: Vec<(u128, u64)>,
    counts: TierCounts,
}

impl TwoTier {
    /// Empty tiers: `memory_policy` in front of `memory_eviction` of `memory_capacity` bytes in
    /// `memory_store` (the exact store's `lru` or `fifo`, or moka's `lru` or `tinylfu`, the
    /// proxy's), above `disk`.
    pub fn new(
        memory_policy: Policy,
        memory_eviction: Eviction,
        memory_store: StoreKind,
        memory_capacity: u64,
        disk: DiskSpec,
        settings: &Settings,
    ) -> Result<TwoTier, SimError> {
        let mut memory: Box<dyn SimStore> = match memory_store {
            StoreKind::Exact => {
                store::exact(memory_eviction, memory_capacity).ok_or(SimError::TinyLfuNeedsMoka)?
            }
            StoreKind::Moka => Box::new(MokaStore::new(memory_capacity, memory_eviction)),
        };
        if !memory.keep_evicted() {
            return Err(SimError::MemoryTierEviction(memory_eviction));
        }
        if !FLASH_EVICTIONS.contains(&disk.eviction) {
            return Err(SimError::Disk(format!(
                "--disk-eviction {}: flash evicts by {}",
                disk.eviction,
                FLASH_EVICTIONS.map(|e| e.as_str()).join(", ")
            )));
        }
        let mut flash: Box<dyn SimStore> = match disk.block_size {
            // `serve` writes no object over half a block less 64 KiB.
            Some(block) if disk.eviction == Eviction::Fifo => Box::new(
                store::BlockFifo::new(disk.capacity, block, FLASH_ENTRY_OVERHEAD)
                    .with_max_object((block / 2).saturating_sub(64 << 10)),
            ),
            Some(_) => {
                return Err(SimError::Disk(format!(
                    "--disk-block-size: blocks are evicted in FIFO order, not {}",
                    disk.eviction
                )))
            }
            None => store::exact(disk.eviction, disk.capacity).ok_or(SimError::TinyLfuNeedsMoka)?,
        };
        // Only to count flash's evictions.
        let counts_evictions = flash.keep_evicted();
        Ok(TwoTier {
            memory,
            memory_policy: settings.build(memory_policy)?,
            memory_capacity,
            object_cost: 0,
            disk: flash,
            disk_policy: settings
                .build(disk.policy)
                .map_err(|e| SimError::Disk(format!("--disk-policy {}: {e}", disk.policy)))?,
            counts_evictions,
            disk_capacity: disk.capacity,
            bound_for_disk: HashSet::with_hasher(BuildFold::default()),
            budget: disk.write_rate.map(secondhit_store::WriteBudget::new),
            evicted: Vec::new(),
            disk_evicted: Vec::new(),
            counts: TierCounts::default(),
        })
    }

    /// Memory charges every object `cost` bytes beside its body, as `serve`'s weigher does
    /// (`simulate --object-cost`); flash entries keep their own layout. Default 0.
    pub fn with_object_cost(mut self, cost: u64) -> TwoTier {
        self.object_cost = cost;
        self
    }

    /// One request at `time`.
    pub fn step(&mut self, a: &Access, time: Duration) {
        let c = &mut self.counts;
        c.requests += 1;
        c.requested_bytes += a.size;
        if self.memory.get(a) {
            c.memory_hits += 1;
            c.memory_hit_bytes += a.size;
            return;
        }
        if self.disk.get(a) {
            c.disk_hits += 1;
            c.disk_hit_bytes += a.size;
            // Promoted per the memory policy; already on flash, so never written again.
            if self
                .memory_policy
                .on_miss_sized(a.key, a.size, time)
                .is_admit()
            {
                self.store_in_memory(a);
            }
        } else {
            let memory = self
                .memory_policy
                .on_miss_sized(a.key, a.size, time)
                .is_admit();
            let disk = self
                .disk_policy
                .on_miss_sized(a.key, a.size, time)
                .is_admit();
            let kept = memory && self.store_in_memory(a);
            if disk && kept {
                self.bound_for_disk.insert(a.key.raw());
            } else if disk {
                self.write_to_flash(a.key.raw(), a.size, a.vtime, time);
            }
        }
        self.hand_down(a.vtime, time);
    }

    /// Stores `a` in memory (weighed with the object cost); whether it is there.
    fn store_in_memory(&mut self, a: &Access) -> bool {
        let weighed = Access {
            size: a.size.saturating_add(self.object_cost),
            ..*a
        };
        if weighed.size > self.memory_capacity || !self.memory.put(&weighed) {
            return false;
        }
        self.counts.memory_writes += 1;
        self.counts.memory_write_bytes += a.size;
        true
    }

    /// Writes what memory evicted and the disk policy had admitted to flash.
    fn hand_down(&mut self, vtime: u64, time: Duration) {
        let mut evicted = std::mem::take(&mut self.evicted);
        self.memory.take_evicted(&mut evicted);
        for &(key, weight) in &evicted {
            if self.bound_for_disk.remove(&key) {
                // Memory weighed it with the object cost; flash takes its body.
                let size = weight.saturating_sub(self.object_cost);
                self.write_to_flash(key, size, vtime, time);
            }
        }
        evicted.clear();
        self.evicted = evicted;
    }

    fn write_to_flash(&mut self, key: u128, size: u64, vtime: u64, time: Duration) {
        if size > self.disk_capacity {
            return;
        }
        if let Some(b) = self.budget.as_mut() {
            if !b.take(size, time) {
                self.counts.disk_refusals += 1;
                return;
            }
        }
        let access = Access {
            key: crate::KeyHash::from_raw(key),
            id: 0,
            size,
            vtime,
            next: crate::trace::convert::NEVER,
        };
        // Never on flash here (a flash hit is promoted, never handed down again); the lookup is
        // the store's contract before a put.
        if !self.disk.get(&access) && self.disk.put(&access) {
            self.counts.disk_writes += 1;
            self.counts.disk_write_bytes += size;
        }
        self.disk.take_evicted(&mut self.disk_evicted);
        self.counts.disk_evictions += self.disk_evicted.len() as u64;
        self.disk_evicted.clear();
    }

    /// The counts so far.
    pub fn counts(&self) -> &TierCounts {
        &self.counts
    }

    /// Whether [`TierCounts::disk_evictions`] is counted (flash's store says what it evicts).
    pub fn counts_evictions(&self) -> bool {
        self.counts_evictions
    }

    /// The memory policy.
    pub fn memory_policy(&self) -> &dyn Admission {
        &*self.memory_policy
    }

    /// The flash policy.
    pub fn disk_policy(&self) -> &dyn Admission {
        &*self.disk_policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiers(memory: u64, disk: u64, policy: Policy, rate: Option<u64>) -> TwoTier {
        TwoTier::new(
            Policy::AdmitAll,
            Eviction::Lru,
            StoreKind::Exact,
            memory,
            DiskSpec {
                capacity: disk,
                policy,
                eviction: Eviction::Fifo,
                write_rate: rate,
                block_size: None,
            },
            &Settings {
                window: None,
                ..Settings::default()
            },
        )
        .unwrap()
    }

    /// 200 one-hit wonders, and 10 objects asked for in bursts every 20 of them.
    fn replay_mix(c: &mut TwoTier) {
        let mut v = 0;
        for i in 0..200u64 {
            c.step(&Access::new(1_000 + i, 10, v), Duration::ZERO);
            v += 1;
            if i % 20 == 0 {
                for k in 0..10u64 {
                    c.step(&Access::new(k, 10, v), Duration::ZERO);
                    v += 1;
                }
            }
        }
    }

    #[test]
    fn objects_requested_once_never_reach_flash_under_second_hit() {
        let mut c = tiers(100, 10_000, Policy::SecondHitExact, None);
        replay_mix(&mut c);
        let n = c.counts();
        // Only the 10 popular objects were ever written to flash, each once.
        assert_eq!(n.disk_writes, 10);
        assert!(n.disk_hits > 0);
        let mut all = tiers(100, 10_000, Policy::AdmitAll, None);
        replay_mix(&mut all);
        // Admit-all writes each of the 210 objects memory evicts once (the last 10 are still in
        // memory at the end).
        assert_eq!(all.counts().disk_writes, 200, "{:?}", all.counts());
    }

    #[test]
    fn the_write_budget_refuses_what_exceeds_it_and_counts_it() {
        // 100 bytes a second; objects of 40 bytes evicted from a memory of 40, one a second,
        // two per second offered: one second's worth of tokens (100) takes two, then half.
        let mut c = tiers(40, 1 << 20, Policy::AdmitAll, Some(100));
        let mut v = 0;
        for s in 0..100u64 {
            for j in 0..4u64 {
                c.step(
                    &Access::new(s * 4 + j, 40, v),
                    Duration::from_millis(s * 1000 + j * 250),
                );
                v += 1;
            }
        }
        let n = c.counts();
        // 100 seconds at 100 bytes a second, plus the first second's tokens.
        assert!(n.disk_write_bytes <= 100 * 100 + 100, "{n:?}");
        assert!(n.disk_write_bytes >= 100 * 80, "{n:?}");
        assert_eq!(n.disk_writes + n.disk_refusals, 399, "{n:?}"); // the last stays in memory
        assert!(n.disk_refusals > 100);
    }

    #[test]
    fn an_object_cost_weighs_memory_and_flash_takes_bodies() {
        // Memory of 100 bytes: ten 10-byte objects alone, two when each also costs 40. What it
        // evicts reaches flash at its body's size.
        let mut c = tiers(100, 1_000, Policy::AdmitAll, None).with_object_cost(40);
        for id in 0..10 {
            c.step(&Access::new(id, 10, id), Duration::ZERO);
        }
        let n = c.counts();
        assert_eq!((n.memory_writes, n.memory_write_bytes), (10, 100));
        assert_eq!((n.disk_writes, n.disk_write_bytes), (8, 80));
        // 8 and 9 in memory, 0 to 7 on flash: 0 and 1, promoted, push 8 and 9 down to flash,
        // so every one of the ten is then a flash hit.
        for id in 0..10 {
            c.step(&Access::new(id, 10, 10 + id), Duration::ZERO);
        }
        let n = c.counts();
        assert_eq!((n.memory_hits, n.disk_hits), (0, 10));
        assert_eq!((n.disk_writes, n.disk_write_bytes), (10, 100));
    }
}
