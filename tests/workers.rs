//! The worker threads that serve the public listener (`workers`): as many as configured, each
//! serving connections with the right bytes, and all of them gone after shutdown. Alone in its
//! own test binary, because it counts the process's threads by name.

mod support;

use std::time::Duration;
use support::origin::{self, content};
use support::proxy::{start, Http};

/// Threads of this process named `secondhit-w<N>`.
fn worker_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("secondhit-w"))
        .count()
}

/// The count once it is `want`, or what it is after 2 s (a thread names itself once it runs,
/// and exits a moment after its event loop ends).
async fn worker_threads_after_a_while(want: usize) -> usize {
    for _ in 0..100 {
        if worker_threads() == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker_threads()
}

#[tokio::test]
async fn workers_serve_every_connection_and_end_at_shutdown() {
    if !std::path::Path::new("/proc/self/task").exists() {
        eprintln!("skipped: no /proc/self/task to count threads in");
        return;
    }
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "workers = 3\n[admission]\npolicy = \"admit-all\"").await;
    assert_eq!(worker_threads_after_a_while(3).await, 3);
    // 48 clients at once, each on its own connections, over 8 keys: every answer whole.
    let mut clients = Vec::new();
    for i in 0..48 {
        let addr = p.addr;
        clients.push(tokio::spawn(async move {
            let c = Http::new(addr);
            for round in 0..5 {
                let path = format!("/cache/w{}", (i + round) % 8);
                let got = c.get(&path).await;
                assert_eq!(got.status, 200, "{path}");
                assert_eq!(got.bytes(), &content(&path, 1000)[..], "{path}");
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    // admit-all stores each key on its first fetch; concurrent first requests may each fetch,
    // but never more than the 48 clients' first round.
    let fetched: u64 = (0..8).map(|k| o.count(&format!("/cache/w{k}"))).sum();
    assert!((8..=48).contains(&fetched), "{fetched} origin fetches");
    // Every request was counted once, whichever thread served it.
    let m = support::proxy::admin(p.admin_addr, "/metrics", false)
        .await
        .1;
    let requests: u64 = m
        .lines()
        .filter(|l| l.starts_with("secondhit_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(requests, 48 * 5, "{m}");
    p.shutdown().await;
    // The threads exit right after their event loops end.
    assert_eq!(
        worker_threads_after_a_while(0).await,
        0,
        "worker threads left after shutdown"
    );
}
