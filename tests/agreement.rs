//! Live replay through `secondhit serve` against `simulate`'s prediction: at concurrency 1, with
//! the proxy in lab mode and an infinite window, the hit and write counts must be equal.

mod support;

use secondhit::admission::{Policy, Settings};
use secondhit::demo::{self, DemoOptions};
use secondhit::origin_server::{self, OriginOptions};
use secondhit::replay::{self, ReplayOptions};
use secondhit::sim::{self, Capacities, Quiet};
use secondhit::store::{Eviction, StoreKind};
use secondhit::trace;
use support::bundled;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_replay_equals_the_simulation() {
    for (name, requests, fraction) in [
        ("request.trace.xz", 8_000, 0.05),
        ("trace-mt-20130703.trc.bin.gz", 8_000, 0.05),
    ] {
        let path = bundled(name);
        let options = DemoOptions {
            requests,
            capacity_fraction: fraction,
            policies: vec![Policy::AdmitAll, Policy::SecondHit],
            concurrency: 1,
        };
        let report = demo::run(&trace::Source::file(&path, None), &options, &Quiet)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for row in &report.rows {
            let live = &row.live;
            assert_eq!(live.requests, requests, "{name} {}", row.policy);
            assert_eq!(
                (live.errors, live.corrupted),
                (0, 0),
                "{name} {}",
                row.policy
            );
            assert_eq!(live.hits, row.predicted.hits, "{name} {}: hits", row.policy);
            assert_eq!(
                row.live_writes, row.predicted.admissions,
                "{name} {}: writes",
                row.policy
            );
            // Every miss reached the origin once.
            assert_eq!(
                live.origin_requests,
                Some(requests - live.hits),
                "{name} {}",
                row.policy
            );
            // The exact store predicts the same LRU.
            let exact = sim::run(
                &trace::Source::file(&path, None),
                &sim::Options {
                    policies: vec![row.policy.parse().unwrap()],
                    evictions: vec![Eviction::Lru],
                    store: StoreKind::Exact,
                    capacities: Capacities::Bytes(vec![report.capacity_bytes]),
                    settings: Settings {
                        window: None,
                        ..Settings::default()
                    },
                    threads: 1,
                    limit: Some(requests),
                    keep_state: false,
                    auto_expected_items: false,
                    sample: None,
                    nodes: Default::default(),
                    disk: None,
                },
                &Quiet,
            )
            .unwrap();
            assert_eq!(
                exact.results[0].hits, live.hits,
                "{name} {}: exact store",
                row.policy
            );
        }
        // second-hit wrote far less than admit-all.
        assert!(
            report.rows[1].live_writes * 2 < report.rows[0].live_writes,
            "{name}"
        );
    }
}

#[tokio::test]
async fn replay_straight_at_the_origin_counts_offload_and_verifies_bytes() {
    let origin = origin_server::start(OriginOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..OriginOptions::default()
    })
    .await
    .unwrap();
    let mut o = ReplayOptions::new(format!("http://{}", origin.addr).parse().unwrap());
    o.concurrency = 4;
    o.limit = Some(3_000);
    o.warmup = 1_000;
    o.origin_stats = format!("http://{}/_stats", origin.addr).parse().ok();
    let reader = trace::open(&bundled("request.trace.xz"), None).unwrap();
    let r = replay::run(reader, &o, &Quiet).await.unwrap();
    assert_eq!(r.requests, 2_000);
    assert_eq!((r.hits, r.errors, r.corrupted), (0, 0, 0));
    assert_eq!(r.outcomes.get("none"), Some(&2_000));
    assert_eq!(r.origin_requests, Some(2_000));
    assert_eq!(r.origin_offload, Some(0.0));
    assert_eq!(origin.stats().requests, 3_000);
    assert!(r.latency_ms.count == 2_000 && r.latency_ms.p50 > 0.0);
    origin.shutdown().await;
}

#[tokio::test]
async fn injected_faults_are_counted_as_errors_never_as_good_bytes() {
    let origin = origin_server::start(OriginOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        error_rate: 0.2,
        reset_rate: 0.2,
        short_rate: 0.2,
        seed: 9,
        ..OriginOptions::default()
    })
    .await
    .unwrap();
    let mut o = ReplayOptions::new(format!("http://{}", origin.addr).parse().unwrap());
    o.concurrency = 4;
    o.limit = Some(500);
    let reader = trace::open(&bundled("request.trace.xz"), None).unwrap();
    let r = replay::run(reader, &o, &Quiet).await.unwrap();
    let faults = origin.stats().faults;
    assert!(faults > 200 && faults < 400, "{faults}");
    assert_eq!(r.errors, faults, "{:?}", r.errors_by_kind);
    assert_eq!(r.corrupted, 0);
    assert!(r.errors_by_kind.get("status-503").is_some_and(|&n| n > 50));
    origin.shutdown().await;
}

#[tokio::test]
async fn pacing_by_rate_and_by_trace_time_holds_requests_back() {
    let origin = origin_server::start(OriginOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..OriginOptions::default()
    })
    .await
    .unwrap();
    let target: http::Uri = format!("http://{}", origin.addr).parse().unwrap();
    // 201 requests of the web trace, whose time is its line number (1 s apart): at 1,000
    // requests/s, or at the trace's pace sped up 1,000 times, the last one starts 200 ms in.
    for (rate, speed) in [(Some(1000.0), None), (None, Some(1000.0))] {
        let mut o = ReplayOptions::new(target.clone());
        o.concurrency = 8;
        o.limit = Some(201);
        o.rate = rate;
        o.speed = speed;
        let started = std::time::Instant::now();
        let reader = trace::open(&bundled("request.trace.xz"), None).unwrap();
        let r = replay::run(reader, &o, &Quiet).await.unwrap();
        assert_eq!((r.requests, r.errors), (201, 0));
        // A lower bound only: pacing may be late under load, never early.
        assert!(
            started.elapsed() >= std::time::Duration::from_millis(200),
            "{rate:?} {speed:?}"
        );
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn replay_can_start_part_way_through_a_trace() {
    let origin = origin_server::start(OriginOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..OriginOptions::default()
    })
    .await
    .unwrap();
    let mut o = ReplayOptions::new(format!("http://{}", origin.addr).parse().unwrap());
    o.concurrency = 4;
    o.skip = 1_000;
    o.limit = Some(500);
    let reader = trace::open(&bundled("request.trace.xz"), None).unwrap();
    let r = replay::run(reader, &o, &Quiet).await.unwrap();
    let want: u64 = trace::open(&bundled("request.trace.xz"), None)
        .unwrap()
        .skip(1_000)
        .take(500)
        .map(|r| r.unwrap().size)
        .sum();
    assert_eq!((r.requests, r.errors, r.corrupted), (500, 0, 0));
    assert_eq!(r.requested_bytes, want);
    assert_eq!(origin.stats().requests, 500);
    origin.shutdown().await;
}
