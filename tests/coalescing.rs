//! Coalesced fetches against clients that read slowly or not at all: a fetch being stored runs
//! at the origin's pace, and its followers stream it from the first byte, each at its own pace.

mod support;

use std::time::{Duration, Instant};
use support::origin;
use support::proxy::start;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A GET on a fresh connection, read until `n` bytes of the response have arrived (head
/// included); the connection is returned unread past that.
async fn read_some(addr: std::net::SocketAddr, path: &str, n: usize) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 16_384];
    while got.len() < n {
        let want = (n - got.len()).min(buf.len());
        let k = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf[..want]))
            .await
            .expect("bytes within 10 s")
            .unwrap();
        assert!(k > 0, "closed early");
        got.extend_from_slice(&buf[..k]);
    }
    (s, got)
}

/// The body of a response read to its end or to a failure: (body bytes, ended cleanly).
async fn read_body(mut s: TcpStream, head_and_some: Vec<u8>) -> (Vec<u8>, bool) {
    let mut all = head_and_some;
    let clean = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut all))
        .await
        .is_ok_and(|r| r.is_ok());
    let split = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    (all[split + 4..].to_vec(), clean)
}

const CONFIG: &str = "[admission]\npolicy = \"admit-all\"\n[timeouts]\ncoalesce_wait = \"10s\"";

/// The attack: the first client reads 10 bytes of a 5 MB object and stops; a second client for
/// the same URL must not wait for it (it used to wait the whole `coalesce_wait`, 10 s).
#[tokio::test]
async fn a_client_that_stops_reading_holds_nobody_behind_it() {
    let o = origin::start().await;
    let (p, _clock) = start(&o.url(), CONFIG).await;
    let path = "/cache/big?size=5000000";
    let (stuck, _) = read_some(p.addr, path, 10).await;
    let started = Instant::now();
    let (s, head) = read_some(p.addr, path, 1).await;
    let (body, clean) = read_body(s, head).await;
    let took = started.elapsed();
    assert!(clean, "the second client's response ended cleanly");
    assert_eq!(body, origin::content("/cache/big", 5_000_000));
    assert!(
        took < Duration::from_secs(5),
        "the second client waited {took:?} behind the first"
    );
    assert_eq!(o.count(path), 1, "one origin fetch for both");
    drop(stuck);
    p.shutdown().await;
}

/// A follower gets the leader's bytes as the origin sends them, not when the body is whole:
/// the origin sends half of the body and stalls; the follower has that half from the one
/// fetch, then its response is cut when the fetch fails, and nothing is stored.
#[tokio::test]
async fn followers_stream_the_leaders_body_as_it_arrives() {
    let o = origin::start().await;
    let extra = format!(
        "{CONFIG}
first_byte = \"2s\""
    );
    let (p, _clock) = start(&o.url(), &extra).await;
    let path = "/stall/half?size=200000";
    let (leader, _) = read_some(p.addr, path, 10).await;
    let (mut follower, mut got) = read_some(p.addr, path, 1).await;
    let body_len = |got: &[u8]| {
        got.windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(0, |i| got.len() - i - 4)
    };
    let mut buf = [0u8; 16_384];
    while body_len(&got) < 100_000 {
        let k = tokio::time::timeout(Duration::from_secs(10), follower.read(&mut buf))
            .await
            .expect("the follower's bytes within 10 s")
            .unwrap();
        assert!(k > 0, "closed before the half arrived");
        got.extend_from_slice(&buf[..k]);
    }
    assert_eq!(
        o.count(path),
        1,
        "the follower streamed the leader's fetch, not one of its own"
    );
    let (body, _) = read_body(follower, got).await;
    assert_eq!(body.len(), 100_000, "cut where the origin stalled");
    assert_eq!(body, origin::content("/stall/half", 200_000)[..100_000]);
    drop(leader);
    // Nothing was stored: the next request goes to the origin.
    let (s, head) = read_some(p.addr, path, 1).await;
    drop(read_body(s, head).await);
    assert_eq!(o.count(path), 2);
    p.shutdown().await;
}
