//! The admission filter survives restarts (`state_dir`): one request, a restart, one more
//! request is a MISS (admitted), not DEFERRED. A corrupt, truncated or mismatched state never
//! stops the start.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;
use support::origin;
use support::proxy::{start, Http};

fn state_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("secondhit-state-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// GET with a fixed Host: each proxy listens on its own port, and the key must not change.
async fn get(c: &Http, path: &str) -> String {
    c.send(http::Method::GET, path, &[("host", "site.test")])
        .await
        .x_cache()
        .to_string()
}

fn extra(dir: &Path, more: &str) -> String {
    format!("state_dir = \"{}\"\n{more}", dir.display())
}

#[tokio::test]
async fn a_restart_keeps_what_the_filter_has_seen() {
    let o = origin::start().await;
    let dir = state_dir("restart");
    let (p, _) = start(&o.url(), &extra(&dir, "")).await;
    let c = Http::new(p.addr);
    assert_eq!(get(&c, "/cache/a").await, "DEFERRED");
    p.shutdown().await; // writes the state
    assert!(dir.join("admission.snapshot").exists());

    let (p, _) = start(&o.url(), &extra(&dir, "")).await;
    let c = Http::new(p.addr);
    assert_eq!(get(&c, "/cache/a").await, "MISS", "seen before the restart");
    assert_eq!(get(&c, "/cache/b").await, "DEFERRED");
    p.shutdown().await;

    // Without a state directory the same sequence starts from nothing.
    let (p, _) = start(&o.url(), "").await;
    assert_eq!(get(&Http::new(p.addr), "/cache/a").await, "DEFERRED");
    p.shutdown().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn the_state_is_written_periodically() {
    let o = origin::start().await;
    let dir = state_dir("periodic");
    let (p, _) = start(
        &o.url(),
        &extra(&dir, "state_snapshot_interval = \"100ms\""),
    )
    .await;
    let file = dir.join("admission.snapshot");
    Http::new(p.addr).get("/cache/p").await;
    let mut written = false;
    for _ in 0..50 {
        if file.exists() {
            written = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(written, "a snapshot appeared before any shutdown");
    p.shutdown().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_broken_or_mismatched_state_never_stops_the_start() {
    let o = origin::start().await;
    let dir = state_dir("broken");
    let (p, _) = start(&o.url(), &extra(&dir, "")).await;
    get(&Http::new(p.addr), "/cache/x").await;
    p.shutdown().await;
    let file = dir.join("admission.snapshot");
    let good = std::fs::read(&file).unwrap();

    // Truncated, garbage, and sized for another filter: each start goes on with an empty filter.
    let mismatched = extra(&dir, "[admission]\nexpected_items = 2000000");
    for (bytes, config) in [
        (good[..good.len() / 3].to_vec(), extra(&dir, "")),
        (b"not a snapshot at all".to_vec(), extra(&dir, "")),
        (good.clone(), mismatched),
    ] {
        std::fs::write(&file, &bytes).unwrap();
        let (p, _) = start(&o.url(), &config).await;
        assert_eq!(get(&Http::new(p.addr), "/cache/x").await, "DEFERRED");
        p.shutdown().await;
    }
    std::fs::remove_dir_all(dir).unwrap();
}
