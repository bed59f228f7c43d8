//! Clients that hold connections without finishing anything: HTTP/2 connections with no
//! stream, streams left open, request bodies trickled, responses never read, bytes sent to the
//! admin listener and nothing more. Each is closed by a timeout or makes room for a normal
//! client when every slot is taken, so that none can lock the others out.

mod support;

use http::StatusCode;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::origin;
use support::proxy::{admin, start, Http};
use support::raw_origin::RawOrigin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An HTTP/2 frame: its header and payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

const SETTINGS: u8 = 4;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const END_HEADERS: u8 = 4;
const ACK: u8 = 1;

/// The HPACK block of `POST /h2 HTTP/2` for authority `x`, from the static table and literals
/// (never indexed, no Huffman), so the test needs no HTTP/2 library that would respect the
/// server's limits for it.
fn post_headers() -> Vec<u8> {
    let mut b = vec![0x83, 0x86]; // :method POST, :scheme http
    b.extend_from_slice(&[0x04, 3]); // :path, literal
    b.extend_from_slice(b"/h2");
    b.extend_from_slice(&[0x01, 1]); // :authority, literal
    b.extend_from_slice(b"x");
    b
}

/// Reads one frame: (type, flags, stream, payload).
async fn read_frame(s: &mut TcpStream) -> std::io::Result<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await?;
    Ok((head[3], head[4], stream, payload))
}

/// An HTTP/2 connection that sends the preface and an empty SETTINGS, and waits for the
/// server's SETTINGS (so it is being served); returns the server's settings as (id, value).
async fn h2_preface_only(addr: SocketAddr) -> (TcpStream, Vec<(u16, u32)>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(PREFACE).await.unwrap();
    s.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    loop {
        let (kind, flags, _, payload) =
            tokio::time::timeout(Duration::from_secs(5), read_frame(&mut s))
                .await
                .expect("the server's SETTINGS within 5 s")
                .unwrap();
        if kind == SETTINGS && flags & ACK == 0 {
            let settings = payload
                .chunks_exact(6)
                .map(|c| {
                    (
                        u16::from_be_bytes([c[0], c[1]]),
                        u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                    )
                })
                .collect();
            return (s, settings);
        }
    }
}

/// Whether the server closes `s` within `within` (bytes it sends first are read and dropped).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// Whether `s` is still open: what the server sent is read and dropped, and no end of stream
/// comes within 100 ms.
async fn still_open(s: &mut TcpStream) -> bool {
    !closed_within(s, Duration::from_millis(100)).await
}

/// A keep-alive connection that has had one answer and then says nothing.
async fn idle_keep_alive(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /cache/idle HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    s
}

/// A POST whose body of 1,000 bytes comes a byte every `every`, for ever (until dropped).
fn trickler(addr: SocketAddr, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let head = b"POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n";
        if s.write_all(head).await.is_err() {
            return;
        }
        loop {
            if s.write_all(b"a").await.is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    })
}

/// A client that asks for a large streamed object, reads its first bytes and then nothing,
/// with a small receive buffer.
async fn non_reader(addr: SocketAddr, path: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    s
}

/// Long timeouts, so that only making room can free a slot.
const PATIENT: &str = "[timeouts]\nclient_header = \"30s\"\nclient_body = \"30s\"\nclient_send = \"30s\"\nclient_idle = \"30s\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_client_is_answered_while_held_connections_take_every_slot() {
    let o = origin::start().await;
    let extra = format!("workers = 1\n{PATIENT}[limits]\nmax_connections = 8");
    let (p, _) = start(&o.url(), &extra).await;
    // Eight held connections, two of each kind.
    let (mut h2a, _) = h2_preface_only(p.addr).await;
    let (mut h2b, _) = h2_preface_only(p.addr).await;
    let mut ka = idle_keep_alive(p.addr).await;
    let mut kb = idle_keep_alive(p.addr).await;
    let mut readers = vec![
        non_reader(p.addr, "/stream/held1?size=50000000").await,
        non_reader(p.addr, "/stream/held2?size=50000000").await,
    ];
    let trickles = [
        trickler(p.addr, Duration::from_millis(100)),
        trickler(p.addr, Duration::from_millis(100)),
    ];
    // A connection is only closed to make room once older than its grace (1 s here).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let origin_before = o.total();
    let started = Instant::now();
    // Each client keeps its connection, so that each needs a slot of its own.
    let mut clients = Vec::new();
    for i in 0..3 {
        let c = Http::new(p.addr);
        let g = tokio::time::timeout(Duration::from_secs(3), c.get(&format!("/cache/normal{i}")))
            .await
            .expect("a normal client answered within 3 s while every slot was held");
        assert_eq!(g.status, StatusCode::OK);
        clients.push(c);
    }
    eprintln!("3 normal clients answered in {:?}", started.elapsed());
    assert_eq!(o.total(), origin_before + 3);
    // Room was made by closing idle connections (no request in flight), never the requests
    // that were moving; three were needed, one per new client.
    let mut idle_closed = 0;
    for s in [&mut h2a, &mut h2b, &mut ka, &mut kb] {
        if !still_open(s).await {
            idle_closed += 1;
        }
    }
    assert_eq!(idle_closed, 3, "one idle connection closed per new client");
    for t in &trickles {
        assert!(!t.is_finished(), "a trickling upload that moves is kept");
    }
    for t in trickles {
        t.abort();
    }
    readers.clear();
    drop((h2a, h2b, ka, kb, clients));
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_stopped_reading_make_room_once_quiet() {
    // Every slot taken by downloads nobody reads: none is idle, but none moves either.
    let o = origin::start().await;
    let extra = format!("workers = 1\n{PATIENT}[limits]\nmax_connections = 4");
    let (p, _) = start(&o.url(), &extra).await;
    let mut readers = Vec::new();
    for i in 0..4 {
        readers.push(non_reader(p.addr, &format!("/stream/q{i}?size=50000000")).await);
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let c = Http::new(p.addr);
    let g = tokio::time::timeout(Duration::from_secs(5), c.get("/cache/after"))
        .await
        .expect("answered within 5 s: a stuck download made room");
    assert_eq!(g.status, StatusCode::OK);
    drop(readers);
    p.shutdown().await;
}

#[tokio::test]
async fn http2_connections_with_no_stream_and_idle_keep_alives_are_closed_after_client_idle() {
    let o = origin::start().await;
    let extra = "[timeouts]\nclient_header = \"30s\"\nclient_idle = \"300ms\"";
    let (p, _) = start(&o.url(), extra).await;
    let (mut h2, settings) = h2_preface_only(p.addr).await;
    // SETTINGS_MAX_CONCURRENT_STREAMS (0x3), the default cap.
    assert!(settings.contains(&(3, 128)), "{settings:?}");
    let mut ka = idle_keep_alive(p.addr).await;
    assert!(closed_within(&mut h2, Duration::from_secs(3)).await);
    assert!(closed_within(&mut ka, Duration::from_secs(3)).await);
    p.shutdown().await;
}

#[tokio::test]
async fn http2_streams_beyond_the_cap_are_refused() {
    let o = origin::start().await;
    let extra = "[timeouts]\nclient_body = \"30s\"\n[limits]\nmax_h2_streams = 2";
    let (p, _) = start(&o.url(), extra).await;
    let (mut s, settings) = h2_preface_only(p.addr).await;
    assert!(settings.contains(&(3, 2)), "{settings:?}");
    s.write_all(&frame(SETTINGS, ACK, 0, &[])).await.unwrap();
    // Three POSTs whose bodies never come: two are served (and wait), the third is refused.
    for id in [1u32, 3, 5] {
        s.write_all(&frame(HEADERS, END_HEADERS, id, &post_headers()))
            .await
            .unwrap();
    }
    let refused = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            let (kind, _, stream, payload) = read_frame(&mut s).await.unwrap();
            if kind == RST_STREAM {
                return (stream, u32::from_be_bytes(payload[..4].try_into().unwrap()));
            }
        }
    })
    .await
    .expect("a RST_STREAM within 3 s");
    // REFUSED_STREAM (0x7): the client may retry it elsewhere.
    assert_eq!(refused, (5, 7));
    assert_eq!(o.total(), 0, "no half-sent body reached the origin");
    drop(s); // the two streams served end with their connection
    p.shutdown().await;
}

#[tokio::test]
async fn a_request_body_that_stops_coming_is_refused_and_never_reaches_the_origin() {
    let o = RawOrigin::cacheable().await;
    let (p, _) = start(&o.url(), "[timeouts]\nclient_body = \"300ms\"").await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "answered and closed within 3 s");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("detail=request-body-timeout"), "{text}");
    assert!(o.requests().is_empty(), "the origin got no part of it");
    // A body whose pieces come within the timeout of each other goes through.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(
        b"POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    for b in [b"a", b"b", b"c", b"d"] {
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.write_all(b).await.unwrap();
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out)).await;
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
    assert_eq!(o.requests().len(), 1);
    assert!(o.requests()[0].ends_with("\r\n\r\nabcd"));
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_never_reads_is_closed_after_client_send() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[timeouts]\nclient_send = \"500ms\"").await;
    let size = 50_000_000;
    let mut s = non_reader(p.addr, &format!("/stream/never?size={size}")).await;
    // Longer than the send timeout and the watchdog's period (a quarter of it).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Reading now gets what the kernel's buffers hold, then the end: the rest never comes.
    let mut got = 0usize;
    let mut buf = vec![0u8; 256 * 1024];
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got += n,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the connection was closed");
    assert!(got < size / 2, "read {got} of {size} bytes");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_without_a_request_cannot_lock_the_admin_listener() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[timeouts]\nclient_header = \"300ms\"").await;
    let mut held = Vec::new();
    for _ in 0..64 {
        let mut s = TcpStream::connect(p.admin_addr).await.unwrap();
        s.write_all(b"G").await.unwrap();
        held.push(s);
    }
    let (status, body) = tokio::time::timeout(
        Duration::from_secs(3),
        admin(p.admin_addr, "/healthz", false),
    )
    .await
    .expect("the admin listener answered within 3 s");
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
    for mut s in held {
        assert!(closed_within(&mut s, Duration::from_secs(3)).await);
    }
    p.shutdown().await;
}

#[tokio::test]
async fn connections_per_address_are_limited_when_configured() {
    let o = origin::start().await;
    let extra = format!("{PATIENT}[limits]\nmax_connections_per_ip = 2");
    let (p, _) = start(&o.url(), &extra).await;
    let mut a = idle_keep_alive(p.addr).await;
    let _b = idle_keep_alive(p.addr).await;
    let mut third = TcpStream::connect(p.addr).await.unwrap();
    assert!(
        closed_within(&mut third, Duration::from_secs(2)).await,
        "a third connection from 127.0.0.1 is closed at once"
    );
    assert!(still_open(&mut a).await);
    drop(a);
    // Its place is free again (the close is seen by the proxy's next read).
    let got = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            let mut s = TcpStream::connect(p.addr).await.unwrap();
            s.write_all(b"GET /cache/again HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out).await;
            if !out.is_empty() {
                return String::from_utf8_lossy(&out).into_owned();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("served within 3 s");
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    p.shutdown().await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_does_not_hold_a_shutdown() {
    let o = origin::start().await;
    let (p, _) = start(
        &o.url(),
        "[timeouts]\nclient_header = \"1h\"\nshutdown_grace = \"1h\"\n",
    )
    .await;
    let mut silent = TcpStream::connect(p.addr).await.unwrap();
    // The connection is taken (it is waiting for its first byte) before the shutdown starts.
    let c = Http::new(p.addr);
    assert_eq!(c.get("/cache/s").await.status, StatusCode::OK);
    drop(c);
    // Without the fix the shutdown waits the header timeout (an hour) for the silent one.
    let shut = tokio::time::timeout(Duration::from_secs(20), p.shutdown()).await;
    assert!(
        shut.is_ok(),
        "a connection that never sent a byte held the shutdown"
    );
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await);
}
