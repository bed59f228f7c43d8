//! `secondhit demo`: the whole mission in one command. Starts `secondhit origin` and
//! `secondhit serve` on free loopback ports, replays a trace through the proxy once per policy,
//! and sets the live figures beside `simulate`'s prediction for the same policy, eviction and
//! capacity. The proxy runs in lab mode (the simulator's exact moka maintenance and body-only
//! weights) and both sides use an infinite window (the live clock is not the trace's clock), so
//! at concurrency 1 the live hit and write counts must equal the prediction.

use crate::admission::{Policy, Settings};
use crate::clock::SystemClock;
use crate::origin_server::{self, OriginOptions};
use crate::replay::{self, ReplayOptions, ReplayReport};
use crate::sim::{self, Capacities, Progress, RunResult};
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
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            requests: 20_000,
            capacity_fraction: 0.05,
            policies: vec![Policy::AdmitAll, Policy::SecondHit],
            concurrency: 1,
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
    let capacity =
        ((summary.working_set_bytes as f64 * options.capacity_fraction).floor() as u64).max(1);
    let origin = origin_server::start(OriginOptions {
        listen: LOOPBACK_ANY,
        max_age: 86_400,
        ..OriginOptions::default()
    })
    .await?;
    let mut rows = Vec::new();
    for &policy in &options.policies {
        let config = proxy_config(origin.addr, policy, capacity)?;
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
        let predicted = predict(source, policy, capacity, options.requests).await?;
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
        rows,
    })
}

/// `serve` in lab mode on loopback in front of the origin at `origin`: `policy` with an
/// infinite window, an LRU cache of `capacity` bytes.
fn proxy_config(
    origin: std::net::SocketAddr,
    policy: Policy,
    capacity: u64,
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
    config.cache.lab_mode = true;
    config.admission.policy = policy;
    config.admission.window = None;
    config.limits.store_buffer_bytes = config.limits.store_buffer_bytes.max(capacity);
    config.validate().map_err(DemoError::Config)
}

/// What `simulate --store moka` predicts for `policy` at `capacity` bytes over the first
/// `requests` requests, with the live side's infinite window.
async fn predict(
    source: &Source,
    policy: Policy,
    capacity: u64,
    requests: u64,
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
            "secondhit serve on loopback in front of secondhit origin: cache {}, LRU, window inf; replayed at concurrency 1\n",
            units::bytes(self.capacity_bytes)
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
        let agree = self
            .rows
            .iter()
            .all(|r| r.live.hits == r.predicted.hits && r.live_writes == r.predicted.admissions);
        let _ = writeln!(
            s,
            "\n{}",
            if agree {
                "live replay and simulation agree exactly."
            } else {
                "live replay and simulation differ (see above)."
            }
        );
        s
    }
}
