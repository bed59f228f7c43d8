//! Large stored bodies kept in sealed memory files and sent with `sendfile` (`cache.sendfile`),
//! against a real origin and real clients on 127.0.0.1:0: the bytes every kind of client gets
//! (whole, ranged, pipelined, HTTP/2, one that leaves mid-body), and that `sendfile` is what
//! sent them. The process's counters are shared, so the tests here take turns.

mod support;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use std::time::Duration;
use support::origin::{self, content};
use support::proxy::{body_of, get_until, h2, start, Http, RunningProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A body larger than a socket's buffers, so that it takes several writes.
const SIZE: usize = 3 * 1024 * 1024 + 123;
const PATH: &str = "/cache/big";

static TURNS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A counter or gauge's value in the proxy's `/metrics` text.
fn metric(p: &RunningProxy, name: &str) -> u64 {
    let text = p.proxy.render_metrics();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Stores `PATH` (its second request) and checks the third is a HIT.
async fn store(http: &Http) {
    let path = format!("{PATH}?size={SIZE}");
    for want in ["DEFERRED", "MISS", "HIT"] {
        let got = http.get(&path).await;
        assert_eq!(got.status, StatusCode::OK);
        assert!(got.x_cache().starts_with(want), "{want}: {}", got.x_cache());
        assert!(got.bytes() == content(PATH, SIZE), "{want}: bytes differ");
    }
}

#[tokio::test]
async fn large_hits_go_by_sendfile_and_every_client_gets_the_exact_bytes() {
    let _turn = TURNS.lock().await;
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "").await;
    let http = Http::new(p.addr);
    let path = format!("{PATH}?size={SIZE}");
    let want = content(PATH, SIZE);
    let bodies = metric(&p, "secondhit_sendfile_bodies");
    store(&http).await;
    assert_eq!(metric(&p, "secondhit_sendfile_bodies"), bodies + 1);
    assert!(metric(&p, "secondhit_sendfile_bytes") >= SIZE as u64);

    // Whole, again: sent by sendfile.
    let before = metric(&p, "secondhit_sendfile_writes_total");
    let got = http.get(&path).await;
    assert!(got.x_cache().starts_with("HIT"));
    assert!(got.bytes() == want, "bytes differ");
    assert!(metric(&p, "secondhit_sendfile_writes_total") > before);

    // A range inside the body: sent from the file at its offset.
    let got = http
        .send(Method::GET, &path, &[("range", "bytes=70000-2500000")])
        .await;
    assert_eq!(got.status, StatusCode::PARTIAL_CONTENT);
    assert!(
        got.bytes() == &want[70_000..=2_500_000],
        "range bytes differ"
    );

    // Two requests pipelined on one connection: both bodies in one write queue.
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    let one = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", p.addr);
    let two = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nRange: bytes=-1000\r\nConnection: close\r\n\r\n",
        p.addr
    );
    s.write_all(format!("{one}{two}").as_bytes()).await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut all))
        .await
        .expect("both answered within 20 s")
        .unwrap();
    let first = body_of(&all).expect("a head");
    assert!(first[..SIZE] == want[..], "first pipelined body differs");
    let second = body_of(&first[SIZE..]).expect("a second head");
    assert!(
        second == &want[SIZE - 1000..],
        "second pipelined body differs"
    );

    // HTTP/2 reads the sealed body as memory.
    let req = Request::builder()
        .uri(format!("http://{}{path}", p.addr))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let got = h2(p.addr, req).await;
    assert!(got.x_cache().starts_with("HIT"));
    assert!(got.bytes() == want, "HTTP/2 bytes differ");

    // A client that leaves mid-body, several times over: each connection ends with an error
    // on the proxy's side (no signal ends the process) and the next client is served whole.
    for _ in 0..5 {
        let (s, got) = get_until(p.addr, &path, &[], 100_000).await;
        assert!(body_of(&got).is_some_and(|b| b == &want[..b.len()]));
        drop(s);
    }
    let got = http.get(&path).await;
    assert!(
        got.bytes() == want,
        "bytes differ after clients left mid-body"
    );
    assert_eq!(o.total(), 2, "the origin saw the first two requests only");
}

#[tokio::test]
async fn without_sendfile_large_bodies_stay_on_the_heap() {
    let _turn = TURNS.lock().await;
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[cache]\nsendfile = false\n").await;
    let http = Http::new(p.addr);
    let (bodies, writes) = (
        metric(&p, "secondhit_sendfile_bodies"),
        metric(&p, "secondhit_sendfile_writes_total"),
    );
    store(&http).await;
    http.get(&format!("{PATH}?size={SIZE}")).await;
    assert_eq!(metric(&p, "secondhit_sendfile_bodies"), bodies);
    assert_eq!(metric(&p, "secondhit_sendfile_writes_total"), writes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_for_flash_only_and_flash_hits_promoted_to_memory_stay_on_the_heap() {
    let _turn = TURNS.lock().await;
    let d = std::env::temp_dir().join(format!("secondhit-sendfile-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let o = origin::start().await;
    // Memory second-hits, the flash tier admits all: the first request goes to flash at once.
    let config = format!(
        "[admission]\npolicy = \"second-hit\"\ndisk = \"admit-all\"\n\
         [cache.disk]\ndir = \"{}\"\ncapacity = \"8MiB\"\nblock_size = \"1MiB\"\n",
        d.display()
    );
    let (p, _) = start(&o.url(), &config).await;
    let http = Http::new(p.addr);
    let (size, path) = (300_000, "/cache/promoted?size=300000");
    let want = content("/cache/promoted", size);
    let bodies = metric(&p, "secondhit_sendfile_bodies");
    let got = http.get(path).await;
    assert!(got.bytes() == want);
    // Written to flash only: nothing sealed.
    assert_eq!(metric(&p, "secondhit_sendfile_bodies"), bodies);
    // The flash hit is promoted to memory as it was read: sealing is paid only by bodies
    // stored from the origin (a promotion is paid on every flash hit memory cannot keep).
    let got = http.get(path).await;
    let status = got.header("cache-status").unwrap_or_default().to_owned();
    assert!(status.contains("detail=disk"), "{status}");
    assert!(got.bytes() == want, "the flash hit's bytes differ");
    let got = http.get(path).await;
    let status = got.header("cache-status").unwrap_or_default().to_owned();
    assert!(
        got.x_cache().starts_with("HIT") && !status.contains("detail=disk"),
        "{status}"
    );
    assert!(got.bytes() == want, "the memory hit's bytes differ");
    assert_eq!(metric(&p, "secondhit_sendfile_bodies"), bodies);
    assert_eq!(o.total(), 1);
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&d);
}

#[tokio::test]
async fn a_large_body_the_origin_breaks_off_is_never_sealed() {
    let _turn = TURNS.lock().await;
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "[admission]\npolicy = \"admit-all\"\n").await;
    let http = Http::new(p.addr);
    let bodies = metric(&p, "secondhit_sendfile_bodies");
    // Admitted at once: half of 1 MB arrives, then the origin resets.
    for _ in 0..2 {
        let got = http.get("/short/big?size=1000000").await;
        assert!(got.body.is_err(), "the client saw the cut");
        assert_ne!(got.x_cache(), "HIT");
    }
    assert_eq!(metric(&p, "secondhit_sendfile_bodies"), bodies);
    assert_eq!(o.total(), 2, "nothing was stored to answer the second");
}
