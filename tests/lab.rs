//! The live lab through a real `serve` on loopback: shadow policies against the live cache, a
//! queue that is full, and the recording read back by the simulator.

mod support;

use http::Method;
use secondhit::admission::{Policy, Settings};
use secondhit::clock::SystemClock;
use secondhit::config::Config;
use secondhit::lab::shadow::ShadowFigures;
use secondhit::lab::RecordFormat;
use secondhit::origin_server::{self, OriginOptions, RunningOrigin as Origin};
use secondhit::proxy::outcome::Outcome;
use secondhit::replay::{self, ReplayOptions, ReplayReport};
use secondhit::server::{self, Running};
use secondhit::sim::{self, Capacities, Quiet};
use secondhit::store::{Eviction, StoreKind};
use secondhit::trace;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use support::bundled;
use support::raw_origin::RawOrigin;

const TRACE: &str = "request.trace.xz";
/// About 5 % of the working set of the trace's first 8,000 requests.
const CAPACITY: u64 = 3 << 20;

async fn origin() -> Origin {
    origin_server::start(OriginOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        max_age: 86_400,
        ..OriginOptions::default()
    })
    .await
    .unwrap()
}

/// A lab-mode proxy (the simulator's maintenance and body-only weights) with an infinite
/// window, as `demo --lab-mode` runs it, and `lab` applied.
async fn proxy(origin: &Origin, policy: Policy, lab: impl FnOnce(&mut Config)) -> Running {
    let mut config = support::lab_config(origin.addr, CAPACITY, policy);
    lab(&mut config);
    server::start(config.validate().unwrap(), Arc::new(SystemClock::new()))
        .await
        .unwrap()
}

async fn replay(proxy: &Running, requests: u64, concurrency: usize) -> ReplayReport {
    let mut o = ReplayOptions::new(format!("http://{}", proxy.addr).parse().unwrap());
    o.concurrency = concurrency;
    o.limit = Some(requests);
    let reader = trace::open(&bundled(TRACE), None).unwrap();
    let r = replay::run(reader, &o, &Quiet).await.unwrap();
    assert_eq!((r.requests, r.errors, r.corrupted), (requests, 0, 0));
    r
}

fn figures(proxy: &Running) -> Vec<ShadowFigures> {
    let lab = proxy.proxy.lab();
    assert!(lab.settle(Duration::from_secs(30)));
    lab.shadows().unwrap().figures()
}

/// The simulator over `path` with `policy`, the proxy's capacity and an infinite window.
fn simulate(path: &Path, policy: Policy, store: StoreKind, limit: Option<u64>) -> sim::RunResult {
    sim::run(
        &trace::Source::file(path, None),
        &sim::Options {
            policies: vec![policy],
            evictions: vec![Eviction::Lru],
            store,
            capacities: Capacities::Bytes(vec![CAPACITY]),
            settings: Settings {
                window: None,
                ..Settings::default()
            },
            threads: 1,
            limit,
            ..sim::Options::default()
        },
        &Quiet,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .results
    .remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadows_agree_with_the_live_cache_and_with_the_simulator() {
    let origin = origin().await;
    let shadows = [
        "admit-all",
        "nth-hit:3",
        "second-hit",
        "admit-all:eviction=s3fifo",
    ];
    let requests = 8_000;
    for concurrency in [1, 8] {
        let p = proxy(&origin, Policy::SecondHit, |c| {
            c.lab.shadow = shadows.iter().map(|s| s.parse().unwrap()).collect();
        })
        .await;
        let live = replay(&p, requests, concurrency).await;
        let f = figures(&p);
        assert_eq!(f.len(), 1 + shadows.len());
        assert!(f[0].live && f[0].policy == "second-hit");
        // Every lookup reached every shadow (nothing was dropped at this pace).
        assert_eq!(p.proxy.lab().shadows().unwrap().dropped(), 0);
        assert!(f.iter().all(|s| s.requests == requests), "{f:?}");
        let live_hits = p.proxy.metrics().requests(Outcome::Hit);
        assert_eq!(live_hits, live.hits);
        if concurrency == 1 {
            // In trace order the live policy's shadow is the live cache, exactly; the shadow of
            // the same policy by name is the same; and every shadow is the simulator's run.
            assert_eq!(f[0].hits, live_hits);
            assert_eq!(f[0].writes, p.proxy.metrics().stores());
            assert_eq!((f[3].hits, f[3].writes), (f[0].hits, f[0].writes));
            for (s, spec) in f[1..].iter().zip(shadows) {
                let spec: secondhit::lab::ShadowSpec = spec.parse().unwrap();
                let want = sim::run(
                    &trace::Source::file(bundled(TRACE), None),
                    &sim::Options {
                        policies: vec![spec.policy],
                        evictions: vec![spec.eviction.unwrap_or(Eviction::Lru)],
                        capacities: Capacities::Bytes(vec![CAPACITY]),
                        settings: Settings {
                            window: None,
                            ..Settings::default()
                        },
                        threads: 1,
                        limit: Some(requests),
                        ..sim::Options::default()
                    },
                    &Quiet,
                )
                .unwrap()
                .results
                .remove(0);
                assert_eq!(
                    (s.hits, s.writes),
                    (want.hits, want.admissions),
                    "{}",
                    s.policy
                );
            }
            // The shadows answer the question they are for: admit-all hits more, nth-hit:3
            // writes less.
            assert!(f[1].hits > f[0].hits && f[1].writes > 2 * f[0].writes);
            assert!(f[2].writes < f[0].writes);
        } else {
            // Concurrent requests reach the cache and the shadows in slightly different
            // orders; within 1 % of the hits.
            let diff = f[0].hits.abs_diff(live_hits) as f64;
            assert!(
                diff <= 0.01 * live_hits as f64,
                "live {live_hits}, shadow {}",
                f[0].hits
            );
        }
        let metrics = p.proxy.render_metrics();
        assert!(metrics.contains(&format!(
            "secondhit_shadow_hits_total{{policy=\"second-hit\",live=\"true\"}} {}",
            f[0].hits
        )));
        p.shutdown().await;
    }
    origin.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_shadow_queue_drops_and_counts_and_no_request_waits_for_it() {
    let origin = origin().await;
    // A queue of one sighting and four shadows on moka's store (the slowest): the thread falls
    // behind a concurrent replay, and what it cannot take is dropped, never waited for.
    let p = proxy(&origin, Policy::AdmitAll, |c| {
        c.lab.shadow = [
            "admit-all:eviction=tinylfu",
            "second-hit:eviction=tinylfu",
            "nth-hit:3:eviction=tinylfu",
            "admit-all:eviction=tinylfu:capacity=1MiB",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        c.lab.shadow_queue = 1;
    })
    .await;
    let requests = 4_000;
    replay(&p, requests, 16).await;
    let f = figures(&p);
    let dropped = p.proxy.lab().shadows().unwrap().dropped();
    // Every lookup was either taken by the shadows or counted as dropped (that the request never
    // waits is the unit test's: `lab::tests::a_full_queue_drops_and_counts_without_waiting`).
    assert_eq!(f[0].requests + dropped, requests);
    assert!(f.iter().all(|s| s.requests == f[0].requests));
    let metrics = p.proxy.render_metrics();
    assert!(metrics.contains(&format!("secondhit_shadow_dropped_total {dropped}")));
    p.shutdown().await;
    origin.shutdown().await;
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("secondhit-lab-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recording_of_a_replay_simulates_to_the_live_figures_exactly() {
    let origin = origin().await;
    let dir = scratch("record");
    let file = dir.join("edge.oracleGeneral");
    let requests = 8_000;
    // Both formats: secondhit's (the default) and libCacheSim's oracleGeneral.
    for (policy, format) in [
        (Policy::SecondHit, RecordFormat::Secondhit),
        (Policy::AdmitAll, RecordFormat::OracleGeneral),
    ] {
        let _ = std::fs::remove_file(&file);
        let p = proxy(&origin, policy, |c| {
            c.lab.record = Some(file.clone());
            c.lab.record_format = format;
        })
        .await;
        let live = replay(&p, requests, 1).await;
        let writes = p.proxy.metrics().stores();
        p.shutdown().await;
        let rec = trace::open(&file, None).unwrap();
        let recorded: Vec<trace::Request> = rec.map(|r| r.unwrap()).collect();
        assert_eq!(recorded.len() as u64, requests);
        // The recorded sizes are the trace's (the origin serves each path at its size).
        let original: Vec<u64> = trace::open(&bundled(TRACE), None)
            .unwrap()
            .take(requests as usize)
            .map(|r| r.unwrap().size)
            .collect();
        let sizes: Vec<u64> = recorded.iter().map(|r| r.size).collect();
        assert_eq!(sizes, original);
        for store in [StoreKind::Moka, StoreKind::Exact] {
            let r = simulate(&file, policy, store, None);
            assert_eq!(r.requests, requests);
            assert_eq!(
                (r.hits, r.admissions),
                (live.hits, writes),
                "{policy} {store}"
            );
        }
    }
    // Concurrent requests are recorded in the order their responses began, which is not
    // quite the order the cache handled them in: within 1 % of the hits.
    let _ = std::fs::remove_file(&file);
    let p = proxy(&origin, Policy::SecondHit, |c| {
        c.lab.record = Some(file.clone())
    })
    .await;
    let live = replay(&p, requests, 8).await;
    p.shutdown().await;
    let r = simulate(&file, Policy::SecondHit, StoreKind::Exact, None);
    assert_eq!(r.requests, requests);
    assert!(
        r.hits.abs_diff(live.hits) as f64 <= 0.01 * live.hits as f64,
        "live {}, recording {}",
        live.hits,
        r.hits
    );
    origin.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A recording made under production settings (production weights, moka maintained as
/// deployed) while the origin answers one request in ten with a 503 (not storable) and makes
/// every object stale after a second (revalidated, answered 304): re-simulated, within 0.3
/// points of the live hit ratio and 0.3 % of its cache writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_under_production_settings_predicts_the_live_edge() {
    let origin = origin_server::start(OriginOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        max_age: 1,
        error_rate: 0.1,
        ..OriginOptions::default()
    })
    .await
    .unwrap();
    let dir = scratch("production");
    let file = dir.join("edge.rec");
    let requests = 12_000;
    let p = proxy(&origin, Policy::SecondHit, |c| {
        c.cache.lab_mode = false;
        c.lab.record = Some(file.clone());
    })
    .await;
    let mut o = ReplayOptions::new(format!("http://{}", p.addr).parse().unwrap());
    o.concurrency = 1;
    o.limit = Some(requests);
    // At most 4,000 a second, so the run lasts 3 s or more whatever the machine: objects asked
    // again more than a second later are stale, however fast the proxy answers.
    o.rate = Some(4_000.0);
    let live = replay::run(trace::open(&bundled(TRACE), None).unwrap(), &o, &Quiet)
        .await
        .unwrap();
    assert!(p.proxy.lab().settle(Duration::from_secs(30)));
    let writes = p.proxy.metrics().stores();
    p.shutdown().await;
    let stats = origin.stats();
    origin.shutdown().await;
    assert_eq!((live.requests, live.corrupted), (requests, 0));
    // The faults and the revalidations happened: this is the case to predict (paced, about 250
    // revalidations in 12,000 requests).
    assert!(live.errors > requests / 20, "{} errors", live.errors);
    assert!(
        stats.not_modified > 100,
        "{} revalidated",
        stats.not_modified
    );
    for store in [StoreKind::Moka, StoreKind::Exact] {
        let r = simulate(&file, Policy::SecondHit, store, None);
        assert_eq!(r.requests, requests);
        let gap = (r.hit_ratio - live.hit_ratio) * 100.0;
        assert!(
            gap.abs() <= 0.3,
            "{store}: simulated {:.3} % against live {:.3} %",
            r.hit_ratio * 100.0,
            live.hit_ratio * 100.0
        );
        assert!(
            r.admissions.abs_diff(writes) as f64 <= 0.003 * writes as f64,
            "{store}: simulated {} writes against live {writes}",
            r.admissions
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recording_rotates_at_its_size_and_keeps_every_request_in_order() {
    let origin = origin().await;
    let dir = scratch("rotate");
    let file = dir.join("edge.oracleGeneral");
    let p = proxy(&origin, Policy::SecondHit, |c| {
        c.lab.record = Some(file.clone());
        // The header and 400 records a file.
        c.lab.record_max_bytes = 16 + 40 * 400;
        c.lab.record_keep = 1;
    })
    .await;
    replay(&p, 1_000, 1).await;
    let addr = p.addr;
    p.shutdown().await;
    let rotated = |n: u32| secondhit::lab::record::rotated(&file, n);
    // Files of 400: the first was rotated out of the one kept, FILE.1 holds the second.
    assert!(!rotated(2).exists());
    let ids = |path: &Path| -> Vec<u64> {
        trace::open(path, None)
            .unwrap()
            .map(|r| r.unwrap().id)
            .collect()
    };
    let (older, current) = (ids(&rotated(1)), ids(&file));
    assert_eq!((older.len(), current.len()), (400, 200));
    // Read oldest first, they are the replay in order: the same ids as the proxy's own keys.
    let kept: Vec<u64> = older.into_iter().chain(current).collect();
    let want: Vec<u64> = trace::open(&bundled(TRACE), None)
        .unwrap()
        .take(1_000)
        .map(|r| {
            let r = r.unwrap();
            let key = format!("GET http://{addr}{}?size={}", replay::path_of(&r), r.size);
            secondhit::hash::object_id(key.as_bytes())
        })
        .collect();
    assert_eq!(kept, want[400..]);
    origin.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// One sighting per request that reached the cache logic, with the object's size: hits (HEAD
/// too), misses with and without a length (chunked: sized by the pump), responses that could
/// not be stored (sighted as such: the shadows ask their policy and never store them), and an
/// origin failure after the policy was asked (size 0); none for a look-up-only miss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lookup_is_one_sighting_of_its_object() {
    let origin = RawOrigin::start(|head| {
        let path = head.split(' ').nth(1).unwrap_or("").to_string();
        match path.as_str() {
            "/plain" => "HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ncontent-length: 10\r\n\r\n0123456789".into(),
            "/chunked" => "HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n".into(),
            "/nostore" => "HTTP/1.1 200 OK\r\ncache-control: no-store\r\ncontent-length: 7\r\n\r\nprivate".into(),
            _ => "this is not HTTP\r\n\r\n".to_string(),
        }
        .into_bytes()
    })
    .await;
    let dir = scratch("sightings");
    let file = dir.join("edge.oracleGeneral");
    let (p, _clock) = support::proxy::start(
        &origin.url(),
        &format!(
            "[lab]\nshadow = [\"admit-all\"]\nrecord = \"{}\"",
            file.display()
        ),
    )
    .await;
    let http = support::proxy::Http::new(p.addr);
    let mut want = Vec::new();
    for (method, path, x_cache, size) in [
        (Method::GET, "/plain", "DEFERRED", 10),
        (Method::GET, "/plain", "MISS", 10),
        (Method::GET, "/plain", "HIT", 10),
        (Method::HEAD, "/plain", "HIT", 10),
        (Method::GET, "/chunked", "DEFERRED", 11),
        (Method::GET, "/chunked", "MISS", 11),
        (Method::GET, "/chunked", "HIT", 11),
        (Method::GET, "/nostore", "BYPASS", 7),
        (Method::GET, "/nostore", "BYPASS", 7),
        (Method::GET, "/broken", "ERROR", 0),
        (Method::HEAD, "/never-got", "", u64::MAX), // a HEAD miss: looked up only
    ] {
        let got = http.send(method.clone(), path, &[]).await;
        if size == u64::MAX {
            continue;
        }
        assert_eq!(got.x_cache(), x_cache, "{method} {path}");
        let key = format!("GET http://{}{path}", p.addr);
        want.push((secondhit::hash::object_id(key.as_bytes()), size));
    }
    assert!(p.proxy.lab().settle(Duration::from_secs(30)));
    let recorded: Vec<(u64, u64)> = trace::open(&file, None)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.id, r.size)
        })
        .collect();
    assert_eq!(recorded, want);
    // The live policy's shadow is the live cache: 3 hits, 2 writes; admit-all would have
    // written /plain and /chunked at once (and never /nostore, nor the failure): 5 hits.
    let f = p.proxy.lab().shadows().unwrap().figures();
    assert_eq!(
        (f[0].requests, f[0].hits, f[0].writes),
        (10, 3, p.proxy.metrics().stores())
    );
    assert_eq!((f[1].requests, f[1].hits, f[1].writes), (10, 5, 2));
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
