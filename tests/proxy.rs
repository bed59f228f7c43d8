//! The proxy against a real origin, both on 127.0.0.1:0: every caching rule, asserted on the
//! bytes the client gets and on what the origin saw.

mod support;

use http::{Method, StatusCode};
use std::time::Duration;
use support::origin::{self, content};
use support::proxy::{admin, raw, start, Http};

#[tokio::test]
async fn first_request_deferred_second_miss_third_hit_with_identical_bytes() {
    let o = origin::start().await;
    let (p, _clock) = start(&o.url(), "").await;
    let c = Http::new(p.addr);
    let want = content("/cache/a", 5000);
    let outcomes: Vec<String> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            let g = c.get("/cache/a?size=5000").await;
            assert_eq!(g.status, StatusCode::OK);
            assert_eq!(g.bytes(), &want[..]);
            assert_eq!(g.header("content-length"), Some("5000"));
            v.push(g.x_cache().to_string());
        }
        v
    };
    assert_eq!(outcomes, ["DEFERRED", "MISS", "HIT", "HIT"]);
    assert_eq!(o.count("/cache/a?size=5000"), 2);
    let g = c.get("/cache/a?size=5000").await;
    assert_eq!(g.header("age"), Some("0"));
    // Freshness counts the response's age from its Date (one-second resolution): 59 or 60 s left.
    let status = g.header("cache-status").unwrap();
    assert!(
        status == "secondhit; hit; ttl=60" || status == "secondhit; hit; ttl=59",
        "{status}"
    );
    assert!(g.header("via").unwrap().contains("secondhit"));
    assert_eq!(p.proxy.metrics().stores(), 1);
    p.shutdown().await;
}

#[tokio::test]
async fn admit_all_stores_on_the_first_request() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[admission]\npolicy = \"admit-all\"").await;
    let c = Http::new(p.addr);
    assert_eq!(c.get("/cache/b").await.x_cache(), "MISS");
    assert_eq!(c.get("/cache/b").await.x_cache(), "HIT");
    assert_eq!(o.count("/cache/b"), 1);
    p.shutdown().await;
}

#[tokio::test]
async fn non_cacheable_responses_and_requests_are_never_stored() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "").await;
    let c = Http::new(p.addr);
    for path in ["/nostore/x", "/private/x", "/cookie/x", "/varystar/x"] {
        for _ in 0..3 {
            let g = c.get(path).await;
            assert_eq!(g.x_cache(), "BYPASS", "{path}");
            assert_eq!(
                g.bytes(),
                &content(path.split('?').next().unwrap(), 1000)[..]
            );
        }
        assert_eq!(o.count(path), 3, "{path}");
    }
    // The Set-Cookie reached the client that caused it, and was never stored for others.
    assert_eq!(
        c.get("/cookie/x").await.header("set-cookie"),
        Some("session=secret")
    );
    // Requests: POST, no-store, Authorization without public / s-maxage.
    for _ in 0..3 {
        assert_eq!(
            c.send(Method::POST, "/cache/post", &[]).await.x_cache(),
            "BYPASS"
        );
        let g = c
            .send(Method::GET, "/cache/ns", &[("cache-control", "no-store")])
            .await;
        assert_eq!(g.x_cache(), "BYPASS");
        let g = c
            .send(Method::GET, "/auth/x", &[("authorization", "Bearer t")])
            .await;
        assert_eq!(g.x_cache(), "BYPASS");
    }
    assert_eq!(
        (
            o.count("/cache/post"),
            o.count("/cache/ns"),
            o.count("/auth/x")
        ),
        (3, 3, 3)
    );
    assert_eq!(p.proxy.metrics().stores(), 0);
    // A cacheable 404 is stored like a 200; so is a 500 with explicit freshness (RFC 9111 §3),
    // and a 200 with only Last-Modified gets heuristic freshness (§4.2.2).
    for (path, code) in [
        ("/missing/y", StatusCode::NOT_FOUND),
        ("/error/y", StatusCode::INTERNAL_SERVER_ERROR),
        ("/nocc/y", StatusCode::OK),
    ] {
        for want in ["DEFERRED", "MISS", "HIT"] {
            let g = c.get(path).await;
            assert_eq!((g.status, g.x_cache()), (code, want), "{path}");
        }
    }
    p.shutdown().await;
}

#[tokio::test]
async fn conditional_range_and_head_are_answered_from_the_cache() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[admission]\npolicy = \"admit-all\"").await;
    let c = Http::new(p.addr);
    let path = "/cache/r?size=1000";
    let body = content("/cache/r", 1000);
    assert_eq!(c.get(path).await.x_cache(), "MISS");
    let etag = c.get(path).await.header("etag").unwrap().to_string();

    let g = c.send(Method::GET, path, &[("if-none-match", &etag)]).await;
    assert_eq!((g.status, g.x_cache()), (StatusCode::NOT_MODIFIED, "HIT"));
    assert!(g.bytes().is_empty());
    assert_eq!(g.header("etag"), Some(etag.as_str()));
    let g = c
        .send(
            Method::GET,
            path,
            &[("if-modified-since", "Thu, 02 Jan 2025 00:00:00 GMT")],
        )
        .await;
    assert_eq!(g.status, StatusCode::NOT_MODIFIED);
    let g = c
        .send(Method::GET, path, &[("if-none-match", "\"other\"")])
        .await;
    assert_eq!(g.status, StatusCode::OK);

    let g = c.send(Method::GET, path, &[("range", "bytes=10-19")]).await;
    assert_eq!(
        (g.status, g.x_cache()),
        (StatusCode::PARTIAL_CONTENT, "HIT")
    );
    assert_eq!(g.header("content-range"), Some("bytes 10-19/1000"));
    assert_eq!(g.bytes(), &body[10..20]);
    let g = c.send(Method::GET, path, &[("range", "bytes=-5")]).await;
    assert_eq!(g.bytes(), &body[995..]);
    let g = c.send(Method::GET, path, &[("range", "bytes=5000-")]).await;
    assert_eq!(g.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(g.header("content-range"), Some("bytes */1000"));

    let g = c.send(Method::HEAD, path, &[]).await;
    assert_eq!((g.status, g.x_cache()), (StatusCode::OK, "HIT"));
    assert_eq!(g.header("content-length"), Some("1000"));
    assert!(g.bytes().is_empty());
    assert_eq!(o.count(path), 1);

    // On a miss, HEAD and Range are forwarded and never stored.
    for _ in 0..2 {
        let g = c.send(Method::HEAD, "/cache/h", &[]).await;
        assert_eq!(g.x_cache(), "BYPASS");
        let g = c
            .send(Method::GET, "/cache/rg", &[("range", "bytes=0-9")])
            .await;
        assert_eq!(g.x_cache(), "BYPASS");
    }
    assert_eq!((o.count("/cache/h"), o.count("/cache/rg")), (2, 2));
    p.shutdown().await;
}

#[tokio::test]
async fn vary_stores_one_variant_per_header_value() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[admission]\npolicy = \"admit-all\"").await;
    let c = Http::new(p.addr);
    for lang in ["en", "fr", "en", "fr"] {
        let g = c
            .send(Method::GET, "/vary/page", &[("accept-language", lang)])
            .await;
        assert_eq!(g.bytes(), format!("language={lang}").as_bytes());
    }
    assert_eq!(o.count("/vary/page"), 2);
    let g = c
        .send(Method::GET, "/vary/page", &[("accept-language", "de")])
        .await;
    assert_eq!((g.x_cache(), g.bytes()), ("MISS", &b"language=de"[..]));
    p.shutdown().await;
}

/// `Accept-Encoding` strings as browsers, HTTP libraries and tools send them (Chrome, Edge and
/// Firefox today; Safari and older Chrome; IE 11 and Python requests; curl --compressed, new and
/// old; Go and OkHttp; Node's fetch; wget; a weighted list; the same wishes respelt), and no
/// field at all.
const ACCEPT_ENCODINGS: [Option<&str>; 14] = [
    Some("gzip, deflate, br, zstd"),
    Some("gzip, deflate, br"),
    Some("gzip, deflate"),
    Some("deflate, gzip, br, zstd"),
    Some("deflate, gzip"),
    Some("gzip"),
    Some("br, gzip, deflate"),
    Some("identity"),
    Some("br;q=1.0, gzip;q=0.8, *;q=0.1"),
    Some("gzip,deflate,br"),
    Some("GZIP, Deflate"),
    Some("gzip;q=1.0, identity; q=0.5, *;q=0"),
    Some("zstd, gzip;q=0.5"),
    None,
];

/// Fetches `/vary-ae/page` (Vary: Accept-Encoding) once per string, twice over; returns the
/// origin's fetches and the codings it received.
async fn variants_for(accept_encoding: &str) -> (u64, Vec<String>) {
    let o = origin::start().await;
    let config = format!(
        "[admission]\npolicy = \"admit-all\"\n[cache]\naccept_encoding = {accept_encoding}"
    );
    let (p, _) = start(&o.url(), &config).await;
    let c = Http::new(p.addr);
    let mut seen = Vec::new();
    for round in 0..2 {
        for ae in ACCEPT_ENCODINGS {
            let h: Vec<(&str, &str)> = ae.map(|v| ("accept-encoding", v)).into_iter().collect();
            let g = c.send(Method::GET, "/vary-ae/page", &h).await;
            let body = String::from_utf8(g.bytes().to_vec()).unwrap();
            if round == 1 {
                assert_eq!(g.x_cache(), "HIT", "{ae:?}");
            } else if !seen.contains(&body) {
                seen.push(body);
            }
        }
    }
    let fetched = o.count("/vary-ae/page");
    p.shutdown().await;
    (fetched, seen)
}

#[tokio::test]
async fn accept_encoding_is_normalised_to_one_variant_per_coding() {
    // As sent: every spelling a variant of its own (whitespace and letter case already folded:
    // "gzip,deflate,br" is "gzip, deflate, br").
    let (before, _) = variants_for("[]").await;
    assert_eq!(before, 12);
    // Normalised: br, gzip or identity (no string here prefers zstd to br; "zstd, gzip;q=0.5"
    // gets zstd).
    let (after, seen) = variants_for("[\"br\", \"zstd\", \"gzip\"]").await;
    assert_eq!(after, 4, "{seen:?}");
    let mut seen = seen;
    seen.sort();
    assert_eq!(
        seen,
        [
            "accept-encoding=br",
            "accept-encoding=gzip",
            "accept-encoding=identity",
            "accept-encoding=zstd"
        ]
    );
}

#[tokio::test]
async fn expiry_follows_the_clock() {
    let o = origin::start().await;
    let (p, clock) = start(&o.url(), "[admission]\npolicy = \"admit-all\"").await;
    let c = Http::new(p.addr);
    assert_eq!(c.get("/short-ttl/a").await.x_cache(), "MISS");
    clock.advance(Duration::from_secs(4));
    let g = c.get("/short-ttl/a").await;
    assert_eq!((g.x_cache(), g.header("age")), ("HIT", Some("4")));
    clock.advance(Duration::from_secs(1)); // max-age=5 reached: stale
    assert_eq!(c.get("/short-ttl/a").await.x_cache(), "MISS");
    assert_eq!(o.count("/short-ttl/a"), 2);
    p.shutdown().await;
}

#[tokio::test]
async fn concurrent_misses_share_one_origin_fetch() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "").await;
    let c = std::sync::Arc::new(Http::new(p.addr));
    // First sighting: deferred. The next ten arrive together, admitted, and wait for one fetch.
    assert_eq!(c.get("/delay/x?size=20000").await.x_cache(), "DEFERRED");
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.get("/delay/x?size=20000").await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        let g = t.await.unwrap();
        assert_eq!(g.bytes(), &content("/delay/x", 20000)[..]);
        outcomes.push(g.x_cache().to_string());
    }
    outcomes.sort();
    assert_eq!(
        outcomes.iter().filter(|o| *o == "MISS").count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| *o == "HIT").count(),
        9,
        "{outcomes:?}"
    );
    assert_eq!(o.count("/delay/x?size=20000"), 2);
    p.shutdown().await;
}

#[tokio::test]
async fn cut_off_origin_bodies_are_never_stored() {
    let o = origin::start().await;
    let (p, _) = start(
        &o.url(),
        "[admission]\npolicy = \"admit-all\"\n[timeouts]\nfirst_byte = \"500ms\"",
    )
    .await;
    let c = Http::new(p.addr);
    // Streamed (larger than the read-ahead): the client sees the cut.
    for path in ["/short/a?size=200000", "/stall/a?size=200000"] {
        for _ in 0..2 {
            let g = c.get(path).await;
            assert_eq!(g.x_cache(), "MISS", "{path}: {:?}", g.headers);
            assert!(
                g.body.is_err(),
                "{path}: the client must see the cut, got {:?}",
                g.body
            );
        }
        assert_eq!(o.count(path), 2, "{path}: nothing was stored");
    }
    // Read whole before the head goes out: the failure is known in time for a 502.
    for path in ["/short/b?size=4000", "/stall/b?size=4000"] {
        for _ in 0..2 {
            let g = c.get(path).await;
            assert_eq!(
                (g.status, g.x_cache()),
                (StatusCode::BAD_GATEWAY, "ERROR"),
                "{path}"
            );
            let status = g.headers.get("cache-status").unwrap().to_str().unwrap();
            assert!(status.contains("detail=origin-body"), "{status}");
            assert!(g.body.is_ok(), "{path}: a whole 502, not a cut body");
        }
        assert_eq!(o.count(path), 2, "{path}: nothing was stored");
    }
    let (_, metrics) = admin(p.admin_addr, "/metrics", false).await;
    assert!(
        metrics.contains("secondhit_origin_errors_total{kind=\"body\"} 8"),
        "{metrics}"
    );
    assert_eq!(p.proxy.metrics().stores(), 0);
    // The next request on a good path behaves normally.
    assert_eq!(c.get("/cache/ok").await.x_cache(), "MISS");
    assert_eq!(c.get("/cache/ok").await.x_cache(), "HIT");
    p.shutdown().await;
}

#[tokio::test]
async fn a_filter_that_fills_before_its_window_ends_is_counted_apart() {
    let o = origin::start().await;
    let (p, clock) = start(
        &o.url(),
        "[admission]\nwindow = \"1h\"\nexpected_items = 20",
    )
    .await;
    let c = Http::new(p.addr);
    // 20 distinct keys fill a generation in 10 minutes of a 1 h window; the 21st miss rotates
    // it on count. 20 keys in 10 minutes is 120 an hour.
    // One Host on every run: the keys (and so the filter's false positives) do not depend on
    // the port the proxy got.
    for i in 0..20 {
        let got = c
            .send(
                Method::GET,
                &format!("/cache/k{i}"),
                &[("host", "fill.test")],
            )
            .await;
        assert_eq!(got.x_cache(), "DEFERRED");
        clock.advance(Duration::from_secs(30));
    }
    c.get("/cache/last").await;
    let (_, m) = admin(p.admin_addr, "/metrics", false).await;
    for line in [
        "secondhit_filter_rotations_total{trigger=\"time\"} 0",
        "secondhit_filter_rotations_total{trigger=\"count\"} 1",
        "secondhit_filter_keys_per_window 120",
    ] {
        assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
    }
    // A rotation on time is counted as one.
    clock.advance(Duration::from_secs(3600));
    c.get("/cache/later").await;
    let (_, m) = admin(p.admin_addr, "/metrics", false).await;
    assert!(
        m.contains("secondhit_filter_rotations_total{trigger=\"time\"} 1"),
        "{m}"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn origin_down_is_502_and_slow_origin_is_504() {
    // A port nothing listens on: bind, note it, close.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (p, _) = start(&format!("http://{dead}"), "").await;
    let g = Http::new(p.addr).get("/cache/a").await;
    assert_eq!((g.status, g.x_cache()), (StatusCode::BAD_GATEWAY, "ERROR"));
    p.shutdown().await;

    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[timeouts]\nfirst_byte = \"300ms\"").await;
    let g = Http::new(p.addr).get("/slow-headers/a").await;
    assert_eq!(
        (g.status, g.x_cache()),
        (StatusCode::GATEWAY_TIMEOUT, "ERROR")
    );
    let (_, metrics) = admin(p.admin_addr, "/metrics", false).await;
    assert!(
        metrics.contains("secondhit_origin_errors_total{kind=\"timeout\"} 1"),
        "{metrics}"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn never_an_open_proxy() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "").await;
    let r = raw(p.addr, b"GET http://evil.example/steal HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 421"), "{r}");
    let r = raw(
        p.addr,
        b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 405"), "{r}");
    let r = raw(
        p.addr,
        b"GET https://evil.example/ HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 421"), "{r}");
    assert_eq!(o.total(), 0, "the origin was never contacted");
    p.shutdown().await;

    // With only per-Host origins, any other Host is refused.
    let toml = format!("[hosts]\n\"site.test\" = \"{}\"", o.url());
    let config = secondhit::config::Config::from_toml(&format!(
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{toml}"
    ))
    .unwrap()
    .validate()
    .unwrap();
    let clock = std::sync::Arc::new(secondhit::clock::ManualClock::default());
    let p = secondhit::server::start(config, clock).await.unwrap();
    let r = raw(
        p.addr,
        b"GET /cache/a HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 421"), "{r}");
    assert_eq!(o.total(), 0);
    let r = raw(
        p.addr,
        b"GET /cache/a HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(o.count("/cache/a"), 1);
    p.shutdown().await;
}

#[tokio::test]
async fn purge_and_metrics_on_the_admin_listener() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[admission]\npolicy = \"admit-all\"").await;
    let c = Http::new(p.addr);
    c.get("/cache/p").await;
    assert_eq!(c.get("/cache/p").await.x_cache(), "HIT");
    let url = format!("http%3A%2F%2F{}%2Fcache%2Fp", p.addr);
    let (s, body) = admin(p.admin_addr, &format!("/purge?url={url}"), true).await;
    assert_eq!((s, body.trim()), (StatusCode::OK, "{\"purged\":true}"));
    assert_eq!(c.get("/cache/p").await.x_cache(), "MISS");
    let (s, _) = admin(p.admin_addr, &format!("/purge?url={url}"), false).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "purge needs POST");
    let (s, _) = admin(p.admin_addr, "/purge-all", true).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(c.get("/cache/p").await.x_cache(), "MISS");
    // Purge is not reachable from the public listener: it is just a path there.
    let g = c.send(Method::POST, "/purge-all", &[]).await;
    assert_eq!(g.x_cache(), "BYPASS");
    assert_eq!(c.get("/cache/p").await.x_cache(), "HIT");

    let (s, health) = admin(p.admin_addr, "/healthz", false).await;
    assert_eq!((s, health.trim()), (StatusCode::OK, "ok"));
    let (_, m) = admin(p.admin_addr, "/metrics", false).await;
    for line in [
        "secondhit_requests_total{outcome=\"hit\"} 2",
        "secondhit_requests_total{outcome=\"miss\"} 3",
        "secondhit_cache_writes_total 3",
        "secondhit_admission_total{decision=\"admit\"} 3",
        "secondhit_cache_entries 1",
    ] {
        assert!(m.contains(line), "{line} not in\n{m}");
    }
    p.shutdown().await;
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_requests() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "").await;
    let addr = p.addr;
    // The request is held at the origin until the proxy has stopped accepting.
    let gate = o.hold("/delay/s?size=3000");
    let slow = tokio::spawn(async move { Http::new(addr).get("/delay/s?size=3000").await });
    gate.arrivals(1).await;
    let stopping = tokio::spawn(p.shutdown());
    let mut refused = false;
    for _ in 0..2000 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(refused, "the proxy kept accepting after shutdown began");
    gate.open();
    stopping.await.unwrap();
    let g = slow.await.unwrap();
    assert_eq!(g.status, StatusCode::OK);
    assert_eq!(g.bytes(), &content("/delay/s", 3000)[..]);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer accepting"
    );
}

#[tokio::test]
async fn cleartext_http2_clients_are_served_too() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[admission]\npolicy = \"admit-all\"").await;
    let client: hyper_util::client::legacy::Client<_, Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let req = http::Request::get(format!("http://{}/cache/h2?size=3000", p.addr))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = client.request(req).await.unwrap();
        assert_eq!(resp.version(), http::Version::HTTP_2);
        let xc = resp.headers()["x-cache"].to_str().unwrap().to_string();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], &content("/cache/h2", 3000)[..]);
        seen.push(xc);
    }
    assert_eq!(seen, ["MISS", "HIT"]);
    assert_eq!(o.count("/cache/h2?size=3000"), 1);
    p.shutdown().await;
}
