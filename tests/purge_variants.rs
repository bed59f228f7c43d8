//! Purges reach every variant in both tiers: a URL whose responses vary (`Vary: X-V`) has one
//! object per variant on the flash tier, under keys neither tier can list. A purge by URL (hard
//! or soft), by prefix, or an invalidation must stop every one of them being served, in this
//! run and after a restart, and must not touch other URLs.

mod support;

use http::Method;
use std::path::PathBuf;
use std::time::Duration;
use support::origin;
use support::proxy::{admin, start, Got, Http};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "secondhit-purge-variants-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Memory admits nothing before a URL's 16th request; the disk admits everything, at once.
fn config(d: &std::path::Path) -> String {
    format!(
        "[admission]\npolicy = \"nth-hit:16\"\ndisk = \"admit-all\"\n\
         [cache]\ncapacity = \"1MB\"\nlab_mode = true\nforwarded_request_headers = [\"x-v\"]\nforwarded_unkeyed_headers = [\"x-v\"]\n\
         [cache.disk]\ndir = \"{}\"\ncapacity = \"4MiB\"\nblock_size = \"1MiB\"\n",
        d.display()
    )
}

/// A GET of `path` with `X-V: xv` and one Host for every run (the cache key holds it).
async fn get(c: &Http, path: &str, xv: &str, more: &[(&str, &str)]) -> Got {
    let mut h = vec![("host", "edge.test"), ("x-v", xv)];
    h.extend_from_slice(more);
    c.send(Method::GET, path, &h).await
}

fn from_disk(g: &Got) -> bool {
    g.x_cache() == "HIT"
        && g.header("cache-status")
            .unwrap_or_default()
            .contains("detail=disk")
}

async fn purge(p: &support::proxy::RunningProxy, query: &str) {
    let (s, body) = admin(p.admin_addr, &format!("/purge?{query}"), true).await;
    assert_eq!(s, 200, "{query}: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_reach_every_variant_on_disk_and_hold_after_a_restart() {
    let d = dir("all");
    let o = origin::start().await;
    let (p, clock) = start(&o.url(), &config(&d)).await;
    let c = Http::new(p.addr);
    let paths = ["/vary-xv/p", "/vary-xv/q", "/vary-xv/r"];
    // Two variants of each URL, written to disk at once; then both served from there.
    for path in paths {
        for xv in ["a", "b"] {
            let g = get(&c, path, xv, &[]).await;
            assert_eq!(g.x_cache(), "MISS", "{path} {xv}");
        }
        for xv in ["a", "b"] {
            let g = get(&c, path, xv, &[]).await;
            assert!(from_disk(&g), "{path} {xv}: {:?}", g.headers);
            assert_eq!(g.bytes(), format!("x-v={xv}").as_bytes());
        }
        assert_eq!(o.count(path), 2, "{path}");
    }
    // A disk hit answers conditions as a memory hit does: a non-matching If-Range, the whole
    // body.
    let g = get(
        &c,
        "/vary-xv/r",
        "b",
        &[("range", "bytes=0-1"), ("if-range", "\"nope\"")],
    )
    .await;
    assert!(from_disk(&g), "{:?}", g.headers);
    assert_eq!((g.status.as_u16(), g.bytes()), (200, &b"x-v=b"[..]));

    clock.advance(Duration::from_secs(1));
    purge(&p, "url=http%3A%2F%2Fedge.test%2Fvary-xv%2Fp").await;
    // Every variant of p comes from the origin again: the first request brings the Vary record
    // back, and the second selects the other variant's key, whose old copy is still on disk.
    for xv in ["a", "b"] {
        let g = get(&c, "/vary-xv/p", xv, &[]).await;
        assert_ne!(
            g.x_cache(),
            "HIT",
            "p {xv} after its purge: {:?}",
            g.headers
        );
    }
    assert_eq!(o.count("/vary-xv/p"), 4);
    // The copies stored since are served from disk; the other URLs were not touched.
    for path in paths {
        for xv in ["a", "b"] {
            let g = get(&c, path, xv, &[]).await;
            assert!(from_disk(&g), "{path} {xv}: {:?}", g.headers);
        }
    }
    assert_eq!(o.count("/vary-xv/q"), 2);
    assert_eq!(o.count("/vary-xv/r"), 2);

    // A soft purge of q, then a restart: memory is empty and its Vary record gone; the disk
    // still holds both old variants of q.
    purge(&p, "url=http%3A%2F%2Fedge.test%2Fvary-xv%2Fq&soft=1").await;
    drop(c);
    p.shutdown().await;
    let (p, clock) = start(&o.url(), &config(&d)).await;
    // The restarted clock starts where the first did: moved past the purges.
    clock.advance(Duration::from_secs(2));
    let c = Http::new(p.addr);
    for xv in ["a", "b"] {
        let g = get(&c, "/vary-xv/q", xv, &[]).await;
        assert_ne!(
            g.x_cache(),
            "HIT",
            "q {xv} after a soft purge and a restart"
        );
    }
    assert_eq!(o.count("/vary-xv/q"), 4);
    // r was never purged: once its Vary record is back (one fetch), its other variant is
    // still served from disk.
    assert_ne!(get(&c, "/vary-xv/r", "a", &[]).await.x_cache(), "HIT");
    assert!(from_disk(&get(&c, "/vary-xv/r", "b", &[]).await));
    assert_eq!(o.count("/vary-xv/r"), 3);

    // A purge by prefix reaches r's variants too.
    clock.advance(Duration::from_secs(1));
    purge(&p, "prefix=http%3A%2F%2Fedge.test%2Fvary-xv%2F").await;
    for xv in ["a", "b"] {
        let g = get(&c, "/vary-xv/r", xv, &[]).await;
        assert_ne!(g.x_cache(), "HIT", "r {xv} after a prefix purge");
    }
    assert_eq!(o.count("/vary-xv/r"), 5);
    drop(c);
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&d);
}

/// RFC 9111 §4.4: a successful unsafe request invalidates the URL in both tiers, every variant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsafe_request_invalidates_the_variants_on_disk() {
    let d = dir("unsafe");
    let o = origin::start().await;
    let (p, clock) = start(&o.url(), &config(&d)).await;
    let c = Http::new(p.addr);
    let path = "/vary-xv/u";
    for xv in ["a", "b", "a", "b"] {
        get(&c, path, xv, &[]).await;
    }
    assert!(from_disk(&get(&c, path, "b", &[]).await));
    assert_eq!(o.count(path), 2);
    clock.advance(Duration::from_secs(1));
    // The test origin answers any method but GET and HEAD on /vary-xv/ with a 200.
    let g = c.send(Method::POST, path, &[("host", "edge.test")]).await;
    assert_eq!(g.status.as_u16(), 200);
    assert_ne!(get(&c, path, "a", &[]).await.x_cache(), "HIT");
    let g = get(&c, path, "b", &[]).await;
    assert_ne!(g.x_cache(), "HIT", "{:?}", g.headers);
    drop(c);
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&d);
}
