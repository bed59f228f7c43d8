//! The flash tier under memory (`[cache.disk]`), against a real origin on loopback: what the
//! flash policy admits reaches disk when memory evicts it (or at once, when the memory policy
//! defers it), one-hit wonders never do, disk hits carry the same bytes and say `detail=disk`,
//! the disk survives a restart (and so does a purge of it), and the write budget holds.

mod support;

use http::Method;
use std::path::PathBuf;
use support::origin::{self, content};
use support::proxy::{admin, start, Got, Http};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("secondhit-disk-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Memory holds four 10 KB objects (lab mode: weighed by body, evicted at once); memory admits
/// all, the disk second hits; 4 MiB of disk in 1 MiB blocks.
fn config(d: &std::path::Path) -> String {
    format!(
        "[admission]\npolicy = \"admit-all\"\ndisk = \"second-hit\"\n\
         [cache]\ncapacity = \"40KB\"\nlab_mode = true\n\
         [cache.disk]\ndir = \"{}\"\ncapacity = \"4MiB\"\nblock_size = \"1MiB\"\n",
        d.display()
    )
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

const SIZE: &str = "?size=10000";

/// A GET with one Host for every run: the cache key holds the host, and the proxy's port
/// changes on a restart.
async fn get(c: &Http, path: &str) -> Got {
    c.send(Method::GET, path, &[("host", "edge.test")]).await
}

async fn fill(c: &Http, tag: &str, n: usize) {
    for i in 0..n {
        let got = get(c, &format!("/cache/{tag}{i}{SIZE}")).await;
        assert_eq!(got.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_hits_reach_disk_one_hit_wonders_never_and_a_restart_keeps_them() {
    let d = dir("tiers");
    let o = origin::start().await;
    let (p, _) = start(&o.url(), &config(&d)).await;
    let c = Http::new(p.addr);
    // First requests: stored in memory, the disk policy says not yet.
    fill(&c, "t", 5).await;
    // One-hit wonders push them out of memory: none of them reaches disk.
    fill(&c, "once-a", 8).await;
    let m = admin(p.admin_addr, "/metrics", false).await.1;
    assert_eq!(metric(&m, "secondhit_disk_writes_total"), 0);
    // Second requests miss both tiers: the disk policy admits them now, memory stores them,
    // and more one-hit wonders evict them to disk.
    fill(&c, "t", 5).await;
    fill(&c, "once-b", 8).await;
    let m = admin(p.admin_addr, "/metrics", false).await.1;
    assert_eq!(metric(&m, "secondhit_disk_writes_total"), 5);
    // Each: the 10,000-byte body with its headers and times.
    let bytes = metric(&m, "secondhit_disk_write_bytes_total");
    assert!((5 * 10_000..5 * 11_000).contains(&bytes), "{bytes}");
    // Third requests: from disk, the origin's bytes, not fetched again.
    for i in 0..5 {
        let path = format!("/cache/t{i}{SIZE}");
        let got = get(&c, &path).await;
        assert_eq!(got.x_cache(), "HIT", "{path}");
        let status = got.header("cache-status").unwrap_or_default().to_owned();
        assert!(status.contains("detail=disk"), "{path}: {status}");
        assert_eq!(got.bytes(), &content(&format!("/cache/t{i}"), 10_000)[..]);
        assert_eq!(o.count(&format!("/cache/t{i}{SIZE}")), 2, "{path}");
    }
    let m = admin(p.admin_addr, "/metrics", false).await.1;
    assert_eq!(metric(&m, "secondhit_disk_hits_total"), 5);
    assert_eq!(metric(&m, "secondhit_disk_refusals_total"), 0);
    assert_eq!(metric(&m, "secondhit_disk_dropped_writes_total"), 0);
    // Device writes finish in the background (the hits above may come from foyer's buffer
    // before the block reaches the device): wait for the first one, 10 s at most.
    let mut written = metric(&m, "secondhit_disk_write_latency_seconds_count");
    for _ in 0..200 {
        if written > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let m = admin(p.admin_addr, "/metrics", false).await.1;
        written = metric(&m, "secondhit_disk_write_latency_seconds_count");
    }
    assert!(written > 0, "no device write finished");
    // The client's keep-alive connection closed first: a shutdown waits for open ones.
    drop(c);
    p.shutdown().await;

    // A restart: memory is empty, the disk still has them.
    let (p, clock) = start(&o.url(), &config(&d)).await;
    let c = Http::new(p.addr);
    for i in 0..5 {
        let path = format!("/cache/t{i}{SIZE}");
        let got = get(&c, &path).await;
        assert!(
            got.header("cache-status")
                .unwrap_or_default()
                .contains("detail=disk"),
            "{path} after a restart: {:?}",
            got.header("cache-status")
        );
        assert_eq!(got.bytes(), &content(&format!("/cache/t{i}"), 10_000)[..]);
        assert_eq!(o.count(&format!("/cache/t{i}{SIZE}")), 2, "{path}");
    }
    // A one-hit wonder of before is not there.
    let got = get(&c, &format!("/cache/once-a0{SIZE}")).await;
    assert_ne!(got.x_cache(), "HIT");
    // A purge of everything reaches the disk, and holds after another restart (whose clock
    // starts where this one did, after the objects were stored and before the purge).
    clock.advance(std::time::Duration::from_secs(1));
    let (s, _) = admin(p.admin_addr, "/purge-all", true).await;
    assert_eq!(s, 200);
    drop(c);
    p.shutdown().await;
    let (p, _) = start(&o.url(), &config(&d)).await;
    let c = Http::new(p.addr);
    let got = get(&c, &format!("/cache/t0{SIZE}")).await;
    assert_ne!(
        got.x_cache(),
        "HIT",
        "a purged object served after a restart"
    );
    assert_eq!(o.count(&format!("/cache/t0{SIZE}")), 3);
    drop(c);
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&d);
}

/// Memory second-hits, the disk admits all, with a budget of 25 KB a second: a first request
/// goes to disk at once (memory said not yet), two 10 KB objects fit the budget at one instant
/// and the rest are refused (counted, and answered as deferred), a second later it has
/// refilled; a disk hit is promoted to memory on its second sighting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_memory_defers_and_flash_admits_is_written_at_once_within_the_budget() {
    let d = dir("budget");
    let o = origin::start().await;
    let config = format!(
        "[admission]\npolicy = \"second-hit\"\ndisk = \"admit-all\"\n\
         [cache]\ncapacity = \"1MB\"\nlab_mode = true\n\
         [cache.disk]\ndir = \"{}\"\ncapacity = \"4MiB\"\nblock_size = \"1MiB\"\n\
         max_write_rate = \"25KB\"\n",
        d.display()
    );
    let (p, clock) = start(&o.url(), &config).await;
    let c = Http::new(p.addr);
    for i in 0..4 {
        let got = get(&c, &format!("/cache/b{i}{SIZE}")).await;
        let status = got.header("cache-status").unwrap_or_default().to_owned();
        if i < 2 {
            assert_eq!(got.x_cache(), "MISS", "b{i}");
            let stored = status.contains("stored") && status.contains("detail=disk");
            assert!(stored, "b{i}: {status}");
        } else {
            // Refused by the budget: the client is not told it was stored.
            assert_eq!(got.x_cache(), "DEFERRED", "b{i}");
            assert!(!status.contains("stored"), "b{i}: {status}");
        }
    }
    let m = admin(p.admin_addr, "/metrics", false).await.1;
    assert_eq!(metric(&m, "secondhit_disk_writes_total"), 2);
    assert_eq!(metric(&m, "secondhit_disk_refusals_total"), 2);
    // Nothing went to memory: its policy deferred every first request.
    assert_eq!(metric(&m, "secondhit_cache_entries"), 0);
    clock.advance(std::time::Duration::from_secs(1));
    let got = get(&c, &format!("/cache/b4{SIZE}")).await;
    assert_eq!(got.x_cache(), "MISS");
    let m = admin(p.admin_addr, "/metrics", false).await.1;
    assert_eq!(metric(&m, "secondhit_disk_writes_total"), 3);
    // b0 and b1 are on disk: their second requests are disk hits, promoted to memory (the
    // memory policy's second sighting), then memory hits; the origin saw each once.
    for i in 0..2 {
        let path = format!("/cache/b{i}{SIZE}");
        let got = get(&c, &path).await;
        assert_eq!(got.x_cache(), "HIT", "{path}");
        let status = got.header("cache-status").unwrap_or_default().to_owned();
        assert!(status.contains("detail=disk"), "{path}: {status}");
        assert_eq!(got.bytes(), &content(&format!("/cache/b{i}"), 10_000)[..]);
        let got = get(&c, &path).await;
        assert_eq!(got.x_cache(), "HIT", "{path}");
        let status = got.header("cache-status").unwrap_or_default().to_owned();
        assert!(!status.contains("detail=disk"), "{path}: {status}");
        assert_eq!(o.count(&path), 1, "{path}");
    }
    // b2 was refused: its second request is fetched again.
    let got = get(&c, &format!("/cache/b2{SIZE}")).await;
    assert_ne!(got.x_cache(), "HIT");
    assert_eq!(o.count(&format!("/cache/b2{SIZE}")), 2);
    drop(c);
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&d);
}
