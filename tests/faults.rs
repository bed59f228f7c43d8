//! Origin faults under the proxy: nothing wrong is ever stored or served, every waiting client
//! gets an answer, a departing client does not cancel a store, and nothing is left running.

mod support;

use secondhit::origin::OriginError;
use secondhit::origin_server::{self, OriginOptions};
use secondhit::replay::{self, ReplayOptions};
use secondhit::sim::Quiet;
use secondhit::trace;
use std::time::Duration;
use support::bundled;
use support::origin::{self as test_origin, content};
use support::proxy::{start, Http};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn alive_tasks_settle_to(baseline: usize) -> usize {
    let metrics = tokio::runtime::Handle::current().metrics();
    for _ in 0..50 {
        if metrics.num_alive_tasks() <= baseline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    metrics.num_alive_tasks()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_storm_stores_nothing_wrong_and_leaves_nothing_running() {
    let baseline = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let origin = origin_server::start(OriginOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        error_rate: 0.1,
        reset_rate: 0.1,
        short_rate: 0.1,
        seed: 3,
        ..OriginOptions::default()
    })
    .await
    .unwrap();
    let (p, _) = start(
        &format!("http://{}", origin.addr),
        "[admission]\npolicy = \"admit-all\"\n[cache]\ncapacity = \"64MiB\"\nmax_object_size = \"8MiB\"",
    )
    .await;
    let mut o = ReplayOptions::new(format!("http://{}", p.addr).parse().unwrap());
    o.concurrency = 8;
    o.limit = Some(2_000);
    for round in 0..2 {
        let reader = trace::open(&bundled("request.trace.xz"), None).unwrap();
        let r = replay::run(reader, &o, &Quiet).await.unwrap();
        // Every HIT body was checked byte for byte: nothing cut off was ever stored.
        assert_eq!(r.corrupted, 0, "round {round}");
        assert!(
            r.errors > 0 && r.errors < r.requests / 2,
            "round {round}: {:?}",
            r.errors_by_kind
        );
        // Errors come only from the origin's faults: 503s passed through, cut bodies (a body
        // small enough to be read whole before the head goes out is a 502 instead).
        for kind in r.errors_by_kind.keys() {
            assert!(
                kind == "status-503" || kind == "body" || kind == "status-502",
                "round {round}: {kind}"
            );
        }
        let bad_gateways = r.errors_by_kind.get("status-502").copied().unwrap_or(0);
        assert!(
            bad_gateways <= p.proxy.metrics().origin_errors(OriginError::Body),
            "round {round}: every 502 is an origin body that broke off"
        );
        if round == 1 {
            assert!(
                r.hits > 500,
                "the second round is served mostly from the cache: {}",
                r.hits
            );
        }
    }
    let aborted = p.proxy.render_metrics();
    assert!(
        !aborted.contains("secondhit_cache_write_aborts_total 0"),
        "cut bodies were seen and not stored"
    );
    p.shutdown().await;
    origin.shutdown().await;
    let left = alive_tasks_settle_to(baseline).await;
    assert!(
        left <= baseline,
        "{left} tasks alive, {baseline} before the proxy started"
    );
}

#[tokio::test]
async fn waiters_get_an_answer_when_the_leading_fetch_fails() {
    let o = test_origin::start().await;
    let (p, _) = start(&o.url(), "").await;
    let c = std::sync::Arc::new(Http::new(p.addr));
    // A body read whole before the head goes out (its failure is a 502), and a streamed one
    // (its failure is a cut body).
    for (path, read_ahead) in [
        ("/short/w?size=4000", true),
        ("/short/w?size=200000", false),
    ] {
        // First sighting deferred; then six at once: one leads, five wait, the lead is cut off.
        let first = c.get(path).await;
        let failed = |g: &support::proxy::Got| match read_ahead {
            true => g.status == http::StatusCode::BAD_GATEWAY && g.x_cache() == "ERROR",
            false => g.body.is_err(),
        };
        assert!(
            failed(&first),
            "{path}: {:?} {:?}",
            first.status,
            first.body
        );
        let tasks: Vec<_> = (0..6)
            .map(|_| {
                let c = c.clone();
                tokio::spawn(async move { c.get(path).await })
            })
            .collect();
        for t in tasks {
            let g = tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("no waiter hangs")
                .unwrap();
            assert!(
                failed(&g),
                "{path}: every answer is the origin's failure, never a stored object"
            );
        }
        let n = o.count(path);
        if read_ahead {
            // The leader's failure released the waiters, who fetched for themselves.
            assert_eq!(n, 7, "{path}");
        } else {
            // A streamed body being stored is streamed to the waiters as it arrives: those that
            // joined it share its failure (a cut body, as the leader's client); any that came
            // after it failed fetched for themselves.
            assert!((2..=7).contains(&n), "{path}: {n}");
        }
    }
    assert_eq!(p.proxy.metrics().stores(), 0);
    p.shutdown().await;
}

#[tokio::test]
async fn a_client_leaving_mid_response_does_not_cancel_the_store() {
    let o = test_origin::start().await;
    let (p, _) = start(&o.url(), "").await;
    let c = Http::new(p.addr);
    // Larger than the loopback socket buffers, so the client is gone before the body is sent.
    let path = "/delay/leave?size=12000000";
    assert_eq!(c.get(path).await.x_cache(), "DEFERRED");
    // The admitted request: read the first bytes of the response, then hang up.
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", p.addr).as_bytes())
        .await
        .unwrap();
    let mut first = [0u8; 64];
    let n = s.read(&mut first).await.unwrap();
    let head = String::from_utf8_lossy(&first[..n]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    drop(s);
    // The pump finishes reading and stores the object anyway.
    let mut stored = false;
    for _ in 0..50 {
        if p.proxy.metrics().stores() == 1 {
            stored = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(stored, "the store completed without its client");
    let g = c.get(path).await;
    assert_eq!(g.x_cache(), "HIT");
    assert_eq!(g.bytes(), &content("/delay/leave", 12_000_000)[..]);
    assert_eq!(o.count(path), 2);
    p.shutdown().await;
}
