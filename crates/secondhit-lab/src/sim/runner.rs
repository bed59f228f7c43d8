//! One run: what it is ([`RunSpec`]), the lanes or the two tiers it steps through the trace,
//! and what it measured ([`RunResult`]).

use super::shield::Shield;
use super::{
    DiskResult, DiskSpec, NodeResult, Nodes, Ring, ShieldOptions, ShieldResult, SimError, TwoTier,
};
use crate::admission::{Policy, Settings, Stats};
use crate::hash::BuildFold;
use crate::store::{Access, Eviction, StoreKind};
use crate::trace::convert::NEVER;
use crate::trace::Request;
use secondhit_store::{Counts, Lane, Step};
use serde::Serialize;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// One run's identity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunSpec {
    /// Admission policy.
    pub policy: Policy,
    /// Eviction policy.
    pub eviction: Eviction,
    /// Store.
    pub store: StoreKind,
    /// Capacity in bytes.
    pub capacity: u64,
    /// The working-set fraction it came from, if any.
    pub fraction: Option<f64>,
    /// The flash tier below, if any.
    pub disk: Option<DiskSpec>,
    /// Bytes each stored object costs beside its body ([`Options::object_cost`](super::Options::object_cost)).
    pub object_cost: u64,
    /// How long a stale object is kept ([`Options::stale_keep`](super::Options::stale_keep)).
    pub stale_keep: Duration,
}

/// One run's figures. Ratios are fractions in [0, 1]; sizes are bytes.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct RunResult {
    /// Admission policy name.
    pub policy: String,
    /// Eviction policy name.
    pub eviction: String,
    /// Store name.
    pub store: String,
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// The working-set fraction the capacity came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_fraction: Option<f64>,
    /// Requests replayed.
    pub requests: u64,
    /// Requests served from the cache.
    pub hits: u64,
    /// Bytes served from the cache.
    pub hit_bytes: u64,
    /// `hits / requests`; with sampling ([`Options::sample`](super::Options::sample)), the SHARDS-adjusted estimate of
    /// the whole trace's ([`shards_adjusted`](super::shards_adjusted)).
    pub hit_ratio: f64,
    /// `hit_bytes / requested bytes`.
    pub byte_hit_ratio: f64,
    /// Cache writes: misses the policy admitted that fit in the cache.
    pub admissions: u64,
    /// Bytes written to the cache.
    pub admitted_bytes: u64,
    /// Bytes fetched from the origin (every miss).
    pub origin_bytes: u64,
    /// Admitted objects the store refused (moka's TinyLFU filter).
    pub store_rejections: u64,
    /// Generation rotations of the policy.
    pub rotations: u64,
    /// Of those, rotations because a generation filled (`expected_items` distinct keys) before
    /// its window ended: the filter is undersized for the trace.
    pub rotations_on_count: u64,
    /// At such rotations, the most distinct keys a window would hold at the pace seen (0: none).
    pub keys_per_window: u64,
    /// For approximate policies: admissions the filter made that the exact policy with the same
    /// windows, asked about the same misses, would not have made (false positives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approx_extra_admissions: Option<u64>,
    /// For approximate policies: admissions the exact policy would have made and the filter did
    /// not (only after an early, count-triggered rotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approx_missed_admissions: Option<u64>,
    /// Requests per second of this run's own work (one thread; trace reading excluded).
    pub requests_per_sec: f64,
    /// Requests admit-all served from the cache (at the same size and eviction, in lockstep)
    /// that this run missed; for every memory-only run whose policy is not admit-all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits_lost: Option<u64>,
    /// Of [`hits_lost`](RunResult::hits_lost), those whose object this policy had deferred at
    /// its last miss (the rest it had stored and evicted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits_lost_deferred: Option<u64>,
    /// Requests this run served from the cache that admit-all missed (the room the deferred
    /// objects left). `hits - hits_gained + hits_lost` is admit-all's hits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits_gained: Option<u64>,
    /// With [`Options::nodes`](super::Options::nodes) above one: each node's figures, node 0 first (the fields above
    /// are the cluster's totals; `capacity_bytes` is the run's, which each node has a share of
    /// with `split` and the whole of with `each`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_node: Vec<NodeResult>,
    /// With [`Options::disk`](super::Options::disk): the flash tier's figures (the fields above are both tiers'
    /// together; `admissions` are memory's writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskResult>,
    /// With [`Options::shield`](super::Options::shield): the shield tier's figures (the fields
    /// above are the edge tier's; its `origin_bytes` are what it asked of the shield).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shield: Option<ShieldResult>,
}

/// One run as it steps through the trace, on one worker thread.
pub(super) struct Runner {
    spec: RunSpec,
    /// One lane per node ([`Options::nodes`](super::Options::nodes)); one for a single cache.
    lanes: Vec<Lane>,
    /// Which node a key goes to, with more than one.
    ring: Option<Ring>,
    /// Memory above flash, instead of the lanes.
    tiers: Option<TwoTier>,
    /// Admit-all at the same size and eviction, stepped in lockstep with the lanes.
    baseline: Option<Baseline>,
    /// The shield tier below the lanes, if any.
    shield: Option<Shield>,
    busy: Duration,
    /// The trace time of the last request (the filter's "now" when its state is kept).
    last_time: Duration,
}

impl Runner {
    /// `decompose`: step admit-all beside a policy that is not ([`RunResult::hits_lost`]).
    pub(super) fn new(
        spec: RunSpec,
        settings: &Settings,
        nodes: &Nodes,
        shield: Option<&ShieldOptions>,
        decompose: bool,
    ) -> Result<Runner, SimError> {
        if let Some(disk) = spec.disk {
            return Ok(Runner {
                spec,
                lanes: Vec::new(),
                ring: None,
                tiers: Some(
                    TwoTier::new(
                        spec.policy,
                        spec.eviction,
                        spec.store,
                        spec.capacity,
                        disk,
                        settings,
                    )?
                    .with_object_cost(spec.object_cost),
                ),
                baseline: None,
                shield: None,
                busy: Duration::ZERO,
                last_time: Duration::ZERO,
            });
        }
        let shield = match shield {
            Some(s) => Some(Shield::new(
                *s,
                spec.eviction,
                spec.store,
                spec.object_cost,
                settings,
            )?),
            None => None,
        };
        let n = nodes.count.max(1);
        let capacity = nodes.node_capacity(spec.capacity);
        let lanes = (0..n)
            .map(|_| {
                Lane::new(
                    spec.policy,
                    spec.eviction,
                    spec.store,
                    capacity,
                    settings,
                    true,
                )
                .map(|l| {
                    l.with_object_cost(spec.object_cost)
                        .with_stale_keep(spec.stale_keep)
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let baseline = if decompose && spec.policy != Policy::AdmitAll {
            Some(Baseline::new(spec, capacity, n, settings)?)
        } else {
            None
        };
        Ok(Runner {
            spec,
            lanes,
            ring: (n > 1).then(|| Ring::new(n)),
            tiers: None,
            baseline,
            shield,
            busy: Duration::ZERO,
            last_time: Duration::ZERO,
        })
    }

    /// A chunk of the trace whose first request is number `start`; `next` holds the next
    /// accesses from that request on, when an eviction needs them. Its time counts as busy.
    pub(super) fn step_chunk(&mut self, chunk: &[Request], start: u64, next: Option<&[u64]>) {
        let t = Instant::now();
        for (j, r) in chunk.iter().enumerate() {
            let n = next.and_then(|n| n.get(j).copied()).unwrap_or(NEVER);
            self.step(r, start + j as u64, n);
        }
        self.busy += t.elapsed();
    }

    /// Request number `vtime` of the trace (from 0), whose key is next requested at `next`.
    #[inline]
    fn step(&mut self, r: &Request, vtime: u64, next: u64) {
        self.last_time = r.time;
        let access = Access {
            key: r.key,
            id: r.id,
            size: r.size,
            vtime,
            next,
        };
        if let Some(t) = self.tiers.as_mut() {
            t.step(&access, r.time);
            return;
        }
        let node = self.ring.as_ref().map_or(0, |ring| ring.node_of(r.key));
        let recorded = r.recorded.as_ref();
        let step = self.lanes[node].step_recorded(&access, r.time, recorded);
        if let Some(b) = self.baseline.as_mut() {
            b.step(node, &access, r.time, recorded, step);
        }
        if step != Step::Hit {
            if let Some(s) = self.shield.as_mut() {
                s.step(&access, r.time);
            }
        }
    }

    /// The first lane's admission state as `serve --state-dir` loads it, its clock at the last
    /// request's trace time (`None` for a policy that keeps none).
    pub(super) fn admission_state(&self) -> Option<Vec<u8>> {
        self.lanes.first().and_then(|l| {
            l.admission()
                .snapshot(self.last_time, secondhit_proxy::state::wall_now())
        })
    }

    pub(super) fn finish(self) -> RunResult {
        // Both kinds of run come down to one set of totals and the policies' rotation figures.
        let mut c = Counts::default();
        let mut rotations = Rotations::default();
        let mut disk = None;
        if let (Some(t), Some(spec)) = (&self.tiers, self.spec.disk) {
            let (totals, flash) = tier_figures(t, spec);
            c = totals;
            rotations.add(t.memory_policy().stats());
            disk = Some(flash);
        }
        for lane in &self.lanes {
            c.add(lane.counts());
            rotations.add(lane.admission().stats());
        }
        let approx = self.lanes.iter().any(Lane::compares);
        let per_node = if self.lanes.len() > 1 {
            self.lanes
                .iter()
                .map(|l| NodeResult::of(l.counts()))
                .collect()
        } else {
            Vec::new()
        };
        RunResult {
            policy: self.spec.policy.to_string(),
            eviction: self.spec.eviction.to_string(),
            store: self.spec.store.to_string(),
            capacity_bytes: self.spec.capacity,
            capacity_fraction: self.spec.fraction,
            requests: c.requests,
            hits: c.hits,
            hit_bytes: c.hit_bytes,
            hit_ratio: ratio(c.hits, c.requests),
            byte_hit_ratio: ratio(c.hit_bytes, c.requested_bytes),
            admissions: c.admissions,
            admitted_bytes: c.admitted_bytes,
            origin_bytes: c.requested_bytes - c.hit_bytes,
            store_rejections: c.rejections,
            rotations: rotations.total,
            rotations_on_count: rotations.on_count,
            keys_per_window: rotations.keys_per_window,
            approx_extra_admissions: approx.then_some(c.extra),
            approx_missed_admissions: approx.then_some(c.missed),
            hits_lost: self.baseline.as_ref().map(|b| b.lost),
            hits_lost_deferred: self.baseline.as_ref().map(|b| b.lost_deferred),
            hits_gained: self.baseline.as_ref().map(|b| b.gained),
            requests_per_sec: c.requests as f64 / self.busy.as_secs_f64().max(1e-9),
            per_node,
            disk,
            shield: self.shield.as_ref().map(Shield::result),
        }
    }
}

/// Admit-all beside a run: the same store, eviction and size on every node, stepped with the
/// same requests, and the requests where the two differ.
struct Baseline {
    /// One admit-all lane per node of the run.
    lanes: Vec<Lane>,
    /// Keys whose last miss in the run was deferred by its policy. With stores that report
    /// their evictions, a key leaves when admit-all evicts it (admit-all cannot hit it again
    /// before a request of it, which sets the mark afresh), so the set stays as small as the
    /// cache; with the others it holds every deferred key.
    deferred: HashSet<u128, BuildFold>,
    /// Whether the lanes report their evictions.
    bounded: bool,
    evicted: Vec<(u128, u64)>,
    lost: u64,
    lost_deferred: u64,
    gained: u64,
}

impl Baseline {
    fn new(
        spec: RunSpec,
        capacity: u64,
        nodes: usize,
        settings: &Settings,
    ) -> Result<Baseline, SimError> {
        let mut lanes = (0..nodes)
            .map(|_| {
                Lane::new(
                    Policy::AdmitAll,
                    spec.eviction,
                    spec.store,
                    capacity,
                    settings,
                    false,
                )
                .map(|l| {
                    l.with_object_cost(spec.object_cost)
                        .with_stale_keep(spec.stale_keep)
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Every lane is the same kind of store: all report evictions, or none.
        let bounded = lanes.iter_mut().all(Lane::keep_evicted);
        Ok(Baseline {
            lanes,
            deferred: HashSet::default(),
            bounded,
            evicted: Vec::new(),
            lost: 0,
            lost_deferred: 0,
            gained: 0,
        })
    }

    /// The request the run just took on `node`, with what the run did (`step`).
    #[inline]
    fn step(
        &mut self,
        node: usize,
        access: &Access,
        time: Duration,
        recorded: Option<&crate::trace::Recorded>,
        step: Step,
    ) {
        let base = self.lanes[node].step_recorded(access, time, recorded) == Step::Hit;
        let key = access.key.raw();
        match (step == Step::Hit, base) {
            (true, false) => self.gained += 1,
            (false, true) => {
                self.lost += 1;
                self.lost_deferred += u64::from(self.deferred.contains(&key));
            }
            _ => {}
        }
        match step {
            Step::Deferred => {
                self.deferred.insert(key);
            }
            Step::Written | Step::Refused => {
                self.deferred.remove(&key);
            }
            Step::Hit => {}
        }
        if self.bounded {
            self.lanes[node].take_evicted(&mut self.evicted);
            for (k, _) in self.evicted.drain(..) {
                self.deferred.remove(&k);
            }
        }
    }
}

/// `a / b`, 0 when `b` is.
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The policies' rotation figures over a run's lanes (or its memory tier).
#[derive(Default)]
struct Rotations {
    total: u64,
    on_count: u64,
    keys_per_window: u64,
}

impl Rotations {
    fn add(&mut self, stats: Stats) {
        self.total += stats.rotations;
        self.on_count += stats.rotations_on_count;
        self.keys_per_window = self.keys_per_window.max(stats.keys_per_window);
    }
}

/// A two-tier run's totals over both tiers (writes are memory's), and the flash tier's figures.
fn tier_figures(t: &TwoTier, spec: DiskSpec) -> (Counts, DiskResult) {
    let tc = t.counts();
    let totals = Counts {
        requests: tc.requests,
        requested_bytes: tc.requested_bytes,
        hits: tc.memory_hits + tc.disk_hits,
        hit_bytes: tc.memory_hit_bytes + tc.disk_hit_bytes,
        admissions: tc.memory_writes,
        admitted_bytes: tc.memory_write_bytes,
        ..Counts::default()
    };
    let flash = t.disk_policy().stats();
    let disk = DiskResult {
        rotations_on_count: flash.rotations_on_count,
        keys_per_window: flash.keys_per_window,
        policy: spec.policy.to_string(),
        eviction: spec.eviction.to_string(),
        capacity_bytes: spec.capacity,
        write_rate: spec.write_rate,
        block_size: spec.block_size,
        memory_hits: tc.memory_hits,
        memory_hit_bytes: tc.memory_hit_bytes,
        disk_hits: tc.disk_hits,
        disk_hit_bytes: tc.disk_hit_bytes,
        memory_hit_ratio: ratio(tc.memory_hits, tc.requests),
        disk_hit_ratio: ratio(tc.disk_hits, tc.requests),
        disk_writes: tc.disk_writes,
        disk_write_bytes: tc.disk_write_bytes,
        disk_refusals: tc.disk_refusals,
        disk_evictions: t.counts_evictions().then_some(tc.disk_evictions),
        disk_write_bytes_per_served_byte: ratio(tc.disk_write_bytes, tc.requested_bytes),
    };
    (totals, disk)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyHash;

    /// Second-hit (exact, no window) in a cache of `capacity` objects, beside admit-all.
    fn decompose(keys: &[u64], eviction: Eviction, capacity: u64) -> RunResult {
        let spec = RunSpec {
            policy: Policy::SecondHitExact,
            eviction,
            store: StoreKind::Exact,
            capacity,
            fraction: None,
            disk: None,
            object_cost: 0,
            stale_keep: Duration::MAX,
        };
        let settings = Settings {
            window: None,
            ..Settings::default()
        };
        let mut run = Runner::new(spec, &settings, &Nodes::default(), None, true).unwrap();
        let trace: Vec<Request> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| Request {
                range: None,
                recorded: None,
                time: Duration::from_secs(i as u64),
                key: KeyHash::of_u64(k),
                size: 1,
                id: k,
            })
            .collect();
        run.step_chunk(&trace, 0, None);
        run.finish()
    }

    #[test]
    fn hits_lost_to_a_deferral_and_gained_in_the_room_it_left() {
        // Admit-all: 1 miss, 1 hit, 2 miss, 3 miss (evicts 1), 1 miss. Second-hit: 1 deferred,
        // 1 stored (admit-all hit: lost, deferred), 2 and 3 deferred, 1 hit (gained).
        let r = decompose(&[1, 1, 2, 3, 1], Eviction::Lru, 2);
        assert_eq!(
            (r.hits_lost, r.hits_lost_deferred, r.hits_gained),
            (Some(1), Some(1), Some(1))
        );
        assert_eq!(r.hits, 1);
    }

    #[test]
    fn a_loss_to_eviction_is_not_a_deferral() {
        // FIFO of three. Admit-all takes 1, 2, 3 and hits each once more; second-hit stores
        // them only then (three losses to deferral). 4 twice: admit-all evicts 1 and hits 4;
        // second-hit stores 4 at its second request, evicting 3 (a fourth loss to deferral).
        // 3 once more: admit-all still has it, second-hit stored it and evicted it.
        let r = decompose(&[1, 2, 3, 3, 1, 2, 4, 4, 3], Eviction::Fifo, 3);
        assert_eq!(
            (r.hits_lost, r.hits_lost_deferred, r.hits_gained),
            (Some(5), Some(4), Some(0))
        );
        assert_eq!(r.hits, 0);
    }
}
