//! The HTTP caching an edge is judged by, against a real origin on 127.0.0.1 that counts its
//! conditional requests: revalidation (RFC 9111 §4.3), stale serving (RFC 5861), invalidation
//! (§4.4), targeted cache control (RFC 9213) and purges. Freshness runs on the proxy's injected
//! clock: tests move it, nothing sleeps to let an object expire.

mod support;

use http::{Method, StatusCode};
use std::time::Duration;
use support::origin;
use support::proxy::{admin, start, Http};

const ADMIT_ALL: &str = "[admission]\npolicy = \"admit-all\"";

fn metric(text: &str, line_start: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(line_start)
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or_else(|| panic!("{line_start} missing from\n{text}"))
}

#[tokio::test]
async fn a_stale_object_is_revalidated_and_a_304_refreshes_it() {
    let o = origin::start().await;
    let (p, clock) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let path = "/reval/a?cc=max-age%3D10";
    let first = c.get(path).await;
    assert_eq!(
        (first.x_cache(), first.header("x-response")),
        ("MISS", Some("1"))
    );
    assert_eq!(c.get(path).await.x_cache(), "HIT");
    clock.advance(Duration::from_secs(11));
    let g = c.get(path).await;
    assert_eq!(g.status, StatusCode::OK);
    assert_eq!(g.x_cache(), "REVALIDATED");
    let cs = g.header("cache-status").unwrap();
    assert!(
        cs.starts_with("secondhit; fwd=stale; fwd-status=304"),
        "{cs}"
    );
    assert_eq!(g.bytes(), first.bytes(), "the stored body, served again");
    // §4.3.4: the 304's fields replace the stored ones; Content-Length stays the body's.
    assert_eq!(g.header("x-response"), Some("2"));
    assert_eq!(g.header("content-length"), Some("1000"));
    let again = c.get(path).await;
    assert_eq!(
        (again.x_cache(), again.header("x-response")),
        ("HIT", Some("2"))
    );
    // One body fetch in all; the revalidation was one conditional request.
    assert_eq!(o.count(path), 2);
    assert_eq!(o.not_modified(path), 1);
    let (_, m) = admin(p.admin_addr, "/metrics", false).await;
    assert_eq!(metric(&m, "secondhit_cache_refreshes_total "), 1);
    assert_eq!(
        metric(&m, "secondhit_cache_writes_total "),
        1,
        "a 304 is not a write"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn concurrent_requests_for_a_stale_object_share_one_revalidation() {
    let o = origin::start().await;
    let (p, clock) = start(&o.url(), ADMIT_ALL).await;
    let path = "/reval/b?cc=max-age%3D10&slow=200";
    let c = Http::new(p.addr);
    assert_eq!(c.get(path).await.x_cache(), "MISS");
    clock.advance(Duration::from_secs(11));
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let c = Http::new(p.addr);
            tokio::spawn(async move { c.get(path).await })
        })
        .collect();
    for t in tasks {
        let g = t.await.unwrap();
        assert_eq!(g.status, StatusCode::OK);
        assert!(
            matches!(g.x_cache(), "REVALIDATED" | "HIT"),
            "{}",
            g.x_cache()
        );
    }
    assert_eq!(
        o.not_modified(path),
        1,
        "one conditional request for all five"
    );
    assert_eq!(o.count(path), 2);
    p.shutdown().await;
}

#[tokio::test]
async fn no_cache_responses_are_stored_and_revalidated_on_every_use() {
    // RFC 9111 §5.2.2.4; max-age=0 likewise.
    let o = origin::start().await;
    let (p, _) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    for path in ["/reval/nc?cc=no-cache", "/reval/zero?cc=max-age%3D0"] {
        assert_eq!(c.get(path).await.x_cache(), "MISS", "{path}");
        for _ in 0..2 {
            assert_eq!(c.get(path).await.x_cache(), "REVALIDATED", "{path}");
        }
        assert_eq!((o.count(path), o.not_modified(path)), (3, 2), "{path}");
    }
    p.shutdown().await;
}

#[tokio::test]
async fn a_request_with_no_cache_revalidates_a_fresh_object() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let path = "/reval/r?cc=max-age%3D60";
    assert_eq!(c.get(path).await.x_cache(), "MISS");
    let g = c
        .send(Method::GET, path, &[("cache-control", "no-cache")])
        .await;
    assert_eq!(g.x_cache(), "REVALIDATED");
    assert_eq!(o.not_modified(path), 1);
    p.shutdown().await;
}

#[tokio::test]
async fn stale_if_error_serves_the_stale_object_when_the_origin_is_down() {
    let o = origin::start().await;
    let (p, clock) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let allowed = "/reval/s?cc=max-age%3D10%2C%20stale-if-error%3D60";
    let not_allowed = "/reval/t?cc=max-age%3D10";
    let never = "/reval/u?cc=max-age%3D10%2C%20must-revalidate%2C%20stale-if-error%3D60";
    let mut bodies = Vec::new();
    for path in [allowed, not_allowed, never] {
        let g = c.get(path).await;
        assert_eq!(g.x_cache(), "MISS");
        bodies.push(g.bytes().to_vec());
    }
    clock.advance(Duration::from_secs(11));
    o.stop();
    let g = c.get(allowed).await;
    assert_eq!((g.status, g.x_cache()), (StatusCode::OK, "STALE"));
    assert_eq!(g.bytes(), &bodies[0][..]);
    let cs = g.header("cache-status").unwrap();
    assert!(
        cs.contains("fwd=stale") && cs.contains("detail=stale-if-error"),
        "{cs}"
    );
    // Without permission, and never past must-revalidate: the error as before.
    for path in [not_allowed, never] {
        let g = c.get(path).await;
        assert_eq!(
            (g.status, g.x_cache()),
            (StatusCode::BAD_GATEWAY, "ERROR"),
            "{path}"
        );
    }
    // Past the stale-if-error window: the error too.
    clock.advance(Duration::from_secs(60));
    assert_eq!(c.get(allowed).await.status, StatusCode::BAD_GATEWAY);
    let (_, m) = admin(p.admin_addr, "/metrics", false).await;
    assert_eq!(
        metric(&m, "secondhit_stale_served_total{reason=\"if-error\"} "),
        1
    );
    p.shutdown().await;
}

#[tokio::test]
async fn a_configured_stale_if_error_covers_responses_that_say_nothing() {
    let o = origin::start().await;
    let extra = format!("{ADMIT_ALL}\n[cache]\nstale_if_error = \"1h\"");
    let (p, clock) = start(&o.url(), &extra).await;
    let c = Http::new(p.addr);
    let path = "/reval/d?cc=max-age%3D10";
    assert_eq!(c.get(path).await.x_cache(), "MISS");
    clock.advance(Duration::from_secs(11));
    o.stop();
    assert_eq!(c.get(path).await.x_cache(), "STALE");
    p.shutdown().await;
}

#[tokio::test]
async fn stale_while_revalidate_answers_at_once_with_one_background_refresh() {
    let o = origin::start().await;
    let (p, clock) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let path = "/reval/w?cc=max-age%3D1%2C%20stale-while-revalidate%3D60&slow=300";
    assert_eq!(c.get(path).await.header("x-response"), Some("1"));
    clock.advance(Duration::from_secs(2));
    // Five requests while the object is stale: all answered from the stale copy; one refresh.
    for _ in 0..5 {
        let g = c.get(path).await;
        assert_eq!((g.x_cache(), g.header("x-response")), ("STALE", Some("1")));
        let cs = g.header("cache-status").unwrap();
        assert!(
            cs.contains("detail=stale-while-revalidate") && cs.contains("ttl=-1"),
            "{cs}"
        );
    }
    // The background refresh lands (bounded wait: the origin answers after 300 ms).
    let mut refreshed = None;
    for _ in 0..100 {
        let g = c.get(path).await;
        if g.x_cache() == "HIT" {
            refreshed = Some(g);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let g = refreshed.expect("the background refresh completed");
    assert_eq!(g.header("x-response"), Some("2"));
    assert_eq!(o.not_modified(path), 1, "exactly one background refresh");
    assert_eq!(o.count(path), 2);
    p.shutdown().await;
}

#[tokio::test]
async fn unsafe_methods_invalidate_the_target_and_same_origin_locations() {
    // RFC 9111 §4.4.
    let o = origin::start().await;
    let (p, _) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let (a, b) = ("/reval/p?cc=max-age%3D60", "/reval/q?cc=max-age%3D60");
    for path in [a, b] {
        assert_eq!(c.get(path).await.x_cache(), "MISS");
        assert_eq!(c.get(path).await.x_cache(), "HIT");
    }
    // A failed POST invalidates nothing.
    let failed = c
        .send(
            Method::POST,
            "/reval/p?cc=max-age%3D60&post_status=500",
            &[],
        )
        .await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(c.get(a).await.x_cache(), "HIT");
    // A successful one invalidates its target... (the POST's target includes its query)
    let ok = c.send(Method::POST, a, &[]).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(c.get(a).await.x_cache(), "MISS");
    // ...and the same-origin Location it names; a cross-origin one is left alone.
    let loc = format!(
        "/reval/x?cc=max-age%3D60&loc=http%3A%2F%2F{}%2Freval%2Fq%3Fcc%3Dmax-age%253D60",
        p.addr
    );
    assert_eq!(
        c.send(Method::DELETE, &loc, &[]).await.status,
        StatusCode::OK
    );
    assert_eq!(c.get(b).await.x_cache(), "MISS");
    assert_eq!(c.get(b).await.x_cache(), "HIT");
    let elsewhere =
        "/reval/x?cc=max-age%3D60&loc=http%3A%2F%2Fother.test%2Freval%2Fq%3Fcc%3Dmax-age%253D60";
    c.send(Method::PUT, elsewhere, &[]).await;
    assert_eq!(c.get(b).await.x_cache(), "HIT");
    let (_, m) = admin(p.admin_addr, "/metrics", false).await;
    assert_eq!(metric(&m, "secondhit_cache_invalidations_total "), 2);
    p.shutdown().await;
}

#[tokio::test]
async fn cdn_cache_control_governs_this_cache_and_is_not_forwarded() {
    // RFC 9213 §2.1.
    let o = origin::start().await;
    let (p, _) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let stored = "/reval/c1?cc=no-store&cdn=max-age%3D60";
    let g = c.get(stored).await;
    assert_eq!(g.x_cache(), "MISS");
    assert_eq!(
        g.header("cdn-cache-control"),
        None,
        "not forwarded to clients"
    );
    assert_eq!(
        g.header("cache-control"),
        Some("no-store"),
        "Cache-Control is the client's"
    );
    assert_eq!(c.get(stored).await.x_cache(), "HIT");
    let refused = "/reval/c2?cc=max-age%3D60&cdn=no-store";
    for _ in 0..2 {
        assert_eq!(c.get(refused).await.x_cache(), "BYPASS");
    }
    p.shutdown().await;
    // Surrogate-Control is the second field by default; a configured list replaces the default.
    let extra = format!("{ADMIT_ALL}\n[cache]\ntargeted_cache_control = [\"x-edge-control\"]");
    let (p, _) = start(&o.url(), &extra).await;
    let c = Http::new(p.addr);
    let path = "/reval/c3?cc=no-store&sc=max-age%3D60";
    for _ in 0..2 {
        let g = c.get(path).await;
        assert_eq!(
            g.x_cache(),
            "BYPASS",
            "Surrogate-Control is no longer listed"
        );
        assert_eq!(
            g.header("surrogate-control"),
            Some("max-age=60"),
            "nor stripped"
        );
    }
    p.shutdown().await;
    let (p, _) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let path = "/reval/c4?cc=no-store&sc=max-age%3D60";
    let g = c.get(path).await;
    assert_eq!((g.x_cache(), g.header("surrogate-control")), ("MISS", None));
    assert_eq!(c.get(path).await.x_cache(), "HIT");
    p.shutdown().await;
}

#[tokio::test]
async fn purges_by_tag_and_prefix_and_soft_purges() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let tagged = [
        "/reval/dir/a?cc=max-age%3D60&tag=t1%20t2",
        "/reval/dir/b?cc=max-age%3D60&tag=t1",
        "/reval/other?cc=max-age%3D60&tag=t2",
    ];
    for path in tagged {
        assert_eq!(c.get(path).await.x_cache(), "MISS");
    }
    let (s, body) = admin(p.admin_addr, "/purge?tag=t1", true).await;
    assert_eq!((s, body.trim()), (StatusCode::OK, "{\"purged\":2}"));
    assert_eq!(c.get(tagged[0]).await.x_cache(), "MISS");
    assert_eq!(c.get(tagged[1]).await.x_cache(), "MISS");
    assert_eq!(c.get(tagged[2]).await.x_cache(), "HIT");
    // Prefix purge: everything under /reval/dir/.
    let prefix = format!("/purge?prefix=http%3A%2F%2F{}%2Freval%2Fdir%2F", p.addr);
    let (_, body) = admin(p.admin_addr, &prefix, true).await;
    assert_eq!(body.trim(), "{\"purged\":2}");
    assert_eq!(c.get(tagged[0]).await.x_cache(), "MISS");
    assert_eq!(c.get(tagged[2]).await.x_cache(), "HIT");
    // Soft purge: kept but stale, so the next request revalidates (a 304, no body fetch).
    let soft = format!(
        "/purge?url=http%3A%2F%2F{}%2Freval%2Fother%3Fcc%3Dmax-age%253D60%26tag%3Dt2&soft=1",
        p.addr
    );
    let (_, body) = admin(p.admin_addr, &soft, true).await;
    assert_eq!(body.trim(), "{\"purged\":true,\"soft\":true}");
    assert_eq!(c.get(tagged[2]).await.x_cache(), "REVALIDATED");
    assert_eq!(o.not_modified(tagged[2]), 1);
    let (_, body) = admin(p.admin_addr, "/purge?tag=t2&soft=1", true).await;
    assert_eq!(body.trim(), "{\"purged\":2,\"soft\":true}");
    assert_eq!(c.get(tagged[2]).await.x_cache(), "REVALIDATED");
    let (s, _) = admin(p.admin_addr, "/purge?tag=t2&url=http://x/", true).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "one selector at a time");
    p.shutdown().await;
}
