//! One run: what it is ([`RunSpec`]), the lanes or the two tiers it steps through the trace,
//! and what it measured ([`RunResult`]).

use super::{DiskResult, DiskSpec, NodeResult, Nodes, Ring, SimError, TwoTier};
use crate::admission::{Policy, Settings, Stats};
use crate::store::{Access, Eviction, StoreKind};
use crate::trace::convert::NEVER;
use crate::trace::Request;
use secondhit_store::{Counts, Lane};
use serde::Serialize;
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
    /// With [`Options::nodes`](super::Options::nodes) above one: each node's figures, node 0 first (the fields above
    /// are the cluster's totals; `capacity_bytes` is the run's, which each node has a share of
    /// with `split` and the whole of with `each`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_node: Vec<NodeResult>,
    /// With [`Options::disk`](super::Options::disk): the flash tier's figures (the fields above are both tiers'
    /// together; `admissions` are memory's writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskResult>,
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
    busy: Duration,
    /// The trace time of the last request (the filter's "now" when its state is kept).
    last_time: Duration,
}

impl Runner {
    pub(super) fn new(
        spec: RunSpec,
        settings: &Settings,
        nodes: &Nodes,
    ) -> Result<Runner, SimError> {
        if let Some(disk) = spec.disk {
            return Ok(Runner {
                spec,
                lanes: Vec::new(),
                ring: None,
                tiers: Some(TwoTier::new(
                    spec.policy,
                    spec.eviction,
                    spec.store,
                    spec.capacity,
                    disk,
                    settings,
                )?),
                busy: Duration::ZERO,
                last_time: Duration::ZERO,
            });
        }
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
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Runner {
            spec,
            lanes,
            ring: (n > 1).then(|| Ring::new(n)),
            tiers: None,
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
        let lane = match &self.ring {
            Some(ring) => &mut self.lanes[ring.node_of(r.key)],
            None => &mut self.lanes[0],
        };
        lane.step(&access, r.time);
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
            requests_per_sec: c.requests as f64 / self.busy.as_secs_f64().max(1e-9),
            per_node,
            disk,
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
