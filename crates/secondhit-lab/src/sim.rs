//! Offline replay: a trace through every combination of admission policy, eviction and cache
//! size, with the admission clock driven by the trace's timestamps.
//!
//! Each run is one [`Lane`] (policy + store, from `secondhit-store`), a cluster of lanes on a
//! consistent-hash [`Ring`] (`ring.rs`, `--nodes`), or memory above flash ([`TwoTier`],
//! `tiers.rs`, `--disk-capacity`). `options.rs` says what to simulate and checks it,
//! `runner.rs` steps one run and gathers its figures; `report.rs` renders the results and
//! `plot.rs` draws them.
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

mod options;
mod plot;
mod report;
mod ring;
mod runner;
mod shield;
mod tiers;

pub use options::{Capacities, Options};
pub use plot::{plot_distances, plot_svg, PlotError};
pub use report::{Answer, Pick};
pub use ring::{NodeCapacity, NodeResult, Nodes, Ring, POINTS_PER_NODE};
pub use runner::{RunResult, RunSpec};
pub use secondhit_store::{Counts, Lane, Step, WriteBudget};
pub use shield::{ShieldOptions, ShieldResult};
pub use tiers::{DiskOptions, DiskResult, DiskSpec, TierCounts, TwoTier};

/// What `serve` charges a stored object beside its body (`simulate --object-cost serve`):
/// its key, its header fields and its bookkeeping (moka's entry, the object's struct, the
/// allocations). Measured, not guessed: `serve --policy admit-all` in front of `secondhit
/// origin`, the bundled trace's first 5,000 requests at concurrency 1, the cache's weighted
/// bytes less the stored bodies, over its 3,430 entries: 1,229 bytes (tests/agreement.rs
/// re-measures it on every run and holds this constant to it). An origin that sends more header
/// bytes, or longer URLs, costs more: give `--object-cost` in bytes for those (docs/lab.md).
pub const OBJECT_COST_SERVE: u64 = 1229;

use crate::admission::{PolicyError, Settings};
use crate::store::Eviction;
use crate::trace::convert::{carried_next_accesses, next_accesses};
use crate::trace::slices::Slices;
use crate::trace::stats::{self, Collector, TraceStats};
use crate::trace::{Request, Source, TraceError};
use runner::Runner;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::ScopedJoinHandle;
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
    /// A shield tier asked with what it does not support (the message names the option).
    #[error("{0}")]
    Shield(String),
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
    /// Bytes each stored object weighed beside its body ([`Options::object_cost`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub object_cost: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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

/// Requests in each chunk the reader sends the workers.
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
    let passes = Passes::new(source, options, progress);
    let mut settings = options.settings;
    if options.auto_expected_items {
        let keys = passes.keys_per_window(settings.window)?;
        settings.expected_items = Settings::expected_items_for(keys);
    }
    let first_pass = passes.working_set()?;
    let capacities = capacities(options, first_pass.as_ref())?;
    let disk = sampled_disk(options)?;
    let runners = specs(&capacities, options, disk.as_ref())
        .iter()
        .map(|s| {
            Runner::new(
                *s,
                &settings,
                &options.nodes,
                options.shield.as_ref(),
                options.decompose,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let future = passes.next_accesses()?;

    let total = first_pass.as_ref().map(|s| s.requests).or_else(|| {
        let known = source.request_count_hint()?;
        Some(options.limit.map_or(known, |l| l.min(known)))
    });
    progress.begin("simulating", total);
    let (mut results, summary, admission_state) =
        passes.simulate(runners, future, first_pass.is_none())?;
    progress.end();
    let summary = match (first_pass, summary) {
        (Some(s), _) | (None, Some(s)) => s,
        (None, None) => Collector::default().finish(),
    };
    if let Some(rate) = options.sample {
        let total = passes.unsampled.load(Relaxed);
        for r in &mut results {
            r.hit_ratio = shards_adjusted(r.hits, r.requests, total, rate);
        }
    }
    let mut report = Report {
        trace: source.name(),
        format: source.format_name(),
        summary,
        settings: SettingsReport::of(&settings, options),
        results,
        wall_secs: started.elapsed().as_secs_f64(),
        answers: Vec::new(),
        admission_state,
    };
    report.answers = report.answers();
    Ok(report)
}

impl SettingsReport {
    fn of(settings: &Settings, options: &Options) -> SettingsReport {
        SettingsReport {
            window: secondhit_proxy::units::duration(settings.window),
            expected_items: settings.expected_items,
            fpr: settings.fpr,
            layout: settings.layout.to_string(),
            store: options.store.to_string(),
            sample: options.sample,
            nodes: (options.nodes.count > 1).then_some(options.nodes.count),
            node_capacity: (options.nodes.count > 1).then_some(options.nodes.capacity),
            object_cost: options.object_cost,
        }
    }
}

/// Each run's cache size in bytes, with the working-set fraction it came from (`first_pass`
/// holds the working set when sizes are fractions of it).
fn capacities(
    options: &Options,
    first_pass: Option<&TraceStats>,
) -> Result<Vec<(u64, Option<f64>)>, SimError> {
    let rate = options.sample;
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
            let ws = first_pass.map_or(0, |s| s.working_set_bytes);
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
    Ok(capacities)
}

/// The flash tier as asked; a sampled trace's flash is as much smaller, and so is its write
/// budget.
fn sampled_disk(options: &Options) -> Result<Option<DiskOptions>, SimError> {
    match (options.disk.clone(), options.sample) {
        (Some(mut d), Some(rate)) => {
            for c in &mut d.capacities {
                let scaled = (*c as f64 * rate) as u64;
                if scaled == 0 {
                    return Err(SimError::SampledToNothing { capacity: *c, rate });
                }
                *c = scaled;
            }
            d.write_rate = d.write_rate.map(|w| ((w as f64 * rate) as u64).max(1));
            Ok(Some(d))
        }
        (d, _) => Ok(d),
    }
}

/// Every run of the sweep in the report's order: by size, then eviction, then policy (then, with
/// a flash tier, by flash size and flash policy).
fn specs(
    capacities: &[(u64, Option<f64>)],
    options: &Options,
    disk: Option<&DiskOptions>,
) -> Vec<RunSpec> {
    let mut specs = Vec::new();
    for &(capacity, fraction) in capacities {
        for &eviction in &options.evictions {
            for &policy in &options.policies {
                let spec = RunSpec {
                    policy,
                    eviction,
                    store: options.store,
                    capacity,
                    fraction,
                    disk: None,
                    object_cost: options.object_cost,
                    stale_keep: options.stale_keep,
                };
                let Some(d) = disk else {
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
                                block_size: d.block_size,
                            }),
                            ..spec
                        });
                    }
                }
            }
        }
    }
    specs
}

/// A worker's runs, each with its index in the sweep to restore the order.
type Group = Vec<(usize, Runner)>;

/// The runs dealt round-robin to `threads` workers (0: one per core), no more workers than
/// runs.
fn deal(runners: Vec<Runner>, threads: usize) -> Vec<Group> {
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .clamp(1, runners.len().max(1));
    let mut groups: Vec<Group> = (0..threads).map(|_| Vec::new()).collect();
    for (i, r) in runners.into_iter().enumerate() {
        groups[i % threads].push((i, r));
    }
    groups
}

/// A worker: steps each of its runs through every chunk as it arrives (`future`: each request's
/// next access, from the trace's first), and hands the runs back when the chunks end.
fn work(
    mut group: Group,
    chunks: Receiver<Arc<Vec<Request>>>,
    future: Option<Arc<Vec<u64>>>,
) -> Group {
    let mut start = 0u64;
    for chunk in chunks {
        let next = future.as_deref().map(|f| {
            let from = usize::try_from(start).unwrap_or(usize::MAX).min(f.len());
            &f[from..]
        });
        for (_, run) in group.iter_mut() {
            run.step_chunk(&chunk, start, next);
        }
        start += chunk.len() as u64;
    }
    group
}

/// The workers' runs finished, in the sweep's order, and with `keep_state` the (one) run's
/// admission state. A worker that panicked is reported as such.
fn join_workers(
    handles: Vec<ScopedJoinHandle<'_, Group>>,
    keep_state: bool,
) -> Result<(Vec<RunResult>, Option<Vec<u8>>), SimError> {
    let mut done: Vec<(usize, RunResult)> = Vec::new();
    let mut state = None;
    for h in handles {
        let group = h.join().map_err(|p| SimError::Panicked {
            thread: "simulation worker",
            message: panic_message(p),
        })?;
        for (i, r) in group {
            if keep_state {
                state = r.admission_state();
            }
            done.push((i, r.finish()));
        }
    }
    done.sort_by_key(|(i, _)| *i);
    Ok((done.into_iter().map(|(_, r)| r).collect(), state))
}

/// What the simulating pass gives: the results in the sweep's order, the trace summary when that
/// pass collected it, and the admission state kept.
type Simulated = (Vec<RunResult>, Option<TraceStats>, Option<Vec<u8>>);

/// One of two iterators of the same items (the trace whole, or cut into slices).
enum Either<A, B> {
    Whole(A),
    Sliced(B),
}

impl<T, A: Iterator<Item = T>, B: Iterator<Item = T>> Iterator for Either<A, B> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        match self {
            Either::Whole(a) => a.next(),
            Either::Sliced(b) => b.next(),
        }
    }
}

/// The passes of one simulation over its trace: each opens it afresh, limited and sampled as the
/// options say.
struct Passes<'a> {
    source: &'a Source,
    options: &'a Options,
    progress: &'a dyn Progress,
    /// The requests each pass takes ([`Options::limit`]).
    limit: usize,
    /// Requests read before sampling, for SHARDS' adjustment (counted afresh by each pass).
    unsampled: AtomicU64,
}

impl<'a> Passes<'a> {
    fn new(source: &'a Source, options: &'a Options, progress: &'a dyn Progress) -> Self {
        Passes {
            source,
            options,
            progress,
            limit: options
                .limit
                .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX)),
            unsampled: AtomicU64::new(0),
        }
    }

    /// The trace from its start: its first `limit` requests, of those only the sampled ones,
    /// each cut into the slices it covers when slicing.
    fn open(&self) -> Result<impl Iterator<Item = Result<Request, TraceError>> + '_, TraceError> {
        let (limit, rate, unsampled) = (self.limit, self.options.sample, &self.unsampled);
        unsampled.store(0, Relaxed);
        let slice_size = self.options.slice_size;
        self.source.open().map(move |r| {
            let kept = r.take(limit).filter(move |r| match (rate, r) {
                (Some(rate), Ok(r)) => {
                    unsampled.fetch_add(1, Relaxed);
                    sampled(r.key, rate)
                }
                _ => true,
            });
            match slice_size {
                Some(size) => Either::Sliced(Slices::new(kept, size)),
                None => Either::Whole(kept),
            }
        })
    }

    /// [`Passes::open`] for a pass named `pass`, whose progress advances every 65,536 requests;
    /// the caller ends it.
    fn open_counted(
        &self,
        pass: &str,
    ) -> Result<impl Iterator<Item = Result<Request, TraceError>> + '_, TraceError> {
        self.progress.begin(pass, None);
        let progress = self.progress;
        let mut n = 0u64;
        Ok(self.open()?.inspect(move |_| {
            n += 1;
            if n % 65_536 == 0 {
                progress.advance(65_536);
            }
        }))
    }

    /// `--expected-items auto`: the most distinct keys any window of `window` holds.
    fn keys_per_window(&self, window: Option<Duration>) -> Result<u64, SimError> {
        let keys = max_keys_per_window(self.open_counted("counting keys per window")?, window)?;
        self.progress.end();
        Ok(keys)
    }

    /// The trace's summary, in a first pass of its own only when capacities depend on the working
    /// set.
    fn working_set(&self) -> Result<Option<TraceStats>, SimError> {
        match &self.options.capacities {
            Capacities::Fractions(_) => {
                let progress = self.progress;
                progress.begin("reading trace", None);
                let summary =
                    stats::collect_with_progress(self.open()?, |n| progress.advance(n), |_| {})?;
                progress.end();
                Ok(Some(summary))
            }
            Capacities::Bytes(_) => Ok(None),
        }
    }

    /// Each request's next access, when an eviction needs it.
    fn next_accesses(&self) -> Result<Option<Arc<Vec<u64>>>, SimError> {
        let options = self.options;
        if !options.evictions.iter().any(|e| e.needs_future()) {
            return Ok(None);
        }
        // Belady's policies read each request's next access: an oracleGeneral file may carry them
        // (read as libCacheSim does, when consistent); otherwise one more pass computes them all.
        let carried = match (self.source.path(), options.sample, options.slice_size) {
            (Some(path), None, None) if self.source.format_name() == "oracle-general" => {
                carried_next_accesses(path, options.limit.unwrap_or(u64::MAX))?
            }
            _ => None,
        };
        if let Some(next) = carried {
            return Ok(Some(Arc::new(next)));
        }
        let next = next_accesses(self.open_counted("finding next accesses")?)?;
        self.progress.end();
        Ok(Some(Arc::new(next)))
    }

    /// The simulating pass: the runs dealt to worker threads, every chunk of the trace sent to
    /// each of them (and, with `collect_summary`, to a thread summarizing the trace).
    fn simulate(
        &self,
        runners: Vec<Runner>,
        future: Option<Arc<Vec<u64>>>,
        collect_summary: bool,
    ) -> Result<Simulated, SimError> {
        let groups = deal(runners, self.options.threads);
        std::thread::scope(|scope| -> Result<_, SimError> {
            let mut senders = Vec::new();
            let mut handles = Vec::new();
            for group in groups {
                let (tx, rx) = sync_channel::<Arc<Vec<Request>>>(4);
                senders.push(tx);
                let future = future.clone();
                handles.push(scope.spawn(move || work(group, rx, future)));
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
            let failure = self.feed(&senders)?;
            drop(senders);
            let (results, state) = join_workers(handles, self.options.keep_state)?;
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
            Ok((results, summary, state))
        })
    }

    /// Reads the trace once and sends it to every consumer in chunks of [`CHUNK`] requests. A
    /// request that cannot be read ends the reading (the chunk it was in is not sent) and is
    /// returned, to report once the consumers are done; a trace that cannot be opened is an
    /// error at once.
    fn feed(
        &self,
        senders: &[SyncSender<Arc<Vec<Request>>>],
    ) -> Result<Option<TraceError>, TraceError> {
        let mut chunk = Vec::with_capacity(CHUNK);
        for r in self.open()? {
            match r {
                Ok(r) => {
                    chunk.push(r);
                    if chunk.len() == CHUNK {
                        let full =
                            Arc::new(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)));
                        for tx in senders {
                            // A worker only stops early by panicking, which join reports.
                            let _ = tx.send(full.clone());
                        }
                        self.progress.advance(CHUNK as u64);
                    }
                }
                Err(e) => return Ok(Some(e)),
            }
        }
        if !chunk.is_empty() {
            let n = chunk.len() as u64;
            let last = Arc::new(chunk);
            for tx in senders {
                let _ = tx.send(last.clone());
            }
            self.progress.advance(n);
        }
        Ok(None)
    }
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
                range: None,
                recorded: None,
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
