//! One simulated cache: an admission policy in front of a store of keys and sizes, and its
//! counts. The simulator's runs are lanes (one per node of a simulated cluster), and so are
//! `serve`'s shadow policies: the same step, whether the requests come from a trace or from the
//! live proxy.

use crate::{Access, Eviction, MokaStore, SimStore, StoreKind};
use secondhit_admission::admission::{Admission, Policy, PolicyError, Settings};
use std::time::Duration;

/// Why a lane could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// A policy could not be built.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// `tinylfu` asked of the exact store.
    #[error("eviction tinylfu exists only in the moka store: add --store moka, or use lru")]
    TinyLfuNeedsMoka,
}

/// A lane's counts. Sizes are bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests stepped.
    pub requests: u64,
    /// Their bytes.
    pub requested_bytes: u64,
    /// Requests the store answered.
    pub hits: u64,
    /// Their bytes.
    pub hit_bytes: u64,
    /// Misses the policy admitted that fit in the cache: cache writes.
    pub admissions: u64,
    /// Bytes of those writes.
    pub admitted_bytes: u64,
    /// Admitted objects the store refused (moka's TinyLFU, or an eviction's own rule).
    pub rejections: u64,
    /// For approximate policies: admissions the exact counterpart would not have made.
    pub extra: u64,
    /// For approximate policies: admissions the exact counterpart would have made.
    pub missed: u64,
}

impl Counts {
    /// The sum of two lanes' counts.
    pub fn add(&mut self, o: &Counts) {
        self.requests += o.requests;
        self.requested_bytes += o.requested_bytes;
        self.hits += o.hits;
        self.hit_bytes += o.hit_bytes;
        self.admissions += o.admissions;
        self.admitted_bytes += o.admitted_bytes;
        self.rejections += o.rejections;
        self.extra += o.extra;
        self.missed += o.missed;
    }
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The store had it.
    Hit,
    /// A miss the policy admitted and the store kept.
    Written,
    /// A miss the policy admitted that the store refused, that is larger than the cache, or
    /// whose response could not be stored.
    Refused,
    /// A miss the policy deferred.
    Deferred,
}

/// What a live cache's recording says of one request beyond the object and its size
/// ([`recording`](crate::recording)): what [`Lane::step_recorded`] needs to do what that cache
/// did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// Bytes the live cache charged the object (0: not known, the lane's object cost is added
    /// to its size instead).
    pub weight: u64,
    /// The response could be stored (not `no-store`, an error, too large, ...).
    pub storable: bool,
    /// How long the object stays fresh from this request, where it could be stored.
    pub fresh_for: Option<Duration>,
}

/// An admission policy in front of a store, with its counts.
///
/// # Example
/// ```
/// use secondhit_admission::admission::{Policy, Settings};
/// use secondhit_store::{Access, Eviction, Lane, Step, StoreKind};
/// use std::time::Duration;
///
/// let mut lane = Lane::new(Policy::SecondHit, Eviction::Lru, StoreKind::Exact, 100,
///     &Settings::default(), false).unwrap();
/// let a = Access::new(7, 10, 0);
/// assert_eq!(lane.step(&a, Duration::ZERO), Step::Deferred);
/// assert_eq!(lane.step(&a, Duration::ZERO), Step::Written);
/// assert_eq!(lane.step(&a, Duration::ZERO), Step::Hit);
/// assert_eq!(lane.counts().hits, 1);
/// ```
pub struct Lane {
    store: Box<dyn SimStore>,
    admission: Box<dyn Admission>,
    /// The exact policy with the same windows, asked about the same misses.
    counterpart: Option<Box<dyn Admission>>,
    capacity: u64,
    /// Bytes the store charges each object beside its body ([`Lane::with_object_cost`]).
    object_cost: u64,
    /// When each stored object stops being fresh, for recorded requests that say
    /// ([`Lane::step_recorded`]); empty otherwise.
    fresh_until: std::collections::HashMap<u128, Duration>,
    /// How long a stale object is kept for revalidation before it is dropped.
    stale_keep: Duration,
    counts: Counts,
}

impl Lane {
    /// An empty cache of `capacity` bytes: `policy` with `settings` in front of `eviction` in
    /// `store`. With `counterpart`, an approximate policy's decisions are compared with its exact
    /// counterpart's ([`Counts::extra`], [`Counts::missed`]).
    pub fn new(
        policy: Policy,
        eviction: Eviction,
        store: StoreKind,
        capacity: u64,
        settings: &Settings,
        counterpart: bool,
    ) -> Result<Lane, LaneError> {
        let store: Box<dyn SimStore> = match store {
            StoreKind::Exact => {
                crate::exact(eviction, capacity).ok_or(LaneError::TinyLfuNeedsMoka)?
            }
            StoreKind::Moka => Box::new(MokaStore::new(capacity, eviction)),
        };
        let counterpart = match policy.exact_counterpart().filter(|_| counterpart) {
            Some(p) => Some(settings.build(p)?),
            None => None,
        };
        Ok(Lane {
            store,
            admission: settings.build(policy)?,
            counterpart,
            capacity,
            object_cost: 0,
            fresh_until: std::collections::HashMap::new(),
            stale_keep: Duration::MAX,
            counts: Counts::default(),
        })
    }

    /// A stale object is dropped this long after it stopped being fresh (`serve`'s
    /// `cache.stale_keep`), for recorded requests. Default: kept until evicted.
    pub fn with_stale_keep(mut self, keep: Duration) -> Lane {
        self.stale_keep = keep;
        self
    }

    /// One request at `time` as a live cache recorded it: weighed as that cache weighed it,
    /// written only if its response was storable, and, where it said how long the object stays
    /// fresh, a hit only while the stored copy is fresh. A stale copy is what the live cache
    /// revalidated (not a hit, not a write, not asked of the policy): it is fresh again for as
    /// long as this request says; one past `stale_keep` is dropped, and the request is a miss
    /// (if the store can drop it). Without `rec`, [`Lane::step`].
    pub fn step_recorded(
        &mut self,
        access: &Access,
        time: Duration,
        rec: Option<&Recorded>,
    ) -> Step {
        let Some(rec) = rec else {
            return self.see(access, time, true);
        };
        let body = access.size;
        let weighed = Access {
            size: if rec.weight > 0 {
                rec.weight
            } else {
                body.saturating_add(self.object_cost)
            },
            ..*access
        };
        let key = access.key.raw();
        let stale = self
            .fresh_until
            .get(&key)
            .copied()
            .filter(|&until| time >= until);
        let mut found = None;
        if let Some(until) = stale {
            if self.store.get(&weighed) {
                let expired = time.saturating_sub(until) >= self.stale_keep;
                if !expired || !self.store.remove(key) {
                    let c = &mut self.counts;
                    c.requests += 1;
                    c.requested_bytes += body;
                    if let (true, Some(f)) = (rec.storable, rec.fresh_for) {
                        self.fresh_until.insert(key, time.saturating_add(f));
                    }
                    return Step::Refused;
                }
            }
            // Evicted, or expired and dropped: a miss, the store asked once already.
            self.fresh_until.remove(&key);
            found = Some(false);
        }
        // Fresh, or not stored: as any request, with its own weight.
        let step = self.see_looked_up(access, weighed.size, time, rec.storable, found);
        if step == Step::Written {
            let until = rec
                .fresh_for
                .map_or(Duration::MAX, |f| time.saturating_add(f));
            self.fresh_until.insert(key, until);
        }
        step
    }

    /// The store charges every object `cost` bytes beside its body, as a live cache's weigher
    /// charges its key, header fields and bookkeeping (`simulate --object-cost`). Hits and bytes
    /// are still counted in body bytes; only what fits in the capacity changes. Default 0.
    pub fn with_object_cost(mut self, cost: u64) -> Lane {
        self.object_cost = cost;
        self
    }

    /// One request at `time` (the policy's clock).
    #[inline]
    pub fn step(&mut self, access: &Access, time: Duration) -> Step {
        self.see(access, time, true)
    }

    /// One request at `time` whose response may not be storable (`storable: false`: a live
    /// cache asked its policy but could not store the response, as for `no-store`): looked up
    /// and, on a miss, put to the policy as any other, never written.
    #[inline]
    pub fn see(&mut self, access: &Access, time: Duration, storable: bool) -> Step {
        let weight = access.size.saturating_add(self.object_cost);
        self.see_weighed(access, weight, time, storable)
    }

    /// [`Lane::see`] of an object of `access.size` bytes that weighs `weight` in the store.
    #[inline]
    fn see_weighed(
        &mut self,
        access: &Access,
        weight: u64,
        time: Duration,
        storable: bool,
    ) -> Step {
        self.see_looked_up(access, weight, time, storable, None)
    }

    /// [`Lane::see_weighed`]; `found`: the store was already asked (a store's lookup may
    /// change it, as ghost lists do: it is asked once a request).
    #[inline]
    fn see_looked_up(
        &mut self,
        access: &Access,
        weight: u64,
        time: Duration,
        storable: bool,
        found: Option<bool>,
    ) -> Step {
        let c = &mut self.counts;
        c.requests += 1;
        c.requested_bytes += access.size;
        // The store sees the object's weight; the counts, and the policy, its body.
        let body = access.size;
        let weighed = Access {
            size: weight,
            ..*access
        };
        let access = &weighed;
        if found.unwrap_or_else(|| self.store.get(access)) {
            c.hits += 1;
            c.hit_bytes += body;
            return Step::Hit;
        }
        let admit = self
            .admission
            .on_miss_sized(access.key, body, time)
            .is_admit();
        if let Some(exact) = &self.counterpart {
            let exact = exact.on_miss(access.key, time).is_admit();
            c.extra += u64::from(admit && !exact);
            c.missed += u64::from(!admit && exact);
        }
        if !admit {
            return Step::Deferred;
        }
        if !storable || access.size > self.capacity {
            return Step::Refused;
        }
        c.admissions += 1;
        c.admitted_bytes += body;
        if self.store.put(access) {
            Step::Written
        } else {
            c.rejections += 1;
            Step::Refused
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// The admission policy.
    pub fn admission(&self) -> &dyn Admission {
        &*self.admission
    }

    /// Whether the counterpart comparison runs.
    pub fn compares(&self) -> bool {
        self.counterpart.is_some()
    }

    /// Bytes stored.
    pub fn used_bytes(&self) -> u64 {
        self.store.used_bytes()
    }

    /// Keeps every object the store evicts from now on, for [`Lane::take_evicted`]; whether
    /// the store can ([`SimStore::keep_evicted`]).
    pub fn keep_evicted(&mut self) -> bool {
        self.store.keep_evicted()
    }

    /// Moves the objects evicted since the last call into `out`, as (key, size).
    pub fn take_evicted(&mut self, out: &mut Vec<(u128, u64)>) {
        self.store.take_evicted(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secondhit_admission::admission::Policy;

    fn lane(cost: u64) -> Lane {
        Lane::new(
            Policy::AdmitAll,
            Eviction::Lru,
            StoreKind::Exact,
            100,
            &Settings::default(),
            false,
        )
        .unwrap()
        .with_object_cost(cost)
    }

    #[test]
    fn an_object_cost_shrinks_what_fits_but_not_the_bytes_counted() {
        // Objects of 10 bytes: ten fit in 100 bytes alone, two when each also costs 40.
        for (cost, fit) in [(0, 10), (40, 2)] {
            let mut l = lane(cost);
            for id in 0..10 {
                assert_eq!(
                    l.step(&Access::new(id, 10, id), Duration::ZERO),
                    Step::Written
                );
            }
            let hits = (0..10)
                .filter(|&id| l.step(&Access::new(id, 10, 10 + id), Duration::ZERO) == Step::Hit)
                .count();
            assert_eq!(hits, if cost == 0 { 10 } else { 0 }, "cost {cost}");
            assert_eq!(l.used_bytes(), fit * (10 + cost), "cost {cost}");
            let c = l.counts();
            assert_eq!(c.admitted_bytes, c.admissions * 10, "bodies, not weights");
            assert_eq!(c.hit_bytes, c.hits * 10);
        }
        // Larger than the cache once weighed: refused, nothing evicted.
        let mut l = lane(95);
        assert_eq!(l.step(&Access::new(1, 5, 0), Duration::ZERO), Step::Written);
        assert_eq!(l.step(&Access::new(2, 6, 1), Duration::ZERO), Step::Refused);
        assert_eq!(l.step(&Access::new(1, 5, 2), Duration::ZERO), Step::Hit);
    }

    #[test]
    fn recorded_requests_are_fresh_stale_or_unstorable_as_the_live_cache_said() {
        let s = Duration::from_secs;
        let rec = |weight, storable, fresh: Option<u64>| Recorded {
            weight,
            storable,
            fresh_for: fresh.map(s),
        };
        let mut l = lane(0).with_stale_keep(s(100));
        let a = Access::new(1, 10, 0);
        let fresh10 = rec(30, true, Some(10));
        // Written at 0, fresh until 10, weighing what the live cache charged.
        assert_eq!(l.step_recorded(&a, s(0), Some(&fresh10)), Step::Written);
        assert_eq!(l.used_bytes(), 30);
        assert_eq!(l.step_recorded(&a, s(5), Some(&fresh10)), Step::Hit);
        // Stale at 12: revalidated (no hit, no write), fresh again until 22.
        assert_eq!(l.step_recorded(&a, s(12), Some(&fresh10)), Step::Refused);
        assert_eq!(l.step_recorded(&a, s(21), Some(&fresh10)), Step::Hit);
        // Stale at 30, and the revalidation failed (an error: not storable): still stale.
        assert_eq!(
            l.step_recorded(&a, s(30), Some(&rec(0, false, None))),
            Step::Refused
        );
        assert_eq!(l.step_recorded(&a, s(31), Some(&fresh10)), Step::Refused);
        assert_eq!(l.step_recorded(&a, s(32), Some(&fresh10)), Step::Hit);
        // Past stale_keep (100 s after it went stale at 41): dropped, a miss written again.
        assert_eq!(l.step_recorded(&a, s(141), Some(&fresh10)), Step::Written);
        let c = l.counts();
        assert_eq!((c.requests, c.hits, c.admissions), (8, 3, 2));
        assert_eq!(c.hit_bytes, 30, "bodies, not weights");
        // A response that could not be stored is asked of the policy and never written.
        let b = Access::new(2, 10, 9);
        assert_eq!(
            l.step_recorded(&b, s(150), Some(&rec(30, false, None))),
            Step::Refused
        );
        assert_eq!(
            l.step_recorded(&b, s(151), Some(&rec(30, false, None))),
            Step::Refused
        );
        assert_eq!(l.counts().admissions, 2);
        // Without a lifetime an object stays fresh; without a weight it weighs size + cost.
        let mut l = lane(5);
        let c = Access::new(3, 10, 0);
        assert_eq!(
            l.step_recorded(&c, s(0), Some(&rec(0, true, None))),
            Step::Written
        );
        assert_eq!(
            l.step_recorded(&c, s(1_000_000), Some(&rec(0, true, None))),
            Step::Hit
        );
        assert_eq!(l.used_bytes(), 15);
    }
}
