//! Offline replay: a trace through every combination of admission policy, eviction and cache
//! size, with the admission clock driven by the trace's timestamps.
//!
//! Each run is one [`Lane`] (policy + store, `lane.rs`), a cluster of lanes on a consistent-hash
//! [`Ring`] (`ring.rs`, `--nodes`), or memory above flash ([`TwoTier`], `tiers.rs`,
//! `--disk-capacity`); `report.rs` renders the results and `plot.rs` draws them.
//!
//! The same [`admission`](crate::admission) code as the proxy decides every miss; the store is
//! the exact LRU (default) or the proxy's moka store. One reader thread streams the trace in
//! chunks to one worker per core; each worker owns some of the runs. Each run is single-threaded
//! and deterministic: the same trace, options and seed give the same numbers on every run,
//! whatever the thread count.
//!
//! Semantics (as libCacheSim and webcachesim): capacity in bytes (size-1 traces: objects); an
//! object larger than the capacity is never stored; a hit does not change the stored size; byte
//! hits count the current request's size.

mod plot;
mod report;
mod ring;
mod tiers;

pub use plot::{plot_svg, PlotError};
pub use report::{Answer, Pick};
pub use ring::{NodeCapacity, NodeResult, Nodes, Ring, POINTS_PER_NODE};
pub use secondhit_store::{Counts, Lane, Step, WriteBudget};
pub use tiers::{DiskOptions, DiskResult, DiskSpec, TierCounts, TwoTier};

use crate::admission::{Policy, PolicyError, Settings};
use crate::store::{Access, Eviction, StoreKind};
use crate::trace::stats::{self, Collector, TraceStats};
use crate::trace::{Request, Source, TraceError};
use serde::Serialize;
use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Reading the trace failed.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A policy could not be built.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// No policy given.
    #[error("no policy given")]
    NoPolicy,
    /// No eviction policy given.
    #[error("no eviction policy given")]
    NoEviction,
    /// `tinylfu` asked of the exact store.
    #[error("eviction tinylfu exists only in the moka store: add --store moka, or use lru")]
    TinyLfuNeedsMoka,
    /// An eviction moka does not have asked of the moka store.
    #[error("eviction {0} exists only in the exact store: leave out --store moka (moka has lru and tinylfu)")]
    NeedsExactStore(Eviction),
    /// No capacity given.
    #[error("no capacity given")]
    NoCapacity,
    /// `--sample` shrank a cache to nothing.
    #[error(
        "--sample {rate} makes a cache of {capacity} bytes 0 bytes: give a larger rate or size"
    )]
    SampledToNothing {
        /// The capacity asked for.
        capacity: u64,
        /// The rate.
        rate: f64,
    },
    /// A sampling rate outside (0, 1].
    #[error("sampling rate {0} must be a fraction in (0, 1], e.g. 0.01")]
    BadSample(f64),
    /// A capacity fraction that is not a positive number.
    #[error("capacity fraction {0} must be a positive fraction of the working set, e.g. 0.05")]
    BadFraction(f64),
    /// `keep_state` (`--save-state`) with more than one run.
    #[error("--save-state keeps one filter: give one policy, one eviction and one size (this is {0} runs)")]
    SaveStateNeedsOneRun(usize),
    /// `--nodes 0`.
    #[error("--nodes must be at least 1")]
    NoNodes,
    /// A memory tier above flash whose eviction cannot hand its evictions down.
    #[error("with --disk-capacity, memory evicts by lru or fifo (or --store moka: lru, tinylfu), the stores that hand evictions down to flash, not {0}")]
    MemoryTierEviction(Eviction),
    /// A flash tier asked with what it does not support (the message names the option).
    #[error("{0}")]
    Disk(String),
    /// `keep_state` (`--save-state`) with more than one node.
    #[error(
        "--save-state keeps one filter: a cluster of {0} nodes has one per node; leave out --nodes"
    )]
    SaveStateNeedsOneNode(usize),
    /// A capacity that leaves a node nothing.
    #[error("a cache of {capacity} bytes split over {nodes} nodes leaves each 0 bytes: give a larger size, or --node-capacity each")]
    NodeCapacityZero {
        /// The cluster's capacity.
        capacity: u64,
        /// The nodes.
        nodes: usize,
    },
    /// A worker thread panicked: a bug, reported with where it happened.
    #[error("the {thread} panicked: {message}")]
    Panicked {
        /// Which thread.
        thread: &'static str,
        /// The panic's message.
        message: String,
    },
}

impl From<secondhit_store::LaneError> for SimError {
    fn from(e: secondhit_store::LaneError) -> SimError {
        match e {
            secondhit_store::LaneError::Policy(e) => SimError::Policy(e),
            secondhit_store::LaneError::TinyLfuNeedsMoka => SimError::TinyLfuNeedsMoka,
        }
    }
}

/// The message of a panic payload (as `std::thread::JoinHandle::join` and tokio's
/// `JoinError::into_panic` return it).
pub fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(p) => p
            .downcast_ref::<&str>()
            .map_or_else(|| "(no message)".to_string(), |s| s.to_string()),
    }
}

/// Cache sizes: absolute, or fractions of the trace's working set.
#[derive(Clone, Debug, PartialEq)]
pub enum Capacities {
    /// Bytes (objects, for traces without sizes).
    Bytes(Vec<u64>),
    /// Fractions of the working set: `floor(F x working set)`.
    Fractions(Vec<f64>),
}

/// What to simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Admission policies.
    pub policies: Vec<Policy>,
    /// Eviction policies (`tinylfu` needs the moka store).
    pub evictions: Vec<Eviction>,
    /// The store.
    pub store: StoreKind,
    /// Cache sizes.
    pub capacities: Capacities,
    /// Filter settings of the windowed policies.
    pub settings: Settings,
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// Replay only the first N requests of the trace.
    pub limit: Option<u64>,
    /// Keep the admission policy's state at the end (one run only), for `--save-state`: a filter
    /// warmed from a trace, in the format `serve --state-dir` loads.
    pub keep_state: bool,
    /// Size the filters from the trace (`--expected-items auto`): a pass first counts the
    /// distinct keys of each window, and `settings.expected_items` becomes what the busiest one
    /// needs ([`Settings::expected_items_for`]).
    pub auto_expected_items: bool,
    /// SHARDS-style spatial sampling (Waldspurger et al., FAST 2015): keep only the requests
    /// whose key hashes below this fraction of the hash space, and simulate caches that much
    /// smaller. Ratios estimate the full trace's; counts and sizes are the sample's.
    pub sample: Option<f64>,
    /// A cluster of nodes behind a consistent-hash balancer ([`Ring`]): each run is that many
    /// caches, each key on one of them. Default: one cache.
    pub nodes: Nodes,
    /// A flash tier below memory ([`TwoTier`]): each run is then every memory run above every
    /// flash size and policy. Default: memory only.
    pub disk: Option<DiskOptions>,
}

impl Default for Options {
    /// `serve`'s defaults for policy settings and eviction; admit-all, second-hit and
    /// second-hit-exact at 1 %, 5 % and 10 % of the working set on the exact store.
    fn default() -> Self {
        Options {
            policies: vec![Policy::AdmitAll, Policy::SecondHit, Policy::SecondHitExact],
            evictions: vec![Eviction::Lru],
            store: StoreKind::Exact,
            capacities: Capacities::Fractions(vec![0.01, 0.05, 0.10]),
            settings: Settings::default(),
            threads: 0,
            limit: None,
            keep_state: false,
            auto_expected_items: false,
            sample: None,
            nodes: Nodes::default(),
            disk: None,
        }
    }
}

/// The most distinct keys any window of `window` holds in `requests` (windows on a grid from the
/// first request; `None`: the whole trace is one window).
pub fn max_keys_per_window(
    requests: impl Iterator<Item = Result<Request, TraceError>>,
    window: Option<Duration>,
) -> Result<u64, TraceError> {
    let mut seen = std::collections::HashSet::new();
    let mut most = 0u64;
    let mut grid: Option<(Duration, u64)> = None;
    for r in requests {
        let r = r?;
        if let Some(w) = window.filter(|w| !w.is_zero()) {
            let (start, index) = *grid.get_or_insert((r.time, 0));
            let now = (r.time.saturating_sub(start).as_nanos() / w.as_nanos()) as u64;
            if now != index {
                most = most.max(seen.len() as u64);
                seen.clear();
                grid = Some((start, now));
            }
        }
        seen.insert(r.key.raw());
    }
    Ok(most.max(seen.len() as u64))
}

impl Options {
    /// Checks the options, naming what is wrong.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.policies.is_empty() {
            return Err(SimError::NoPolicy);
        }
        if self.evictions.is_empty() {
            return Err(SimError::NoEviction);
        }
        for &e in &self.evictions {
            match self.store {
                StoreKind::Exact if !e.is_exact() => return Err(SimError::TinyLfuNeedsMoka),
                StoreKind::Moka if !e.is_moka() => return Err(SimError::NeedsExactStore(e)),
                _ => {}
            }
        }
        match &self.capacities {
            Capacities::Bytes(v) if v.is_empty() => return Err(SimError::NoCapacity),
            Capacities::Fractions(v) if v.is_empty() => return Err(SimError::NoCapacity),
            Capacities::Fractions(v) => {
                if let Some(f) = v.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
                    return Err(SimError::BadFraction(*f));
                }
            }
            Capacities::Bytes(_) => {}
        }
        if let Some(r) = self
            .sample
            .filter(|r| !(r.is_finite() && *r > 0.0 && *r <= 1.0))
        {
            return Err(SimError::BadSample(r));
        }
        for p in &self.policies {
            self.settings.build(*p)?;
        }
        let sizes = match &self.capacities {
            Capacities::Bytes(v) => v.len(),
            Capacities::Fractions(v) => v.len(),
        };
        let runs = self.policies.len() * self.evictions.len() * sizes;
        if self.keep_state && runs != 1 {
            return Err(SimError::SaveStateNeedsOneRun(runs));
        }
        if self.nodes.count == 0 {
            return Err(SimError::NoNodes);
        }
        if self.keep_state && self.nodes.count > 1 {
            return Err(SimError::SaveStateNeedsOneNode(self.nodes.count));
        }
        if let Some(d) = &self.disk {
            let refuse = |m: &str| Err(SimError::Disk(m.to_string()));
            if d.capacities.is_empty() || d.capacities.contains(&0) {
                return refuse("--disk-capacity: give the flash sizes, each more than 0 bytes");
            }
            if d.policies.is_empty() {
                return refuse("--disk-policy: give at least one");
            }
            if !tiers::FLASH_EVICTIONS.contains(&d.eviction) {
                return refuse(&format!(
                    "--disk-eviction {}: flash evicts by {}",
                    d.eviction,
                    tiers::FLASH_EVICTIONS.map(|e| e.as_str()).join(", ")
                ));
            }
            if d.write_rate == Some(0) {
                return refuse("--disk-write-rate must be more than 0 bytes a second");
            }
            if self.nodes.count > 1 {
                return refuse("--disk-capacity: not with --nodes (one cache of two tiers)");
            }
            if self.keep_state {
                return refuse("--disk-capacity: not with --save-state");
            }
            if let Some(&e) = self.evictions.iter().find(|e| {
                self.store == StoreKind::Exact && !matches!(e, Eviction::Lru | Eviction::Fifo)
            }) {
                return Err(SimError::MemoryTierEviction(e));
            }
            for p in &d.policies {
                self.settings
                    .build(*p)
                    .map_err(|e| SimError::Disk(format!("--disk-policy {p}: {e}")))?;
            }
        }
        Ok(())
    }
}

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
    /// `hits / requests`; with sampling ([`Options::sample`]), the SHARDS-adjusted estimate of
    /// the whole trace's ([`shards_adjusted`]).
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
    /// With [`Options::nodes`] above one: each node's figures, node 0 first (the fields above
    /// are the cluster's totals; `capacity_bytes` is the run's, which each node has a share of
    /// with `split` and the whole of with `each`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_node: Vec<NodeResult>,
    /// With [`Options::disk`]: the flash tier's figures (the fields above are both tiers'
    /// together; `admissions` are memory's writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskResult>,
}

struct Runner {
    spec: RunSpec,
    /// One lane per node ([`Options::nodes`]); one for a single cache.
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
    fn new(spec: RunSpec, settings: &Settings, nodes: &Nodes) -> Result<Runner, SimError> {
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

    fn finish(self) -> RunResult {
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        // Both kinds of run come down to one set of totals and the policies' rotation figures.
        let mut c = Counts::default();
        let (mut rotations, mut on_count, mut per_window) = (0, 0, 0);
        let mut add_stats = |stats: crate::admission::Stats| {
            rotations += stats.rotations;
            on_count += stats.rotations_on_count;
            per_window = per_window.max(stats.keys_per_window);
        };
        let mut disk = None;
        if let (Some(t), Some(spec)) = (&self.tiers, self.spec.disk) {
            let tc = t.counts();
            c = Counts {
                requests: tc.requests,
                requested_bytes: tc.requested_bytes,
                hits: tc.memory_hits + tc.disk_hits,
                hit_bytes: tc.memory_hit_bytes + tc.disk_hit_bytes,
                admissions: tc.memory_writes,
                admitted_bytes: tc.memory_write_bytes,
                ..Counts::default()
            };
            add_stats(t.memory_policy().stats());
            let flash = t.disk_policy().stats();
            disk = Some(DiskResult {
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
            });
        }
        for lane in &self.lanes {
            c.add(lane.counts());
            add_stats(lane.admission().stats());
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
            rotations,
            rotations_on_count: on_count,
            keys_per_window: per_window,
            approx_extra_admissions: approx.then_some(c.extra),
            approx_missed_admissions: approx.then_some(c.missed),
            requests_per_sec: c.requests as f64 / self.busy.as_secs_f64().max(1e-9),
            per_node,
            disk,
        }
    }
}

/// Progress reporting for long runs (the command line shows a bar; the library shows nothing).
pub trait Progress: Sync {
    /// A pass over the trace begins; `total` requests if known.
    fn begin(&self, _pass: &str, _total: Option<u64>) {}
    /// `n` more requests read.
    fn advance(&self, _n: u64) {}
    /// The pass is over.
    fn end(&self) {}
}

/// Reports nothing.
pub struct Quiet;
impl Progress for Quiet {}

/// A simulation's output: the trace summary, the settings, and one result per run.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Report {
    /// The trace's name as given.
    pub trace: String,
    /// Its format.
    pub format: String,
    /// The trace summary (`requests`, `objects`, `one_hit_wonder_ratio`, `working_set_bytes`,
    /// ...), flattened into the top level of the JSON object.
    #[serde(flatten)]
    pub summary: TraceStats,
    /// The filter settings every windowed policy used.
    pub settings: SettingsReport,
    /// One entry per (capacity, eviction, policy), in that order.
    pub results: Vec<RunResult>,
    /// Wall time of the whole simulation, trace reading included, in seconds.
    pub wall_secs: f64,
    /// The best pairs per size and the offline bound ([`Report::answers`]); filled by [`run`]
    /// (and by a merge), read back from JSON.
    #[serde(default)]
    pub answers: Vec<Answer>,
    /// With [`Options::keep_state`]: the run's admission state, as `serve --state-dir` loads it
    /// (`None` for a policy that keeps none).
    #[serde(skip)]
    pub admission_state: Option<Vec<u8>>,
}

/// The filter settings, for the report.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct SettingsReport {
    /// Window, e.g. `1h`, or `inf`.
    pub window: String,
    /// Distinct keys per generation.
    pub expected_items: u64,
    /// Target false-positive rate per generation.
    pub fpr: f64,
    /// Filter layout.
    pub layout: String,
    /// Store.
    pub store: String,
    /// The spatial sampling rate, when the run sampled ([`Options::sample`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<f64>,
    /// The simulated cluster's nodes, when more than one ([`Options::nodes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<usize>,
    /// How they shared each capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_capacity: Option<NodeCapacity>,
}

/// Whether a request's key falls in the sampled share `rate` of the hash space (the high 64 bits
/// of its uniform 128-bit hash below `rate x 2^64`).
pub fn sampled(key: crate::KeyHash, rate: f64) -> bool {
    rate >= 1.0 || ((key.raw() >> 64) as u64) < (rate * 18_446_744_073_709_551_616.0) as u64
}

/// SHARDS-adj (Waldspurger et al., FAST 2015): a sample of rate `rate` should hold
/// `rate x total` requests; the difference from the `requests` it holds comes mostly from the
/// hottest keys falling in or out of it, so it is counted as hits (or misses) before the ratio.
pub fn shards_adjusted(hits: u64, requests: u64, total: u64, rate: f64) -> f64 {
    let expected = rate * total as f64;
    if expected <= 0.0 {
        return 0.0;
    }
    ((hits as f64 + expected - requests as f64).clamp(0.0, expected)) / expected
}

const CHUNK: usize = 1 << 14;

/// Runs the simulation over `source`: one pass, plus one for the working set when capacities
/// are fractions of it, one for `--expected-items auto`, and one for next accesses when an
/// eviction needs them.
pub fn run(
    source: &Source,
    options: &Options,
    progress: &dyn Progress,
) -> Result<Report, SimError> {
    options.validate()?;
    let started = Instant::now();
    let limit = options
        .limit
        .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let rate = options.sample;
    // Requests read before sampling, for SHARDS' adjustment (counted afresh by each pass).
    let unsampled = std::sync::atomic::AtomicU64::new(0);
    let unsampled = &unsampled;
    let open = move || {
        unsampled.store(0, std::sync::atomic::Ordering::Relaxed);
        source.open().map(move |r| {
            r.take(limit).filter(move |r| match (rate, r) {
                (Some(rate), Ok(r)) => {
                    unsampled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    sampled(r.key, rate)
                }
                _ => true,
            })
        })
    };
    let mut settings = options.settings;
    if options.auto_expected_items {
        progress.begin("counting keys per window", None);
        let mut n = 0u64;
        let counted = open()?.inspect(|_| {
            n += 1;
            if n % 65_536 == 0 {
                progress.advance(65_536);
            }
        });
        let keys = max_keys_per_window(counted, settings.window)?;
        progress.end();
        settings.expected_items = Settings::expected_items_for(keys);
    }
    // A first pass only when capacities depend on the working set.
    let first_pass = match &options.capacities {
        Capacities::Fractions(_) => {
            progress.begin("reading trace", None);
            let summary = stats::collect_with_progress(open()?, |n| progress.advance(n))?;
            progress.end();
            Some(summary)
        }
        Capacities::Bytes(_) => None,
    };
    let capacities: Vec<(u64, Option<f64>)> = match &options.capacities {
        // A sampled trace is simulated in a cache as much smaller (fractions follow by themselves:
        // the working set is the sample's).
        Capacities::Bytes(v) => {
            let scaled: Vec<(u64, Option<f64>)> = v
                .iter()
                .map(|&b| ((b as f64 * rate.unwrap_or(1.0)) as u64, None))
                .collect();
            if let Some((i, _)) = scaled.iter().enumerate().find(|(_, (c, _))| *c == 0) {
                return Err(SimError::SampledToNothing {
                    capacity: v[i],
                    rate: rate.unwrap_or(1.0),
                });
            }
            scaled
        }
        Capacities::Fractions(v) => {
            let ws = first_pass.as_ref().map_or(0, |s| s.working_set_bytes);
            v.iter()
                .map(|&f| (((f * ws as f64).floor() as u64), Some(f)))
                .collect()
        }
    };
    if let Some(&(capacity, _)) = capacities
        .iter()
        .find(|(c, _)| options.nodes.count > 1 && options.nodes.node_capacity(*c) == 0)
    {
        return Err(SimError::NodeCapacityZero {
            capacity,
            nodes: options.nodes.count,
        });
    }
    // A sampled trace's flash is as much smaller, and so is its write budget.
    let disk = match (options.disk.clone(), rate) {
        (Some(mut d), Some(rate)) => {
            for c in &mut d.capacities {
                let scaled = (*c as f64 * rate) as u64;
                if scaled == 0 {
                    return Err(SimError::SampledToNothing { capacity: *c, rate });
                }
                *c = scaled;
            }
            d.write_rate = d.write_rate.map(|w| ((w as f64 * rate) as u64).max(1));
            Some(d)
        }
        (d, _) => d,
    };
    let mut specs = Vec::new();
    for &(capacity, fraction) in &capacities {
        for &eviction in &options.evictions {
            for &policy in &options.policies {
                let spec = RunSpec {
                    policy,
                    eviction,
                    store: options.store,
                    capacity,
                    fraction,
                    disk: None,
                };
                let Some(d) = &disk else {
                    specs.push(spec);
                    continue;
                };
                for &disk_capacity in &d.capacities {
                    for &disk_policy in &d.policies {
                        specs.push(RunSpec {
                            disk: Some(DiskSpec {
                                capacity: disk_capacity,
                                policy: disk_policy,
                                eviction: d.eviction,
                                write_rate: d.write_rate,
                            }),
                            ..spec
                        });
                    }
                }
            }
        }
    }
    let runners = specs
        .iter()
        .map(|s| Runner::new(*s, &settings, &options.nodes))
        .collect::<Result<Vec<_>, _>>()?;
    // Belady's policies read each request's next access: an oracleGeneral file may carry them
    // (read as libCacheSim does, when consistent); otherwise one more pass computes them all.
    let carried = match (source.path(), rate) {
        (Some(path), None)
            if source.format_name() == "oracle-general"
                && options.evictions.iter().any(|e| e.needs_future()) =>
        {
            crate::trace::convert::carried_next_accesses(path, options.limit.unwrap_or(u64::MAX))?
        }
        _ => None,
    };
    let future: Option<Arc<Vec<u64>>> = if let Some(next) = carried {
        Some(Arc::new(next))
    } else if options.evictions.iter().any(|e| e.needs_future()) {
        progress.begin("finding next accesses", None);
        let mut n = 0u64;
        let counted = open()?.inspect(|_| {
            n += 1;
            if n % 65_536 == 0 {
                progress.advance(65_536);
            }
        });
        let next = crate::trace::convert::next_accesses(counted)?;
        progress.end();
        Some(Arc::new(next))
    } else {
        None
    };

    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .clamp(1, runners.len().max(1));
    // Round-robin runs over workers; remember each run's index to restore the order.
    let mut groups: Vec<Vec<(usize, Runner)>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, r) in runners.into_iter().enumerate() {
        groups[i % threads].push((i, r));
    }

    let total = first_pass.as_ref().map(|s| s.requests).or_else(|| {
        let known = source.request_count_hint()?;
        Some(options.limit.map_or(known, |l| l.min(known)))
    });
    progress.begin("simulating", total);
    let collect_summary = first_pass.is_none();
    let (results, summary, admission_state) = std::thread::scope(|scope| -> Result<_, SimError> {
        let mut senders = Vec::new();
        let mut handles = Vec::new();
        for mut group in groups {
            let (tx, rx) = sync_channel::<Arc<Vec<Request>>>(4);
            senders.push(tx);
            let future = future.clone();
            handles.push(scope.spawn(move || {
                let never = crate::trace::convert::NEVER;
                let mut start = 0u64;
                for chunk in rx {
                    let next = future.as_deref().map(|f| {
                        let from = usize::try_from(start).unwrap_or(usize::MAX).min(f.len());
                        &f[from..]
                    });
                    for (_, run) in group.iter_mut() {
                        let t = Instant::now();
                        for (j, r) in chunk.iter().enumerate() {
                            let n = next.and_then(|n| n.get(j).copied()).unwrap_or(never);
                            run.step(r, start + j as u64, n);
                        }
                        run.busy += t.elapsed();
                    }
                    start += chunk.len() as u64;
                }
                group
            }));
        }
        // The summary of a single-pass run is one more consumer of the chunks, on its own
        // thread: its hash map of every object is the most expensive thing here.
        let collector = collect_summary.then(|| {
            let (tx, rx) = sync_channel::<Arc<Vec<Request>>>(4);
            senders.push(tx);
            scope.spawn(move || {
                let mut c = Collector::default();
                for chunk in rx {
                    chunk.iter().for_each(|r| c.add(r));
                }
                c.finish()
            })
        });
        let mut chunk = Vec::with_capacity(CHUNK);
        let mut failure = None;
        for r in open()? {
            match r {
                Ok(r) => {
                    chunk.push(r);
                    if chunk.len() == CHUNK {
                        let full =
                            Arc::new(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)));
                        for tx in &senders {
                            // A worker only stops early by panicking, which join reports.
                            let _ = tx.send(full.clone());
                        }
                        progress.advance(CHUNK as u64);
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if failure.is_none() && !chunk.is_empty() {
            let n = chunk.len() as u64;
            let last = Arc::new(chunk);
            for tx in &senders {
                let _ = tx.send(last.clone());
            }
            progress.advance(n);
        }
        drop(senders);
        let mut done: Vec<(usize, RunResult)> = Vec::new();
        let mut state = None;
        for h in handles {
            let group = h.join().map_err(|p| SimError::Panicked {
                thread: "simulation worker",
                message: panic_message(p),
            })?;
            for (i, r) in group {
                if options.keep_state {
                    state = r.lanes.first().and_then(|l| {
                        l.admission()
                            .snapshot(r.last_time, secondhit_proxy::state::wall_now())
                    });
                }
                done.push((i, r.finish()));
            }
        }
        let summary = match collector {
            Some(h) => Some(h.join().map_err(|p| SimError::Panicked {
                thread: "trace summary thread",
                message: panic_message(p),
            })?),
            None => None,
        };
        if let Some(e) = failure {
            return Err(SimError::Trace(e));
        }
        done.sort_by_key(|(i, _)| *i);
        Ok((
            done.into_iter().map(|(_, r)| r).collect::<Vec<_>>(),
            summary,
            state,
        ))
    })?;
    progress.end();
    let summary = match (first_pass, summary) {
        (Some(s), _) | (None, Some(s)) => s,
        (None, None) => Collector::default().finish(),
    };
    let mut results = results;
    if let Some(rate) = rate {
        let total = unsampled.load(std::sync::atomic::Ordering::Relaxed);
        for r in &mut results {
            r.hit_ratio = shards_adjusted(r.hits, r.requests, total, rate);
        }
    }
    let mut report = Report {
        trace: source.name(),
        format: source.format_name(),
        summary,
        settings: SettingsReport {
            window: secondhit_proxy::units::duration(settings.window),
            expected_items: settings.expected_items,
            fpr: settings.fpr,
            layout: settings.layout.to_string(),
            store: options.store.to_string(),
            sample: options.sample,
            nodes: (options.nodes.count > 1).then_some(options.nodes.count),
            node_capacity: (options.nodes.count > 1).then_some(options.nodes.capacity),
        },
        results,
        wall_secs: started.elapsed().as_secs_f64(),
        answers: Vec::new(),
        admission_state,
    };
    report.answers = report.answers();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyHash;

    #[test]
    fn sampling_keeps_its_share_of_keys_and_adjusts_for_the_difference() {
        let kept = (0..100_000u64)
            .filter(|&k| sampled(KeyHash::of_u64(k), 0.1))
            .count();
        assert!((9_500..10_500).contains(&kept), "{kept}");
        assert!((0..1000u64).all(|k| sampled(KeyHash::of_u64(k), 1.0)));
        // 1,000 requests expected, 900 sampled: the 100 missing count as hits.
        assert_eq!(shards_adjusted(300, 900, 10_000, 0.1), 0.4);
        // More sampled than expected: the excess counts as misses, never below 0.
        assert_eq!(shards_adjusted(300, 1100, 10_000, 0.1), 0.2);
        assert_eq!(shards_adjusted(0, 5000, 10_000, 0.1), 0.0);
    }

    #[test]
    fn keys_are_counted_per_window_on_a_grid_from_the_first_request() {
        let at = |secs: u64, key: u64| {
            Ok(Request {
                time: Duration::from_secs(secs),
                key: KeyHash::of_u64(key),
                size: 1,
                id: key,
            })
        };
        // Windows of 10 s from t = 5: [5, 15) has keys 1, 2; [15, 25) has 1, 2, 3 (3 twice).
        let trace = || {
            vec![
                at(5, 1),
                at(9, 2),
                at(9, 1),
                at(15, 1),
                at(16, 2),
                at(20, 3),
                at(24, 3),
                at(40, 9),
            ]
        };
        let w = Some(Duration::from_secs(10));
        assert_eq!(max_keys_per_window(trace().into_iter(), w).unwrap(), 3);
        // One window for the whole trace: keys 1, 2, 3, 9.
        assert_eq!(max_keys_per_window(trace().into_iter(), None).unwrap(), 4);
    }
}
