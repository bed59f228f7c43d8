//! What one client's credentials fetch never reaches another client (RFC 9111 §3.5, and
//! Varnish's builtin rule for `Cookie`): one test for each path that stores a response, against
//! an origin that answers each caller with its own page (`/personal/`, which says whom it served
//! in its body and in `x-for`). Freshness runs on the proxy's injected clock.

mod support;

use http::Method;
use std::time::Duration;
use support::origin::{self, TestOrigin};
use support::proxy::{start, Got, Http};

const ADMIT_ALL: &str = "[admission]\npolicy = \"admit-all\"";

fn who(g: &Got) -> (&str, Option<&str>) {
    (
        std::str::from_utf8(g.bytes()).unwrap_or("?"),
        g.header("x-for"),
    )
}

async fn get_as(c: &Http, path: &str, credential: Option<(&str, &str)>) -> Got {
    let headers: Vec<(&str, &str)> = credential.into_iter().collect();
    c.send(Method::GET, path, &headers).await
}

/// Polls until the origin has seen `n` requests for `path` (bounded: 5 s).
async fn origin_saw(o: &TestOrigin, path: &str, n: u64) {
    for _ in 0..500 {
        if o.count(path) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the origin never saw {n} requests for {path}");
}

/// The attack as found: a stale object allowing `stale-while-revalidate` is found by a client
/// with credentials; the background refresh must not fetch with them, or the next anonymous
/// client is served that client's page as a HIT. With admit-all and with the default policy.
#[tokio::test]
async fn a_background_refresh_never_carries_a_clients_credentials_into_the_store() {
    let swr = "max-age%3D1%2C%20stale-while-revalidate%3D60";
    let public = "public%2C%20max-age%3D1%2C%20stale-while-revalidate%3D60";
    for config in [ADMIT_ALL, ""] {
        for credential in [
            ("authorization", "Bearer alice"),
            ("cookie", "session=alice"),
        ] {
            for cc in [swr, public] {
                let case = format!("{config:?} {credential:?} {cc}");
                let o = origin::start().await;
                let (p, clock) = start(&o.url(), config).await;
                let c = Http::new(p.addr);
                let path = format!("/personal/swr?cc={cc}");
                // Stored from anonymous requests (the default policy stores on the second).
                let mut stored = false;
                for _ in 0..2 {
                    let g = c.get(&path).await;
                    assert_eq!(who(&g), ("for=anonymous", Some("anonymous")), "{case}");
                    stored |= g.x_cache() == "MISS";
                }
                assert!(stored, "{case}: stored by the second request");
                clock.advance(Duration::from_secs(2));
                let g = get_as(&c, &path, Some(credential)).await;
                // A stored object not marked for `Authorization` does not answer it (its own
                // fetch, not stored); any other is served stale and refreshed behind.
                let own_fetch = credential.0 == "authorization" && cc == swr;
                let expected = if own_fetch { "BYPASS" } else { "STALE" };
                assert_eq!(g.x_cache(), expected, "{case}");
                // The refresh lands: a 304 to an anonymous conditional request.
                let mut refreshed = None;
                for _ in 0..250 {
                    let g = c.get(&path).await;
                    if g.x_cache() == "HIT" {
                        refreshed = Some(g);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let g = refreshed.expect("the background refresh completed");
                assert_eq!(
                    who(&g),
                    ("for=anonymous", Some("anonymous")),
                    "{case}: another client's page was stored"
                );
                assert_eq!(
                    o.credentialed(),
                    u64::from(own_fetch),
                    "{case}: the refresh sent the client's credentials"
                );
                p.shutdown().await;
            }
        }
    }
}

/// Web cache deception: `/account/x.css` fetched with a session cookie, with only heuristic
/// freshness, is not stored for others; the same with `public` is.
#[tokio::test]
async fn what_a_cookie_fetches_is_shared_only_when_the_response_says_public() {
    let o = origin::start().await;
    let (p, _clock) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let alice = Some(("cookie", "session=alice"));
    let path = "/personal/account/x.css";
    let g = get_as(&c, path, alice).await;
    assert_eq!(who(&g).0, "for=session=alice");
    assert_eq!(g.x_cache(), "BYPASS");
    assert!(
        g.header("cache-status")
            .is_some_and(|s| s.contains("detail=cookie-request")),
        "{:?}",
        g.header("cache-status")
    );
    let g = c.get(path).await;
    assert_eq!((g.x_cache(), who(&g).0), ("MISS", "for=anonymous"));
    assert_eq!(c.get(path).await.x_cache(), "HIT");
    // A cookie client is served the shared copy.
    let g = get_as(&c, path, alice).await;
    assert_eq!((g.x_cache(), who(&g).0), ("HIT", "for=anonymous"));
    assert_eq!(o.count(path), 2);

    // `max-age` alone does not make it shared; `public` and `s-maxage` do.
    for (cc, shared) in [
        ("max-age%3D60", false),
        ("public%2C%20max-age%3D60", true),
        ("s-maxage%3D60", true),
    ] {
        let path = format!("/personal/explicit?cc={cc}");
        let g = get_as(&c, &path, alice).await;
        assert_eq!(g.x_cache(), if shared { "MISS" } else { "BYPASS" }, "{cc}");
        let g = c.get(&path).await;
        if shared {
            assert_eq!((g.x_cache(), who(&g).0), ("HIT", "for=session=alice"));
        } else {
            assert_eq!((g.x_cache(), who(&g).0), ("MISS", "for=anonymous"));
        }
    }
    p.shutdown().await;
}

/// `cache.share_cookie_requests = true` gives RFC 9111 alone: `Cookie` is any other field.
#[tokio::test]
async fn share_cookie_requests_restores_the_rfc_rule() {
    let o = origin::start().await;
    let extra = format!("{ADMIT_ALL}\n[cache]\nshare_cookie_requests = true");
    let (p, _clock) = start(&o.url(), &extra).await;
    let c = Http::new(p.addr);
    let path = "/personal/rfc?cc=max-age%3D60";
    let g = get_as(&c, path, Some(("cookie", "theme=dark"))).await;
    assert_eq!(g.x_cache(), "MISS");
    let g = c.get(path).await;
    assert_eq!((g.x_cache(), who(&g).0), ("HIT", "for=theme=dark"));
    p.shutdown().await;
}

/// A coalesced fetch led by a client with credentials: its followers never take its answer
/// unless it was stored for everyone.
#[tokio::test]
async fn a_coalesced_leaders_own_page_never_reaches_its_followers() {
    for credential in [
        ("authorization", "Bearer alice"),
        ("cookie", "session=alice"),
    ] {
        let o = origin::start().await;
        let (p, _clock) = start(&o.url(), ADMIT_ALL).await;
        let path = "/personal/co?cc=max-age%3D60&slow=300";
        let leader = {
            let c = Http::new(p.addr);
            tokio::spawn(async move { get_as(&c, path, Some(credential)).await })
        };
        // The follower arrives while the leader's fetch is at the origin.
        origin_saw(&o, path, 1).await;
        let c = Http::new(p.addr);
        let follower = c.get(path).await;
        let leader = leader.await.expect("leader");
        assert_eq!(who(&leader).0, format!("for={}", credential.1));
        assert_eq!(
            who(&follower),
            ("for=anonymous", Some("anonymous")),
            "{credential:?}"
        );
        let g = c.get(path).await;
        assert_eq!((g.x_cache(), who(&g).0), ("HIT", "for=anonymous"));
        p.shutdown().await;
    }
}

/// A stale shared object revalidated for a client with a cookie: the 304 (or the full
/// response) it gets is that client's, and must not rewrite what others are served.
#[tokio::test]
async fn a_revalidation_with_a_cookie_does_not_rewrite_the_shared_copy() {
    // same_etag: the origin answers alice's conditional request with a 304 carrying
    // `x-for: session=alice`; without it, with her whole page.
    for path in [
        "/personal/rv304?cc=max-age%3D10&same_etag=1",
        "/personal/rv200?cc=max-age%3D10",
    ] {
        let o = origin::start().await;
        let (p, clock) = start(&o.url(), ADMIT_ALL).await;
        let c = Http::new(p.addr);
        assert_eq!(c.get(path).await.x_cache(), "MISS");
        clock.advance(Duration::from_secs(11));
        let g = get_as(&c, path, Some(("cookie", "session=alice"))).await;
        assert_eq!(g.header("x-for"), Some("session=alice"), "{path}");
        let g = c.get(path).await;
        assert_eq!(
            (who(&g).0, g.header("x-for")),
            ("for=anonymous", Some("anonymous")),
            "{path}: alice's answer was stored for everyone ({})",
            g.x_cache()
        );
        p.shutdown().await;
    }
}

/// An origin that reflects request fields without `Vary`: by default the reflected fields do
/// not reach it (nothing of one client's shapes what another is served), or are part of the
/// key (`Accept-Language`); a field the operator forwards is keyed unless listed unkeyed.
#[tokio::test]
async fn forwarded_fields_are_keyed_unless_listed_unkeyed() {
    let o = origin::start().await;
    let (p, clock) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let evil = [
        ("origin", "https://evil.example"),
        ("user-agent", "<script>evil()</script>"),
        ("referer", "https://evil.example/"),
        ("accept-language", "<script>evil()</script>"),
    ];
    let path = "/reflect/default";
    let g = c.send(Method::GET, path, &evil).await;
    assert_eq!(g.x_cache(), "MISS");
    assert_eq!(
        std::str::from_utf8(g.bytes()).unwrap(),
        "ua=- referer=- lang=<script>evil()</script>",
        "User-Agent and Referer are not forwarded by default; Accept-Language is"
    );
    assert_eq!(g.header("access-control-allow-origin"), Some("-"));
    // Another client (another language, or none) is not served the first one's answer.
    let plain = [("accept-language", "en")];
    let g = c.send(Method::GET, path, &plain).await;
    assert_eq!(
        (g.x_cache(), std::str::from_utf8(g.bytes()).unwrap()),
        ("MISS", "ua=- referer=- lang=en")
    );
    let g = c.get(path).await;
    assert_eq!(
        (g.x_cache(), std::str::from_utf8(g.bytes()).unwrap()),
        ("MISS", "ua=- referer=- lang=-")
    );
    // Each is a HIT for its own value.
    let g = c.send(Method::GET, path, &plain).await;
    assert_eq!(
        (g.x_cache(), std::str::from_utf8(g.bytes()).unwrap()),
        ("HIT", "ua=- referer=- lang=en")
    );
    // A purge by URL reaches every keyed entry.
    let url = format!("http%3A%2F%2F{}%2Freflect%2Fdefault", p.addr);
    let (status, _) = support::proxy::admin(p.admin_addr, &format!("/purge?url={url}"), true).await;
    assert!(status.is_success(), "{status}");
    for h in [&evil[..], &plain[..], &[]] {
        assert_eq!(c.send(Method::GET, path, h).await.x_cache(), "MISS");
    }
    // An unsafe request invalidates them too (RFC 9111 §4.4), without scanning the store.
    assert_eq!(c.send(Method::GET, path, &plain).await.x_cache(), "HIT");
    clock.advance(Duration::from_secs(1));
    let post = c.send(Method::POST, path, &[]).await;
    assert_eq!(post.status, 200);
    for h in [&plain[..], &[]] {
        assert_eq!(c.send(Method::GET, path, h).await.x_cache(), "MISS");
    }
    assert_eq!(c.send(Method::GET, path, &plain).await.x_cache(), "HIT");
    p.shutdown().await;

    // The operator forwards Origin: it is keyed, so each Origin gets its own ACAO.
    let extra = format!(
        "{ADMIT_ALL}\n[cache]\nforwarded_request_headers = [\"origin\", \"user-agent\"]\n\
         forwarded_unkeyed_headers = [\"user-agent\"]"
    );
    let (p, _clock) = start(&o.url(), &extra).await;
    let c = Http::new(p.addr);
    let path = "/reflect/cors";
    let g = c.send(Method::GET, path, &evil).await;
    assert_eq!(
        g.header("access-control-allow-origin"),
        Some("https://evil.example")
    );
    let good = [("origin", "https://good.example")];
    let g = c.send(Method::GET, path, &good).await;
    assert_eq!(
        (g.x_cache(), g.header("access-control-allow-origin")),
        ("MISS", Some("https://good.example"))
    );
    let g = c.get(path).await;
    assert_eq!(
        (g.x_cache(), g.header("access-control-allow-origin")),
        ("MISS", Some("-"))
    );
    // User-Agent is forwarded but unkeyed by the operator's word: one entry for all agents.
    let g = c
        .send(Method::GET, path, &[("user-agent", "other/1")])
        .await;
    assert_eq!(
        (g.x_cache(), std::str::from_utf8(g.bytes()).unwrap()),
        ("HIT", "ua=- referer=- lang=-")
    );
    p.shutdown().await;
}

/// The flash tier takes what the rule allows and nothing else: with memory deferring and the
/// disk admitting at once, a page fetched with a session cookie is not written to disk, and the
/// anonymous page stored after it is served from there (and promoted) to a cookie client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flash_tier_stores_no_clients_own_page() {
    let d = std::env::temp_dir().join(format!("secondhit-private-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let config = format!(
        "[admission]\npolicy = \"nth-hit:16\"\ndisk = \"admit-all\"\n\
         [cache]\ncapacity = \"1MB\"\n\
         [cache.disk]\ndir = \"{}\"\ncapacity = \"4MiB\"\nblock_size = \"1MiB\"\n",
        d.display()
    );
    let o = origin::start().await;
    let (p, _clock) = start(&o.url(), &config).await;
    let c = Http::new(p.addr);
    let path = "/personal/disk/x.css";
    let alice = Some(("cookie", "session=alice"));
    let from_disk = |g: &Got| {
        g.x_cache() == "HIT"
            && g.header("cache-status")
                .is_some_and(|s| s.contains("detail=disk"))
    };
    let g = get_as(&c, path, alice).await;
    assert_eq!((g.x_cache(), who(&g).0), ("BYPASS", "for=session=alice"));
    let g = c.get(path).await;
    assert!(!from_disk(&g), "alice's page came back from disk");
    assert_eq!(who(&g).0, "for=anonymous");
    // The anonymous page went to disk (written at once); a cookie client gets it from there.
    let mut got = None;
    for _ in 0..100 {
        let g = get_as(&c, path, alice).await;
        if from_disk(&g) {
            got = Some(g);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let g = got.expect("the anonymous page was served from disk");
    assert_eq!(who(&g), ("for=anonymous", Some("anonymous")));
    assert_eq!(o.count(path), 2);
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&d);
}
