//! Hostile input against the proxy: request smuggling, oversized requests, slow clients,
//! connection floods, poisoning through unkeyed headers, bad configuration files. Each attack
//! is refused without contacting the origin, or cannot change what others get.

mod support;

use http::{Method, StatusCode};
use std::time::Duration;
use support::origin;
use support::proxy::{admin, h2, raw, start, Http};
use support::raw_origin::RawOrigin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn smuggling_attempts_get_400_and_never_reach_the_origin() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "").await;
    let attacks: [&[u8]; 3] = [
        // Content-Length and Transfer-Encoding together on a GET (CL.TE).
        b"GET /cache/a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /cache/smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        // Two different Content-Lengths.
        b"POST /cache/a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nabcd",
        // obs-fold (a header continued on the next line).
        b"GET /cache/a HTTP/1.1\r\nHost: x\r\nX-Long: a\r\n  folded\r\n\r\n",
    ];
    for (i, a) in attacks.iter().enumerate() {
        let r = raw(p.addr, a).await;
        assert!(r.starts_with("HTTP/1.1 400"), "attack {i}: {r:?}");
    }
    assert_eq!(o.count("/cache/smuggled"), 0);
    assert_eq!(o.count("/cache/a"), 0, "no attack reached the origin");

    // On a POST, hyper reads CL + TE as chunked (RFC 9112 §6.3), forwards one re-serialised
    // request and closes the connection: the request hidden after the body is never parsed.
    let r = raw(
        p.addr,
        b"POST /cache/a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /cache/smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r:?}");
    assert_eq!(
        r.matches("HTTP/1.1 ").count(),
        1,
        "one response, then the connection closed"
    );
    assert!(r.contains("connection: close"));
    assert_eq!(o.count("/cache/a"), 1);
    assert_eq!(o.count("/cache/smuggled"), 0);
    p.shutdown().await;
}

#[tokio::test]
async fn oversized_requests_are_refused() {
    let o = origin::start().await;
    let (p, _) = start(
        &o.url(),
        "[limits]\nmax_uri_bytes = 2048\nmax_header_bytes = 16384\nmax_headers = 20",
    )
    .await;
    let long_uri = format!(
        "GET /cache/{} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "a".repeat(3000)
    );
    assert!(raw(p.addr, long_uri.as_bytes())
        .await
        .starts_with("HTTP/1.1 414"));
    let big_header = format!(
        "GET /cache/b HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "b".repeat(20_000)
    );
    assert!(raw(p.addr, big_header.as_bytes())
        .await
        .starts_with("HTTP/1.1 431"));
    let mut many = String::from("GET /cache/c HTTP/1.1\r\nHost: x\r\n");
    for i in 0..30 {
        many.push_str(&format!("X-H{i}: v\r\n"));
    }
    many.push_str("\r\n");
    assert!(raw(p.addr, many.as_bytes())
        .await
        .starts_with("HTTP/1.1 431"));
    assert_eq!(o.total(), 0);
    p.shutdown().await;
}

#[tokio::test]
async fn the_default_field_limit_is_100() {
    // The default is hyper's own (not passed to it, see server.rs): 100 fields pass, 101 fail.
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "").await;
    let head = |fields: usize| {
        let mut h = String::from("GET /cache/d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
        for i in 2..fields {
            h.push_str(&format!("X-H{i}: v\r\n"));
        }
        h + "\r\n"
    };
    let r = raw(p.addr, head(100).as_bytes()).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r:?}");
    let r = raw(p.addr, head(101).as_bytes()).await;
    assert!(r.starts_with("HTTP/1.1 431"), "{r:?}");
    assert_eq!(o.count("/cache/d"), 1);
    p.shutdown().await;
}

#[tokio::test]
async fn slow_loris_is_cut_off_after_the_header_timeout() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[timeouts]\nclient_header = \"300ms\"").await;
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /cache/a HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap(); // never finished
    let mut buf = Vec::new();
    let started = std::time::Instant::now();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the proxy must close the connection");
    assert!(started.elapsed() < Duration::from_secs(3));
    let text = String::from_utf8_lossy(&buf);
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text}"
    );
    assert_eq!(o.total(), 0);
    p.shutdown().await;
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_for_a_free_slot() {
    let o = origin::start().await;
    // Three worker threads share the limit: none of them may serve a third connection.
    let (p, _) = start(&o.url(), "workers = 3\n[limits]\nmax_connections = 2").await;
    // Two idle keep-alive connections take both slots.
    let a = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    let b = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let addr = p.addr;
    let third = tokio::spawn(async move {
        raw(
            addr,
            b"GET /cache/t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!third.is_finished(), "served beyond the connection limit");
    drop(a);
    let r = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .unwrap()
        .unwrap();
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    drop(b);
    p.shutdown().await;
}

#[tokio::test]
async fn unkeyed_headers_cannot_poison_the_cache() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[admission]\npolicy = \"admit-all\"").await;
    let c = Http::new(p.addr);
    let g = c
        .send(
            Method::GET,
            "/echo/page",
            &[
                ("x-forwarded-host", "evil.example"),
                ("x-original-url", "/admin"),
            ],
        )
        .await;
    assert_eq!(g.x_cache(), "MISS");
    assert_eq!(
        g.bytes(),
        b"x-forwarded-host=none",
        "the origin never saw the header"
    );
    let g = c.get("/echo/page").await;
    assert_eq!(
        (g.x_cache(), g.bytes()),
        ("HIT", &b"x-forwarded-host=none"[..])
    );
    p.shutdown().await;
}

#[tokio::test]
async fn cookie_requests_can_be_kept_out_of_the_cache() {
    let o = origin::start().await;
    let (p, _) = start(
        &o.url(),
        "[cache]\nbypass_cookie_requests = true\n[admission]\npolicy = \"admit-all\"",
    )
    .await;
    let c = Http::new(p.addr);
    for _ in 0..2 {
        let g = c
            .send(Method::GET, "/cache/k", &[("cookie", "session=alice")])
            .await;
        assert_eq!(g.x_cache(), "BYPASS");
    }
    assert_eq!(c.get("/cache/k").await.x_cache(), "MISS");
    assert_eq!(c.get("/cache/k").await.x_cache(), "HIT");
    // With the cookie, still bypassed: alice never gets the shared copy, nor makes one.
    let g = c
        .send(Method::GET, "/cache/k", &[("cookie", "session=alice")])
        .await;
    assert_eq!((g.status, g.x_cache()), (StatusCode::OK, "BYPASS"));
    p.shutdown().await;
}

#[test]
fn bad_config_files_give_one_line_naming_the_file_and_place() {
    let dir = std::env::temp_dir().join(format!("secondhit-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "syntax.toml",
            "origin = \"http://127.0.0.1:1\"\n[cache\ncapacity = 1\n",
            "line 2",
        ),
        (
            "field.toml",
            "origin = \"http://127.0.0.1:1\"\n[cache]\ncapacty = \"1MiB\"\n",
            "capacty",
        ),
        (
            "value.toml",
            "origin = \"http://127.0.0.1:1\"\n[admission]\nfpr = 7.0\n",
            "got 7",
        ),
        ("binary.toml", "\u{0}\u{1}\u{2}garbage\u{ff}", "binary.toml"),
    ];
    for (name, text, want) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(support::bin())
            .args(["serve", "--config", path.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
        if name != "value.toml" {
            assert!(err.contains(name), "{name}: {err}");
        }
    }
    let out = std::process::Command::new(support::bin())
        .args(["serve", "--config", "/nonexistent/secondhit.toml"])
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("/nonexistent/secondhit.toml") && err.lines().count() == 1,
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

// ---- Issue 16: one client must never choose what another receives. ----

fn admit_all() -> &'static str {
    "[admission]\npolicy = \"admit-all\""
}

#[tokio::test]
async fn a_host_with_a_slash_is_refused_and_cannot_reach_another_path() {
    let o = RawOrigin::cacheable().await;
    let (p, _) = start(&o.url(), admit_all()).await;
    // The attack: stored under http://a.test/static/x1 before the fix.
    let r = raw(
        p.addr,
        b"GET /x1 HTTP/1.1\r\nHost: a.test/static\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(r.contains("detail=host-bad-byte"), "{r}");
    assert!(o.requests().is_empty(), "nothing reached the origin");
    let victim = raw(
        p.addr,
        b"GET /static/x1 HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(victim.contains("x-cache: MISS"), "{victim}");
    assert!(
        victim.ends_with("answer to GET /static/x1 HTTP/1.1"),
        "{victim}"
    );
    // Other spellings that are not a host.
    for host in [
        "a.test?x",
        "a.test#x",
        "a.test\\x",
        "user@a.test",
        "a.test:99999",
        "a.test..",
    ] {
        let req = format!("GET /x1 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let r = raw(p.addr, req.as_bytes()).await;
        assert!(r.starts_with("HTTP/1.1 400"), "{host}: {r}");
    }
    // Over HTTP/2, a host field without :authority is checked the same way.
    let req = http::Request::get("/x1")
        .header("host", "a.test/static")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let g = h2(p.addr, req).await;
    assert_eq!(g.status, StatusCode::BAD_REQUEST);
    assert_eq!(o.requests().len(), 1, "only the victim's request");
    p.shutdown().await;
}

#[tokio::test]
async fn a_host_with_a_slash_never_falls_back_to_the_default_origin() {
    let default = RawOrigin::cacheable().await;
    let img = RawOrigin::cacheable().await;
    let extra = format!("{}\n[hosts]\n\"img.test\" = \"{}\"", admit_all(), img.url());
    let (p, _) = start(&default.url(), &extra).await;
    let r = raw(
        p.addr,
        b"GET /a HTTP/1.1\r\nHost: img.test/static\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    // Spellings of img.test reach img.test's origin, keyed as one host.
    for host in ["IMG.test", "img.test.", "img.test:80"] {
        let req = format!("GET /a HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let r = raw(p.addr, req.as_bytes()).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{host}: {r}");
    }
    assert!(
        default.requests().is_empty(),
        "the default origin was never asked"
    );
    let seen = img.requests();
    assert_eq!(
        seen.len(),
        1,
        "one fetch, then hits under one key: {seen:?}"
    );
    assert!(seen[0].contains("host: img.test\r\n"), "{}", seen[0]);
    p.shutdown().await;
}

#[tokio::test]
async fn the_origin_sees_exactly_the_host_the_key_used() {
    let default = RawOrigin::cacheable().await;
    let img = RawOrigin::cacheable().await;
    let extra = format!("{}\n[hosts]\n\"img.test\" = \"{}\"", admit_all(), img.url());
    let (p, _) = start(&default.url(), &extra).await;
    // Absolute form: the target's authority wins; the received Host is ignored (RFC 9112 §3.2.2).
    let r = raw(
        p.addr,
        b"GET http://img.test/a HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let seen = img.requests();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].contains("host: img.test\r\n"), "{}", seen[0]);
    assert!(!seen[0].contains("evil"), "{}", seen[0]);
    // Two Host fields: 400, whatever their order.
    let r = raw(
        p.addr,
        b"GET /a HTTP/1.1\r\nHost: img.test\r\nHost: evil.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    // HTTP/2 with :authority img.test and host evil.test: 400 (RFC 9113 §8.3.1).
    let req = http::Request::get("http://img.test/b")
        .header("host", "evil.test")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    assert_eq!(h2(p.addr, req).await.status, StatusCode::BAD_REQUEST);
    // The same with agreeing fields is served.
    let req = http::Request::get("http://img.test/b")
        .header("host", "IMG.test")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    assert_eq!(h2(p.addr, req).await.status, StatusCode::OK);
    let seen = img.requests();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen
        .iter()
        .all(|r| r.contains("host: img.test\r\n") && !r.contains("evil")));
    assert!(default.requests().is_empty());
    p.shutdown().await;
}

/// A proxy that forwards X-V (so responses can vary on it) and admits everything.
async fn vary_proxy(o: &origin::TestOrigin) -> support::proxy::RunningProxy {
    let extra =
        "[admission]\npolicy = \"admit-all\"\n[cache]\nforwarded_request_headers = [\"x-v\"]\nforwarded_unkeyed_headers = [\"x-v\"]";
    start(&o.url(), extra).await.0
}

#[tokio::test]
async fn a_selecting_value_that_is_not_text_is_its_own_variant() {
    let o = origin::start().await;
    let p = vary_proxy(&o).await;
    // Raw requests name the proxy's address as Host, as the client below does: one key.
    let evil = [
        format!("GET /vary-xv/a HTTP/1.1\r\nHost: {}\r\nX-V: ", p.addr).into_bytes(),
        b"\xffEVIL\r\nConnection: close\r\n\r\n".to_vec(),
    ]
    .concat();
    let attack = raw(p.addr, &evil).await;
    assert!(attack.ends_with("x-v=\\xffEVIL"), "{attack}");
    assert!(attack.contains("x-cache: MISS"), "{attack}");
    let c = Http::new(p.addr);
    let victim = c.get("/vary-xv/a").await;
    assert_eq!(
        (victim.x_cache(), victim.bytes()),
        ("MISS", &b"x-v=none"[..]),
        "a client without X-V never gets the attacker's variant"
    );
    assert_eq!(c.get("/vary-xv/a").await.bytes(), b"x-v=none");
    let again = raw(p.addr, &evil).await;
    assert!(
        again.contains("x-cache: HIT") && again.ends_with("x-v=\\xffEVIL"),
        "{again}"
    );
    assert_eq!(o.count("/vary-xv/a"), 2);
    p.shutdown().await;
}

#[tokio::test]
async fn a_selecting_header_named_in_connection_is_keyed_as_absent() {
    let o = origin::start().await;
    let p = vary_proxy(&o).await;
    // X-V is hop-by-hop here: the origin never sees it, so the response is the "none" variant.
    let req = format!(
        "GET /vary-xv/b HTTP/1.1\r\nHost: {}\r\nX-V: good\r\nConnection: X-V, close\r\n\r\n",
        p.addr
    );
    let attack = raw(p.addr, req.as_bytes()).await;
    assert!(
        attack.ends_with("x-v=none") && attack.contains("x-cache: MISS"),
        "{attack}"
    );
    let c = Http::new(p.addr);
    let victim = c.send(Method::GET, "/vary-xv/b", &[("x-v", "good")]).await;
    assert_eq!(
        (victim.x_cache(), victim.bytes()),
        ("MISS", &b"x-v=good"[..])
    );
    let plain = c.get("/vary-xv/b").await;
    assert_eq!((plain.x_cache(), plain.bytes()), ("HIT", &b"x-v=none"[..]));
    p.shutdown().await;
}

/// Polls `/metrics` (10 s at most) until `n` requests wait on another request's fetch.
async fn until_waiting(p: &support::proxy::RunningProxy, n: u64) {
    let want = format!("secondhit_coalescing_waiters {n}\n");
    for _ in 0..2000 {
        if admin(p.admin_addr, "/metrics", false)
            .await
            .1
            .contains(&want)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{n} requests never waited on a fetch");
}

#[tokio::test]
async fn a_coalesced_request_takes_the_leaders_object_only_for_its_own_variant() {
    let o = origin::start().await;
    let p = vary_proxy(&o).await;
    let send = |path: &'static str, xv: &'static str| {
        let c = Http::new(p.addr);
        tokio::spawn(async move { c.send(Method::GET, path, &[("x-v", xv)]).await })
    };
    // The leader's fetch is held at the origin until the follower waits on it.
    let gate = o.hold("/vary-xv/b1");
    let evil = send("/vary-xv/b1", "EVIL");
    gate.arrivals(1).await;
    let good = send("/vary-xv/b1", "good");
    until_waiting(&p, 1).await;
    gate.open();
    let good = good.await.unwrap();
    assert_eq!(
        good.bytes(),
        b"x-v=good",
        "{:?}",
        good.header("cache-status")
    );
    assert_ne!(
        good.header("cache-status"),
        Some("secondhit; hit; detail=collapsed; ttl=60")
    );
    assert_eq!(evil.await.unwrap().bytes(), b"x-v=EVIL");
    assert_eq!(
        gate.arrived(),
        2,
        "the other variant was fetched for itself"
    );
    // A follower with the leader's own variant is still collapsed into its fetch.
    let gate = o.hold("/vary-xv/b2");
    let a = send("/vary-xv/b2", "same");
    gate.arrivals(1).await;
    let b = send("/vary-xv/b2", "same");
    until_waiting(&p, 1).await;
    gate.open();
    let b = b.await.unwrap();
    assert_eq!(b.bytes(), b"x-v=same");
    assert!(b.header("cache-status").unwrap().contains("collapsed"));
    assert_eq!(a.await.unwrap().bytes(), b"x-v=same");
    assert_eq!(o.count("/vary-xv/b2"), 1);
    p.shutdown().await;
}

#[tokio::test]
async fn a_get_with_a_body_is_refused_and_unkeyed_headers_never_reach_the_origin() {
    let o = RawOrigin::cacheable().await;
    let (p, _) = start(&o.url(), admit_all()).await;
    let r = raw(
        p.addr,
        b"GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nEVIL=true",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(o.requests().is_empty());
    let unkeyed = [
        "X-Host: evil",
        "X-Forwarded-Port: 1337",
        "X-Forwarded-Prefix: /evil",
        "X-Original-Host: evil",
        "X-Forwarded-SSL: on",
        "Front-End-Https: on",
        "X_Forwarded_Host: evil",
        "X-Anything-Else: evil",
    ];
    let req = format!(
        "GET /b HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n{}\r\nConnection: close\r\n\r\n",
        unkeyed.join("\r\n")
    );
    let r = raw(p.addr, req.as_bytes()).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let seen = o.requests();
    assert_eq!(seen.len(), 1);
    let got = seen[0].to_ascii_lowercase();
    assert!(got.contains("accept: text/html"), "{got}");
    for h in unkeyed {
        let name = h.split(':').next().unwrap().to_ascii_lowercase();
        assert!(!got.contains(&name), "{name} reached the origin: {got}");
    }
    assert!(!got.contains("evil") && !got.contains("1337"), "{got}");
    // A POST is never stored: it keeps its other fields but loses the override fields.
    let req = format!(
        "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n{}\r\nConnection: close\r\n\r\nok",
        unkeyed.join("\r\n")
    );
    raw(p.addr, req.as_bytes()).await;
    let post = o.requests()[1].to_ascii_lowercase();
    assert!(post.contains("x-anything-else: evil"), "{post}");
    for h in &unkeyed[..7] {
        let name = h.split(':').next().unwrap().to_ascii_lowercase();
        assert!(!post.contains(&name), "{name} reached the origin: {post}");
    }
    assert!(
        post.ends_with("\r\n\r\nok"),
        "the POST body went through: {post}"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn the_origin_gets_the_normalised_host_the_client_address_and_via() {
    // What a miss sends: the fields allowed (by default not User-Agent, which origins reflect),
    // Host as the key has it, the client's address in X-Forwarded-For and this cache in Via;
    // with the client's own forwarding fields allow-listed, they come first.
    let req = "GET /h?x=1 HTTP/1.1\r\nHost: Media.Test.:80\r\nX-Forwarded-For: 6.6.6.6\r\n\
               Via: 1.0 upstream\r\nAccept: text/html\r\nUser-Agent: t\r\nX-Other: 1\r\n\
               Connection: close\r\n\r\n";
    let cases: [(&str, &[&str]); 2] = [
        (
            "",
            &[
                "accept: text/html",
                "host: media.test",
                "via: 1.1 secondhit",
                "x-forwarded-for: 127.0.0.1",
            ],
        ),
        (
            "[cache]\nforwarded_request_headers = [\"x-forwarded-for\", \"via\", \"accept\"]",
            &[
                "accept: text/html",
                "host: media.test",
                "via: 1.0 upstream",
                "via: 1.1 secondhit",
                "x-forwarded-for: 6.6.6.6, 127.0.0.1",
            ],
        ),
    ];
    for (config, expected) in cases {
        let o = RawOrigin::cacheable().await;
        let (p, _) = start(&o.url(), config).await;
        let r = raw(p.addr, req.as_bytes()).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        let seen = o.requests();
        assert_eq!(seen.len(), 1);
        let mut lines = seen[0].split("\r\n");
        assert_eq!(lines.next(), Some("GET /h?x=1 HTTP/1.1"));
        let mut fields: Vec<String> = lines
            .filter(|l| !l.is_empty())
            .map(|l| l.to_ascii_lowercase())
            .collect();
        // Field order across names carries no meaning; within Via it does (sort is stable).
        fields.sort_by(|a, b| a.split(':').next().cmp(&b.split(':').next()));
        assert_eq!(fields, expected, "config {config:?}");
        p.shutdown().await;
    }
}

// ---- Issue 16: no client may hold unbounded resources. ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_send_a_byte_are_closed_within_the_header_timeout() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[timeouts]\nclient_header = \"300ms\"").await;
    let started = std::time::Instant::now();
    let mut silent = Vec::new();
    for _ in 0..200 {
        silent.push(tokio::net::TcpStream::connect(p.addr).await.unwrap());
    }
    let closed = futures_join_reads(silent).await;
    assert_eq!(closed, 200, "every silent connection was closed");
    assert!(started.elapsed() < Duration::from_secs(5));
    // An idle keep-alive connection is closed too, after its first request.
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /cache/k HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 65_536];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let rest = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(rest.is_ok(), "the idle keep-alive connection was closed");
    p.shutdown().await;
}

/// Waits (at most 3 s each) for every stream to be closed by the server; returns how many were.
async fn futures_join_reads(streams: Vec<tokio::net::TcpStream>) -> usize {
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let mut b = [0u8; 64];
                matches!(
                    tokio::time::timeout(Duration::from_secs(3), s.read(&mut b)).await,
                    Ok(Ok(0)) | Ok(Err(_))
                )
            })
        })
        .collect();
    let mut closed = 0;
    for t in tasks {
        if t.await.unwrap_or(false) {
            closed += 1;
        }
    }
    closed
}

#[tokio::test]
async fn vary_bookkeeping_counts_in_the_capacity() {
    let o = origin::start().await;
    let extra = "[admission]\npolicy = \"admit-all\"\n[cache]\ncapacity = \"256KiB\"\nmax_object_size = \"64KiB\"\nforwarded_request_headers = [\"x-v\"]\nforwarded_unkeyed_headers = [\"x-v\"]";
    let (p, _) = start(&o.url(), extra).await;
    let c = Http::new(p.addr);
    let long = "p".repeat(2000);
    for i in 0..400 {
        let g = c.get(&format!("/vary-xv/{long}{i}")).await;
        assert_eq!(g.status, StatusCode::OK);
    }
    let (_, metrics) = admin(p.admin_addr, "/metrics", false).await;
    let bytes: f64 = metric(&metrics, "secondhit_cache_bytes");
    assert!(bytes <= 256.0 * 1024.0, "{bytes}");
    // 400 x 2 KB keys do not fit: the earliest URLs' Vary records were evicted with them.
    let first = format!("http://{}/vary-xv/{long}0", p.addr);
    assert_eq!(p.proxy.purge(&first), Ok(false));
    let last = format!("http://{}/vary-xv/{long}399", p.addr);
    assert_eq!(p.proxy.purge(&last), Ok(true));
    p.shutdown().await;
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("{name} missing"))
}

/// A client that asks for `path` and reads `first` bytes of the answer, with a small receive
/// buffer so the kernel holds little for it.
async fn reader(addr: std::net::SocketAddr, path: &str, first: usize) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = 0;
    let mut buf = vec![0u8; 16 * 1024];
    while got < first {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed early");
        got += n;
    }
    s
}

/// What the origin's `/stream/` route has sent once it sent nothing more for 300 ms (waits
/// 15 s at most): the streams stopped, on their budgets or because they were cancelled. Still
/// a wait on time (a stall of the whole machine longer than 300 ms reads as quiet); what the
/// callers assert are upper bounds on bytes, which a stall can only make easier to meet, so
/// each also checks that the streams did run (see their `streamed` lower bounds).
async fn quiet_streamed(o: &origin::TestOrigin) -> u64 {
    let mut streamed = o.streamed();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = o.streamed();
        if now == streamed {
            return now;
        }
        streamed = now;
    }
    panic!("the origin kept streaming ({streamed} bytes)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_hold_a_bounded_amount_of_memory() {
    let o = origin::start().await;
    // The proxy in a process of its own: its resident memory is its own, not that of the tests
    // running beside this one.
    let p = support::child::ServeChild::start(
        "slow-readers",
        &format!(
            "origin = \"{}\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n",
            o.url()
        ),
    );
    let before = p.rss_bytes();
    let mut readers = Vec::new();
    for i in 0..20 {
        readers.push(reader(p.addr, &format!("/stream/slow{i}?size=50000000"), 100_000).await);
    }
    // Every pump runs until its budget and the sockets' buffers are full.
    let streamed = quiet_streamed(&o).await;
    let grown = p.rss_bytes().saturating_sub(before);
    eprintln!(
        "20 slow readers: origin sent {:.1} MB, the proxy's resident memory grew {:.1} MB",
        streamed as f64 / 1e6,
        grown as f64 / 1e6
    );
    assert!(before > 0, "the child's resident memory is readable");
    // Each reader holds its stream budget (256 KiB) in the proxy; what else the origin sent sits
    // in the kernel's socket buffers between origin and proxy (not resident memory), bounded by
    // the kernel (a few MB a socket on loopback). Without backpressure each reader would hold
    // what the origin sent it (20 readers: hundreds of MB).
    assert!(grown < 64 << 20, "resident memory grew {grown} bytes");
    assert!(streamed < 20 * 16_000_000, "origin sent {streamed} bytes");
    // The readers read their 100,000 bytes each: the streams did run.
    assert!(streamed >= 20 * 100_000, "origin sent {streamed} bytes");
    drop(readers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_download_stops_the_origin() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "").await;
    for i in 0..30 {
        let s = reader(p.addr, &format!("/stream/gone{i}?size=50000000"), 100).await;
        drop(s);
    }
    // The origin stops: quiet_streamed panics when it goes on.
    let later = quiet_streamed(&o).await;
    eprintln!(
        "30 abandoned 50 MB downloads: origin sent {:.1} MB",
        later as f64 / 1e6
    );
    // Before: the whole 1.5 GB.
    assert!(later < 30 * 8_000_000, "origin sent {later} bytes");
    // Each download got its first bytes: at least one 64 KiB chunk of each was sent.
    assert!(later >= 30 * 65_536, "origin sent {later} bytes");
    p.shutdown().await;
}

// ---- Issue 16: errors named right. ----

#[tokio::test]
async fn a_malformed_request_body_is_the_clients_400_and_costs_the_origin_nothing() {
    let o = RawOrigin::cacheable().await;
    let (p, _) = start(&o.url(), "").await;
    let bodies: [&[u8]; 4] = [
        b"+5\r\nhello\r\n0\r\n\r\n",
        b"-5\r\nhello\r\n0\r\n\r\n",
        b"fffffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
        b"5\nhello\n0\n\n",
    ];
    for body in bodies {
        let mut req =
            b"POST /form HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        req.extend_from_slice(body);
        let r = raw(p.addr, &req).await;
        assert!(
            r.starts_with("HTTP/1.1 400"),
            "{:?}: {r}",
            String::from_utf8_lossy(body)
        );
    }
    assert!(o.requests().is_empty(), "the origin saw none of them");
    let (_, metrics) = admin(p.admin_addr, "/metrics", false).await;
    for kind in ["connect", "other", "timeout", "body"] {
        let line = format!("secondhit_origin_errors_total{{kind=\"{kind}\"}} 0");
        assert!(metrics.contains(&line), "{metrics}");
    }
    // A good chunked POST still goes through.
    let r = raw(
        p.addr,
        b"POST /form HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    // Read ahead whole, it went on with its length.
    assert!(
        o.requests()[0].ends_with("content-length: 5\r\n\r\nhello"),
        "{:?}",
        o.requests()
    );
    p.shutdown().await;
}

#[tokio::test]
async fn response_framing_is_forwarded_right() {
    let o = RawOrigin::start(|head| {
        let path = head.split(' ').nth(1).unwrap_or("");
        let text = match path {
            // Both framings: chunked wins, the stale Content-Length must not be forwarded.
            "/te-and-cl" => "HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ntransfer-encoding: chunked\r\ncontent-length: 100\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_string(),
            "/no-content" => "HTTP/1.1 204 No Content\r\ncache-control: max-age=60\r\ncontent-length: 0\r\n\r\n".to_string(),
            "/not-modified" => "HTTP/1.1 304 Not Modified\r\netag: \"1\"\r\ncache-control: max-age=60\r\n\r\n".to_string(),
            "/huge-headers" => format!(
                "HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\nx-big: {}\r\ncontent-length: 2\r\n\r\nok",
                "a".repeat(500_000)
            ),
            _ => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_string(),
        };
        text.into_bytes()
    })
    .await;
    let (p, _) = start(&o.url(), admit_all()).await;
    let r = raw(
        p.addr,
        b"GET /te-and-cl HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(!r.contains("content-length: 100"), "{r}");
    assert!(
        r.ends_with("hello") || r.ends_with("5\r\nhello\r\n0\r\n\r\n"),
        "{r}"
    );
    // The 204 is stored and served again, never with a Content-Length.
    for want in ["x-cache: MISS", "x-cache: HIT"] {
        let r = raw(
            p.addr,
            b"GET /no-content HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 204") && r.contains(want), "{r}");
        assert!(!r.to_ascii_lowercase().contains("content-length"), "{r}");
    }
    let r = raw(
        p.addr,
        b"GET /not-modified HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"1\"\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 304"), "{r}");
    assert!(!r.to_ascii_lowercase().contains("content-length"), "{r}");
    // A 500 KB header block is refused (502), counted, and never stored.
    for _ in 0..2 {
        let r = raw(
            p.addr,
            b"GET /huge-headers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 502"), "{}", &r[..r.len().min(200)]);
        assert!(
            r.contains("detail=origin-headers-too-large"),
            "{}",
            &r[..r.len().min(300)]
        );
    }
    let (_, metrics) = admin(p.admin_addr, "/metrics", false).await;
    assert!(
        metrics.contains("secondhit_origin_errors_total{kind=\"headers-too-large\"} 2"),
        "{metrics}"
    );
    p.shutdown().await;
}
