//! Hostile input against the proxy: request smuggling, oversized requests, slow clients,
//! connection floods, poisoning through unkeyed headers, bad configuration files. Each attack
//! is refused without contacting the origin, or cannot change what others get.

mod support;

use http::{Method, StatusCode};
use std::time::Duration;
use support::origin;
use support::proxy::{raw, start, Http};
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
    let (p, _) = start(&o.url(), "[limits]\nmax_connections = 2").await;
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
