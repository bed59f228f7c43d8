//! Helpers shared by the integration tests.
#![allow(dead_code)]

use secondhit::admission::Policy;
use secondhit::config::{Config, OriginRef, OriginUrl};
use secondhit::store::Eviction;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

/// A lab-mode configuration (the simulator's maintenance and body-only weights, LRU, an
/// infinite window), as `demo` runs the proxy: on 127.0.0.1:0 in front of `origin`, `capacity`
/// bytes, `policy` for memory.
pub fn lab_config(origin: SocketAddr, capacity: u64, policy: Policy) -> Config {
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        origin: Some(OriginRef::Url(OriginUrl {
            tls: false,
            authority: origin.to_string().parse().unwrap(),
        })),
        ..Config::default()
    };
    config.cache.capacity = capacity;
    config.cache.max_object_size = Some(capacity);
    config.cache.eviction = Eviction::Lru;
    config.cache.lab_mode = true;
    config.admission.policy = policy;
    config.admission.window = None;
    config.limits.store_buffer_bytes = config.limits.store_buffer_bytes.max(capacity);
    config
}

/// A trace bundled in this repository's `traces/`.
pub fn bundled(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("traces")
        .join(name)
}

/// The environment variable that makes a missing shared trace a failure (CI sets it).
pub const REQUIRE_SHARED: &str = "SECONDHIT_REQUIRE_SHARED_TRACES";

/// A trace in the team's `../shared/traces/` (beside the repository in the team's checkouts
/// and in CI), or `None` when it is not there: a newcomer's clone has no `shared/`, and its
/// tests run on the bundled traces and say which ones they skipped. With
/// `SECONDHIT_REQUIRE_SHARED_TRACES=1` (as `.ci/run` sets) a missing trace fails the test.
pub fn shared(name: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("shared")
        .join("traces")
        .join(name);
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os(REQUIRE_SHARED).is_none_or(|v| v.is_empty() || v == "0"),
        "{} is missing and {REQUIRE_SHARED} is set: put the team's shared/ folder beside the repository",
        p.display()
    );
    // Straight to the process's stderr, not through `eprintln!`: the test harness captures
    // what a passing test prints with the macros, and the newcomer would never see the skip.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {} is not present (the team's shared traces; set {REQUIRE_SHARED}=1 to require them)",
        p.display()
    );
    None
}

/// The `secondhit` binary built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_secondhit"))
}

pub mod child;
pub mod origin;
pub mod proxy;
pub mod raw_origin;

/// `config` served on 127.0.0.1:0 on the system clock, as deployed, and `requests` replayed
/// through it one at a time (the first `limit` of them, all without), with the origin's
/// counts from `origin`'s `/_stats` when given: the proxy (still running) and the report.
pub async fn replay_one_at_a_time(
    config: Config,
    requests: secondhit::trace::Reader,
    limit: Option<u64>,
    origin: Option<SocketAddr>,
) -> (secondhit::server::Running, secondhit::replay::ReplayReport) {
    let proxy = secondhit::server::start(
        config.validate().unwrap(),
        std::sync::Arc::new(secondhit::clock::SystemClock::new()),
    )
    .await
    .unwrap();
    let mut ro =
        secondhit::replay::ReplayOptions::new(format!("http://{}", proxy.addr).parse().unwrap());
    ro.concurrency = 1;
    ro.limit = limit;
    ro.origin_stats = origin.and_then(|o| format!("http://{o}/_stats").parse().ok());
    let report = secondhit::replay::run(requests, &ro, &secondhit::sim::Quiet)
        .await
        .unwrap();
    (proxy, report)
}
