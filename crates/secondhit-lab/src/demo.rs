//! `secondhit demo`: the whole mission in one command. Starts `secondhit origin` and
//! `secondhit serve` on free loopback ports, replays a trace through the proxy once per policy,
//! and sets the live figures beside `simulate`'s prediction for the same policy, eviction and
//! capacity. Both sides use an infinite window (the live clock is not the trace's clock).
//!
//! By default the proxy runs as deployed (production weights: key, header fields and
//! bookkeeping count against the capacity) and the prediction weighs objects the same way
//! (`simulate --object-cost serve`, [`OBJECT_COST_SERVE`]): the two agree within a few hundredths
//! of a point (exactly, on the bundled trace at concurrency 1), not by construction, as the real
//! cost of an object differs from the constant by a few bytes. With [`DemoOptions::lab_mode`] the proxy runs in lab mode (body-only weights, the
//! simulator's moka maintenance) and at concurrency 1 the live hit and write counts must equal
//! the prediction.

use crate::admission::{Policy, Settings};
use crate::clock::SystemClock;
use crate::origin_server::{self, OriginOptions};
use crate::replay::{self, ReplayOptions, ReplayReport};
use crate::sim::{self, Capacities, Progress, RunResult, OBJECT_COST_SERVE};
use crate::store::{Eviction, StoreKind};
use crate::trace::stats::{self, TraceStats};
use crate::trace::{Source, TraceError};
use secondhit_proxy::config::{Config, OriginRef, OriginUrl, ValidConfig};
use secondhit_proxy::units;
use serde::Serialize;
use std::fmt::Write as _;
use std::sync::Arc;

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoOptions {
    /// Replay the first N requests of the trace.
    pub requests: u64,
    /// Cache capacity as a fraction of those requests' working set.
    pub capacity_fraction: f64,
    /// Policies, each against a fresh proxy.
    pub policies: Vec<Policy>,
    /// Replay concurrency (1 keeps trace order, and the exact agreement).
    pub concurrency: usize,
    /// Run the proxy in lab mode (`cache.lab_mode`: body-only weights and the simulator's moka
    /// maintenance) and predict with body-only weights: exact agreement at concurrency 1.
    /// Default: production settings, predicted with `--object-cost serve`.
    pub lab_mode: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            requests: 20_000,
            capacity_fraction: 0.05,
            policies: vec![Policy::AdmitAll, Policy::SecondHit],
            concurrency: 1,
            lab_mode: false,
        }
    }
}

/// One policy: live against predicted.
#[derive(Clone, Debug, Serialize)]
pub struct DemoRow {
    /// The policy.
    pub policy: String,
    /// What the live replay measured.
    pub live: ReplayReport,
    /// Objects the live proxy wrote to its cache.
    pub live_writes: u64,
    /// What `simulate --store moka` predicted.
    pub predicted: RunResult,
}

/// The demo's results.
#[derive(Clone, Debug, Serialize)]
pub struct DemoReport {
    /// The trace's name.
    pub trace: String,
    /// The replayed part of the trace.
    pub summary: TraceStats,
    /// Cache capacity in bytes.
    pub capacity_bytes: u64,
    /// Whether the proxy ran in lab mode.
    pub lab_mode: bool,
    /// What the prediction charged each object beside its body (0 in lab mode).
    pub object_cost: u64,
    /// Replay concurrency.
    pub concurrency: usize,
    /// One row per policy.
    pub rows: Vec<DemoRow>,
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The trace.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The synthetic origin could not start.
    #[error("origin: {0}")]
    Origin(#[from] crate::origin_server::OriginServerError),
    /// The proxy's configuration was refused.
    #[error("serve: {0}")]
    Config(#[from] secondhit_proxy::config::ConfigError),
    /// The proxy could not start.
    #[error("serve: {0}")]
    Serve(#[from] secondhit_proxy::server::ServeError),
    /// The live replay failed.
    #[error("replay: {0}")]
    Replay(#[from] crate::replay::ReplayError),
    /// The simulation failed.
    #[error("simulate: {0}")]
    Simulate(#[from] crate::sim::SimError),
    /// The simulation's thread panicked (a bug: the message says where).
    #[error("the simulation panicked: {0}")]
    Panicked(String),
}

/// Loopback, any free port.
const LOOPBACK_ANY: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// Runs the demo over `source`.
pub async fn run(
    source: &Source,
    options: &DemoOptions,
    progress: &dyn Progress,
) -> Result<DemoReport, DemoError> {
    let limit = usize::try_from(options.requests).unwrap_or(usize::MAX);
    let summary = stats::collect(source.open()?.take(limit))?;
    let object_cost = if options.lab_mode {
        0
    } else {
        OBJECT_COST_SERVE
    };
    // A fraction of the working set as the cache weighs it.
    let weighed = summary
        .working_set_bytes
        .saturating_add(summary.objects.saturating_mul(object_cost));
    let capacity = ((weighed as f64 * options.capacity_fraction).floor() as u64).max(1);
    let origin = origin_server::start(OriginOptions {
        listen: LOOPBACK_ANY,
        max_age: 86_400,
        ..OriginOptions::default()
    })
    .await?;
    let mut rows = Vec::new();
    for &policy in &options.policies {
        let config = proxy_config(origin.addr, policy, capacity, options.lab_mode)?;
        let proxy = secondhit_proxy::server::start(config, Arc::new(SystemClock::new())).await?;
        let target = http::Uri::try_from(format!("http://{}", proxy.addr))
            .map_err(|e| DemoError::Panicked(format!("a loopback URL did not parse: {e}")))?;
        let mut ro = ReplayOptions::new(target);
        ro.concurrency = options.concurrency;
        ro.limit = Some(options.requests);
        ro.origin_stats = format!("http://{}/_stats", origin.addr).parse().ok();
        let reader = source.open()?;
        let live = replay::run(reader, &ro, progress).await?;
        let live_writes = proxy.proxy.metrics().stores();
        proxy.shutdown().await;
        let predicted = predict(source, policy, capacity, options.requests, object_cost).await?;
        rows.push(DemoRow {
            policy: policy.to_string(),
            live,
            live_writes,
            predicted,
        });
    }
    origin.shutdown().await;
    Ok(DemoReport {
        trace: source.name(),
        summary,
        capacity_bytes: capacity,
        lab_mode: options.lab_mode,
        object_cost,
        concurrency: options.concurrency,
        rows,
    })
}

/// `serve` on loopback in front of the origin at `origin`: `policy` with an infinite window, an
/// LRU cache of `capacity` bytes, in lab mode if `lab`.
fn proxy_config(
    origin: std::net::SocketAddr,
    policy: Policy,
    capacity: u64,
    lab: bool,
) -> Result<ValidConfig, DemoError> {
    let mut config = Config {
        listen: LOOPBACK_ANY,
        admin_listen: LOOPBACK_ANY,
        origin: Some(OriginRef::Url(OriginUrl {
            tls: false,
            authority: http::uri::Authority::try_from(origin.to_string())
                .map_err(|e| DemoError::Panicked(format!("a loopback address: {e}")))?,
        })),
        ..Config::default()
    };
    config.cache.capacity = capacity;
    config.cache.max_object_size = Some(capacity.min(u64::from(u32::MAX)));
    config.cache.eviction = Eviction::Lru;
    config.cache.lab_mode = lab;
    config.admission.policy = policy;
    config.admission.window = None;
    config.limits.store_buffer_bytes = config.limits.store_buffer_bytes.max(capacity);
    config.validate().map_err(DemoError::Config)
}

/// What `simulate --store moka --object-cost COST` predicts for `policy` at `capacity` bytes
/// over the first `requests` requests, with the live side's infinite window.
async fn predict(
    source: &Source,
    policy: Policy,
    capacity: u64,
    requests: u64,
    object_cost: u64,
) -> Result<RunResult, DemoError> {
    let sim_options = sim::Options {
        policies: vec![policy],
        evictions: vec![Eviction::Lru],
        store: StoreKind::Moka,
        capacities: Capacities::Bytes(vec![capacity]),
        settings: Settings {
            window: None,
            ..Settings::default()
        },
        threads: 1,
        limit: Some(requests),
        keep_state: false,
        auto_expected_items: false,
        sample: None,
        nodes: sim::Nodes::default(),
        disk: None,
        decompose: false,
        slice_size: None,
        object_cost,
        stale_keep: std::time::Duration::from_secs(4 * 3600),
        shield: None,
    };
    let predicted = tokio::task::spawn_blocking({
        let source = source.clone();
        move || sim::run(&source, &sim_options, &sim::Quiet)
    })
    .await
    .map_err(|e| DemoError::Panicked(e.to_string()))??
    .results
    .remove(0);
    Ok(predicted)
}

impl DemoReport {
    /// The side-by-side table.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "trace {}: {} requests, {} objects, {:.2} % one-hit wonders, working set {}",
            self.trace,
            units::count(self.summary.requests),
            units::count(self.summary.objects),
            self.summary.one_hit_wonder_ratio * 100.0,
            units::bytes(self.summary.working_set_bytes)
        );
        let _ = writeln!(
            s,
            "secondhit serve on loopback in front of secondhit origin: cache {}, LRU, window inf, {}; replayed at concurrency {}",
            units::bytes(self.capacity_bytes),
            if self.lab_mode { "lab mode" } else { "production settings" },
            self.concurrency
        );
        let _ = writeln!(
            s,
            "predicted by simulate --store moka{}\n",
            if self.lab_mode {
                String::new()
            } else {
                format!(
                    " --object-cost serve (each object weighs its body and {} bytes, as serve charges it)",
                    units::count(self.object_cost)
                )
            }
        );
        let _ = writeln!(
            s,
            "{:<12} {:>21} {:>21} {:>19} {:>16} {:>10} {:>9} {:>9}",
            "policy",
            "hits live / sim",
            "hit ratio live / sim",
            "writes live / sim",
            "origin requests",
            "corrupted",
            "req/s",
            "p99 ms"
        );
        for r in &self.rows {
            let l = &r.live;
            let p = &r.predicted;
            let _ = writeln!(
                s,
                "{:<12} {:>21} {:>21} {:>19} {:>16} {:>10} {:>9.0} {:>9.2}",
                r.policy,
                format!("{} / {}", units::count(l.hits), units::count(p.hits)),
                format!(
                    "{:.2} % / {:.2} %",
                    l.hit_ratio * 100.0,
                    p.hit_ratio * 100.0
                ),
                format!(
                    "{} / {}",
                    units::count(r.live_writes),
                    units::count(p.admissions)
                ),
                l.origin_requests.map_or("-".into(), units::count),
                l.corrupted,
                l.requests_per_sec,
                l.latency_ms.p99
            );
        }
        let _ = writeln!(s, "\n{}", self.verdict());
        s
    }

    /// The largest gap between live and predicted hit ratios, in percentage points.
    pub fn largest_gap_points(&self) -> f64 {
        self.rows
            .iter()
            .map(|r| ((r.live.hit_ratio - r.predicted.hit_ratio) * 100.0).abs())
            .fold(0.0, f64::max)
    }

    /// One line on how well they agree.
    fn verdict(&self) -> String {
        let exact = self
            .rows
            .iter()
            .all(|r| r.live.hits == r.predicted.hits && r.live_writes == r.predicted.admissions);
        if exact {
            "live replay and simulation agree exactly.".into()
        } else {
            format!(
                "live replay and simulation agree within {:.2} points of hit ratio{}.",
                self.largest_gap_points(),
                if self.lab_mode {
                    " (lab mode at concurrency 1 should be exact: see above)"
                } else {
                    ""
                }
            )
        }
    }
}
