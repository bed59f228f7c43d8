//! Live replay through `secondhit serve` against `simulate`'s prediction: at concurrency 1, with
//! the proxy in lab mode and an infinite window, the hit and write counts must be equal; with
//! production settings and `--object-cost serve`, the hit ratios within 0.3 points.

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
            lab_mode: true,
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
                    decompose: true,
                    slice_size: None,
                    object_cost: 0,
                    stale_keep: std::time::Duration::from_secs(4 * 3600),
                    shield: None,
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

/// Production settings (the weigher's key, header and bookkeeping bytes; moka's own
/// maintenance) against `simulate --object-cost serve`: within 0.3 points of hit ratio at
/// concurrency 1 on the bundled web trace and on the Tencent photo sample, within 1 point at
/// concurrency 8. Without the cost model the bundled trace's prediction is 0.9 points high.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn production_replay_is_predicted_with_the_cost_model() {
    let mut traces = vec![(bundled("request.trace.xz"), 12_000)];
    // The whole sample (9,954 requests).
    traces.extend(support::shared("cloud_photos-sample.bz2").map(|p| (p, 12_000)));
    for (path, requests) in traces {
        for (concurrency, within) in [(1, 0.3), (8, 1.0)] {
            let options = DemoOptions {
                requests,
                capacity_fraction: 0.05,
                policies: vec![Policy::AdmitAll, Policy::SecondHit],
                concurrency,
                lab_mode: false,
            };
            let report = demo::run(&trace::Source::file(&path, None), &options, &Quiet)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(report.object_cost, sim::OBJECT_COST_SERVE);
            for row in &report.rows {
                let name = format!("{} {} c={concurrency}", path.display(), row.policy);
                assert_eq!(row.live.requests, report.summary.requests, "{name}");
                assert_eq!((row.live.errors, row.live.corrupted), (0, 0), "{name}");
                let gap = (row.live.hit_ratio - row.predicted.hit_ratio) * 100.0;
                assert!(
                    gap.abs() <= within,
                    "{name}: live {:.3} % against predicted {:.3} %",
                    row.live.hit_ratio * 100.0,
                    row.predicted.hit_ratio * 100.0
                );
            }
        }
    }
}

/// `simulate --object-cost serve`'s constant is what `serve` charges: admit-all in a cache that
/// holds everything, the first 5,000 requests of the bundled trace; the weighted bytes less the
/// stored bodies, over the entries, within 16 bytes of the constant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_cost_serve_is_what_serve_charges() {
    let requests = 5_000;
    let origin = origin_server::start(OriginOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        max_age: 86_400,
        ..OriginOptions::default()
    })
    .await
    .unwrap();
    let mut config = support::lab_config(origin.addr, 4 << 30, Policy::AdmitAll);
    config.cache.lab_mode = false;
    config.cache.max_object_size = Some(64 << 20);
    let source = trace::Source::file(bundled("request.trace.xz"), None);
    let (proxy, live) =
        support::replay_one_at_a_time(config, source.open().unwrap(), Some(requests), None).await;
    assert_eq!((live.requests, live.errors), (requests, 0));
    let text = proxy.proxy.render_metrics();
    let gauge = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} not in the metrics"))
    };
    let (entries, weighted) = (
        gauge("secondhit_cache_entries"),
        gauge("secondhit_cache_bytes"),
    );
    proxy.shutdown().await;
    origin.shutdown().await;
    // Every object was stored once: the simulation's admitted bytes are the bodies.
    let sim = sim::run(
        &source,
        &sim::Options {
            policies: vec![Policy::AdmitAll],
            store: StoreKind::Moka,
            capacities: Capacities::Bytes(vec![4 << 30]),
            limit: Some(requests),
            decompose: false,
            threads: 1,
            ..sim::Options::default()
        },
        &Quiet,
    )
    .unwrap();
    let bodies = sim.results[0].admitted_bytes;
    assert_eq!(entries, sim.results[0].admissions);
    let cost = (weighted - bodies) as f64 / entries as f64;
    assert!(
        (cost - sim::OBJECT_COST_SERVE as f64).abs() <= 16.0,
        "serve charged {cost:.1} bytes an object beside its body; OBJECT_COST_SERVE is {}",
        sim::OBJECT_COST_SERVE
    );
}

/// `serve --slice-size` against `simulate --slice-size`: a media trace (ranges over objects of
/// 20 KB to 2 MB, slices of 64 KiB, some objects of one slice) replayed at concurrency 1 through
/// the proxy in lab mode; every slice the simulator misses is one origin request of its length,
/// and the writes are the simulator's admissions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_sliced_replay_equals_the_simulation() {
    use secondhit::trace::synth::{Ranges, Spec};
    let path =
        std::env::temp_dir().join(format!("secondhit-media-{}.ranges.csv", std::process::id()));
    let spec = Spec {
        objects: 400,
        requests: 3_000,
        alpha: 0.9,
        one_time_share: 0.3,
        sizes: "lognormal:200000:1.0".parse().unwrap(),
        seed: 5,
        min_size: 20_000,
        max_size: 2_000_000,
        ..Spec::default()
    };
    let ranges = Ranges {
        min: 50_000,
        max: 300_000,
        skew: 2.0,
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    spec.write_media(ranges, &mut out).unwrap();
    drop(out);
    let slice: u64 = 64 << 10;
    let capacity: u64 = 8 << 20;
    let origin = origin_server::start(origin_server::OriginOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        max_age: 86_400,
        ..Default::default()
    })
    .await
    .unwrap();
    for policy in [Policy::AdmitAll, Policy::SecondHit] {
        let mut config = support::lab_config(origin.addr, capacity, policy);
        config.cache.slice_size = slice;
        let requests = trace::open(&path, None).unwrap();
        let (proxy, live) =
            support::replay_one_at_a_time(config, requests, None, Some(origin.addr)).await;
        let writes = proxy.proxy.metrics().stores();
        proxy.shutdown().await;
        assert_eq!(
            (live.requests, live.errors, live.corrupted),
            (3_000, 0, 0),
            "{policy}"
        );
        let options = sim::Options {
            policies: vec![policy],
            evictions: vec![Eviction::Lru],
            store: StoreKind::Moka,
            capacities: Capacities::Bytes(vec![capacity]),
            settings: Settings {
                window: None,
                ..Settings::default()
            },
            threads: 1,
            decompose: false,
            slice_size: Some(slice),
            ..sim::Options::default()
        };
        let predicted = &sim::run(&trace::Source::file(&path, None), &options, &Quiet)
            .unwrap()
            .results[0];
        let misses = predicted.requests - predicted.hits;
        assert_eq!(
            live.origin_requests,
            Some(misses),
            "{policy}: slices missed"
        );
        assert_eq!(
            live.origin_bytes,
            Some(predicted.origin_bytes),
            "{policy}: origin bytes"
        );
        assert_eq!(writes, predicted.admissions, "{policy}: writes");
        assert!(
            predicted.hits > 1_000,
            "{policy}: a trace that tests little ({} hits)",
            predicted.hits
        );
    }
    origin.shutdown().await;
    let _ = std::fs::remove_file(&path);
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

/// A live run of two tiers: `serve` in lab mode in front of `origin`, `memory` bytes for
/// `memory_policy` above a flash tier of `disk` bytes (in blocks of `block`, or the default)
/// admitting by `flash`, the first `requests` of `source` replayed at concurrency 1. The
/// replay's report and the flash tier's figures.
async fn live_two_tiers(
    origin: std::net::SocketAddr,
    source: &trace::Source,
    requests: u64,
    (memory, memory_policy): (u64, Policy),
    (disk, block, flash): (u64, Option<u64>, Policy),
) -> (replay::ReplayReport, secondhit::disk::DiskFigures) {
    use secondhit::config::DiskConfig;
    let dir = std::env::temp_dir().join(format!(
        "secondhit-agreement-{memory_policy}-{flash}-{disk}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = support::lab_config(origin, memory, memory_policy);
    config.cache.max_object_size = Some(memory.min(4 << 20));
    let mut disk_config = DiskConfig {
        dir: Some(dir.clone()),
        capacity: disk,
        ..DiskConfig::default()
    };
    if let Some(b) = block {
        disk_config.block_size = b;
    }
    config.cache.disk = disk_config;
    config.admission.disk = flash;
    let (proxy, live) =
        support::replay_one_at_a_time(config, source.open().unwrap(), Some(requests), None).await;
    let tier = proxy.proxy.disk().expect("a flash tier").tier.figures();
    proxy.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        (live.errors, live.corrupted),
        (0, 0),
        "memory {memory_policy}, flash {flash}"
    );
    (live, tier)
}

/// What `simulate --store moka` predicts for [`live_two_tiers`]'s setup (flash evicting FIFO,
/// in whole blocks of `block` if given).
fn predict_two_tiers(
    source: &trace::Source,
    requests: u64,
    (memory, memory_policy): (u64, Policy),
    (disk, block, flash): (u64, Option<u64>, Policy),
) -> sim::RunResult {
    sim::run(
        source,
        &sim::Options {
            policies: vec![memory_policy],
            evictions: vec![Eviction::Lru],
            store: StoreKind::Moka,
            capacities: Capacities::Bytes(vec![memory]),
            settings: Settings {
                window: None,
                ..Settings::default()
            },
            threads: 1,
            limit: Some(requests),
            disk: Some(secondhit::sim::DiskOptions {
                capacities: vec![disk],
                policies: vec![flash],
                eviction: Eviction::Fifo,
                write_rate: None,
                block_size: block,
            }),
            ..sim::Options::default()
        },
        &Quiet,
    )
    .unwrap()
    .results
    .remove(0)
}

/// Two tiers, live against simulated: lab mode, concurrency 1, memory at 5 % of the working set
/// above a flash tier too large to evict (whole-block FIFO and the simulator's per-object FIFO
/// then agree); memory admitting all above flash admitting all or second hits, and memory
/// second-hit above flash admitting all (what memory defers goes to flash at once). Memory
/// hits, flash hits and flash writes must be equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tiers_live_equal_the_simulation() {
    let source = trace::Source::file(bundled("request.trace.xz"), None);
    let requests = 8_000;
    let summary =
        secondhit::trace::stats::collect(source.open().unwrap().take(requests as usize)).unwrap();
    let memory = summary.working_set_bytes / 20;
    // Room for everything, in whole 16 MiB blocks, with blocks to spare.
    let disk = (summary.working_set_bytes / (16 << 20) + 4) * (16 << 20);
    let origin = origin_server::start(OriginOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        max_age: 86_400,
        ..OriginOptions::default()
    })
    .await
    .unwrap();
    for (memory_policy, flash) in [
        (Policy::AdmitAll, Policy::AdmitAll),
        (Policy::AdmitAll, Policy::SecondHit),
        (Policy::SecondHit, Policy::AdmitAll),
    ] {
        let (mem, fl) = ((memory, memory_policy), (disk, None, flash));
        let (live, tier) = live_two_tiers(origin.addr, &source, requests, mem, fl).await;
        let predicted = predict_two_tiers(&source, requests, mem, fl);
        let p = predicted.disk.as_ref().expect("two tiers");
        let flash = format!("memory {memory_policy}, flash {flash}");
        assert_eq!(
            p.disk_evictions,
            Some(0),
            "{flash}: the flash tier must not evict"
        );
        assert_eq!(tier.evicted_blocks, 0, "{flash}");
        assert_eq!(live.hits, p.memory_hits + p.disk_hits, "{flash}: hits");
        assert_eq!(tier.hits, p.disk_hits, "{flash}: flash hits");
        assert_eq!(tier.writes, p.disk_writes, "{flash}: flash writes");
        assert!(p.disk_hits > 0, "{flash}: the flash tier served nothing");
    }
    origin.shutdown().await;
}

/// Two tiers with the flash tier full and evicting whole blocks (24 MiB in 1 MiB blocks under
/// 84 MiB of objects for admit-all on flash, 6 MiB for second-hit): live within 0.5 points of
/// `simulate --disk-block-size`, which lays objects out as the flash tier does (entries rounded
/// up to 4 KiB pages, a clean block kept, the oldest block evicted whole). An object-by-object
/// FIFO of the same bytes predicts about a point too many hits: it packs more objects and
/// evicts them one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tiers_with_the_flash_tier_evicting_blocks_are_predicted() {
    let source = trace::Source::file(bundled("request.trace.xz"), None);
    let requests = 20_000;
    let (memory, block) = (4_423_680, 1 << 20);
    let origin = origin_server::start(OriginOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        max_age: 86_400,
        ..OriginOptions::default()
    })
    .await
    .unwrap();
    // Flash second-hit writes a sixth of what admit-all writes: a smaller tier, to fill it.
    for (flash, disk) in [(Policy::AdmitAll, 24 << 20), (Policy::SecondHit, 6 << 20)] {
        let mem = (memory, Policy::AdmitAll);
        let (live, tier) = live_two_tiers(
            origin.addr,
            &source,
            requests,
            mem,
            (disk, Some(block), flash),
        )
        .await;
        let blocks = predict_two_tiers(&source, requests, mem, (disk, Some(block), flash));
        let objects = predict_two_tiers(&source, requests, mem, (disk, None, flash));
        assert!(
            tier.evicted_blocks > 0,
            "flash {flash}: the tier must evict"
        );
        let gap = |r: &sim::RunResult| (r.hit_ratio - live.hit_ratio) * 100.0;
        assert!(
            gap(&blocks).abs() <= 0.5,
            "flash {flash}: live {:.3} %, blocks predicted {:.3} %, objects {:.3} %",
            live.hit_ratio * 100.0,
            blocks.hit_ratio * 100.0,
            objects.hit_ratio * 100.0
        );
        assert!(
            gap(&blocks).abs() < gap(&objects).abs(),
            "flash {flash}: the block model must be the closer one"
        );
    }
    origin.shutdown().await;
}
