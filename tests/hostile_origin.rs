//! Hostile and broken origins against the proxy's own HTTP/1 origin client (`origin/h1.rs` and
//! `origin/pool.rs` of `crates/secondhit-proxy`): an origin that sends bytes no request asked
//! for (a body after a HEAD answer, garbage after a 204 or 304, bytes on an idle connection)
//! must never have them read as the answer to another request on a pooled connection;
//! duplicate lengths are normalised or
//! refused, never half answered; a transfer coding the proxy does not decode is a 502, never
//! served as plain bytes; and a body delimited by the close, which cannot be shown complete, is
//! forwarded but never stored.
//!
//! The origin here is a raw TCP listener whose bytes each test scripts by hand, pieces and
//! pauses included, in front of a real proxy with one worker (one pool, so that requests for
//! different hosts share its connections).

mod support;

use http::{Method, StatusCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::proxy::{start, Got, Http};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the origin saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    host: String,
}

/// What the origin does for one request: each piece written (and flushed) after its pause, then
/// the connection kept for the next request, or closed when `close`.
struct Reply {
    pieces: Vec<(Duration, Vec<u8>)>,
    close: bool,
}

impl Reply {
    fn now(bytes: impl Into<Vec<u8>>) -> Reply {
        Reply {
            pieces: vec![(Duration::ZERO, bytes.into())],
            close: false,
        }
    }
    /// Then `more`, written apart after `pause`.
    fn then(mut self, pause: Duration, more: impl Into<Vec<u8>>) -> Reply {
        self.pieces.push((pause, more.into()));
        self
    }
    fn and_close(mut self) -> Reply {
        self.close = true;
        self
    }
}

type Script = dyn Fn(&Seen) -> Reply + Send + Sync;

/// A scripted origin on 127.0.0.1:0.
struct ScriptedOrigin {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedOrigin {
    async fn start(script: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> ScriptedOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let script: Arc<Script> = Arc::new(script);
        let (s, n) = (Arc::clone(&seen), Arc::clone(&connections));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream, Arc::clone(&s), Arc::clone(&script)));
            }
        });
        ScriptedOrigin {
            url,
            seen,
            connections,
            task,
        }
    }

    /// Requests seen for `path`, any method and host.
    fn count(&self, path: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path == path)
            .count()
    }
}

impl Drop for ScriptedOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one connection: request heads (GET and HEAD, no bodies) answered as scripted.
async fn serve(mut stream: TcpStream, seen: Arc<Mutex<Vec<Seen>>>, script: Arc<Script>) {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let mut line = head.lines().next().unwrap_or("").split(' ');
        let method = line.next().unwrap_or("").to_string();
        let path = line.next().unwrap_or("").to_string();
        let host = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("host")
                    .then(|| value.trim().to_string())
            })
            .unwrap_or_default();
        let request = Seen { method, path, host };
        seen.lock().unwrap().push(request.clone());
        let reply = script(&request);
        for (pause, piece) in reply.pieces {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            if stream.write_all(&piece).await.is_err() || stream.flush().await.is_err() {
                return;
            }
        }
        if reply.close {
            return;
        }
    }
}

/// The body each GET must get: its own host and path.
fn own(host: &str, path: &str) -> String {
    format!("own:{host}{path}")
}

/// A cacheable answer carrying `own(host, path)`.
fn answer(s: &Seen) -> Vec<u8> {
    let body = own(&s.host, &s.path);
    format!(
        "HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Bytes no request asked for, shaped as a whole cacheable response: read as the answer to the
/// next request on the connection, they would be served and stored under its key.
const STRAY: &[u8] =
    b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: 5\r\n\r\nSTRAY";

/// The HEAD answer of a 5-byte object, whose body a broken origin sends anyway.
const HEAD_ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: 5\r\n\r\n";

const MS: fn(u64) -> Duration = Duration::from_millis;

/// One worker (one pool: every host shares its connections), every cacheable miss stored.
const CONFIG: &str = "workers = 1\n[admission]\npolicy = \"admit-all\"";

async fn get(http: &Http, host: &str, path: &str) -> Got {
    http.send(Method::GET, path, &[("host", host)]).await
}

async fn head(http: &Http, host: &str, path: &str) -> Got {
    http.send(Method::HEAD, path, &[("host", host)]).await
}

/// The script of the HEAD-with-a-body origin: `/now/*` sends the body (and a whole stray
/// response) in the answer's own write, `/split/*` in a second write at once, `/late/*` 50 ms
/// later; GETs get their own answer.
fn head_with_body(s: &Seen) -> Reply {
    if s.method != "HEAD" {
        return Reply::now(answer(s));
    }
    let mut all = HEAD_ANSWER.to_vec();
    all.extend_from_slice(b"hello");
    all.extend_from_slice(STRAY);
    let mut stray = b"hello".to_vec();
    stray.extend_from_slice(STRAY);
    if s.path.starts_with("/now/") {
        Reply::now(all)
    } else if s.path.starts_with("/split/") {
        Reply::now(HEAD_ANSWER).then(Duration::ZERO, stray)
    } else {
        Reply::now(HEAD_ANSWER).then(MS(50), stray)
    }
}

#[tokio::test]
async fn a_body_after_a_head_answer_is_never_read_as_the_next_response() {
    let o = ScriptedOrigin::start(head_with_body).await;
    let (p, _) = start(&o.url, CONFIG).await;
    let http = Http::new(p.addr);
    for mode in ["now", "split", "late"] {
        // The GET for another host right after the HEAD, then after the stray bytes came.
        for wait in [Duration::ZERO, MS(150)] {
            let h = head(&http, "head.test", &format!("/{mode}/h")).await;
            assert_eq!(h.status, StatusCode::OK, "{mode}");
            tokio::time::sleep(wait).await;
            let path = format!("/{mode}/g{}", wait.as_millis());
            for _ in 0..2 {
                let g = get(&http, "other.test", &path).await;
                assert_eq!(g.status, StatusCode::OK, "{mode} after {wait:?}");
                assert_eq!(
                    String::from_utf8_lossy(g.bytes()),
                    own("other.test", &path),
                    "{mode} after {wait:?}: {}",
                    g.x_cache()
                );
            }
        }
    }
    p.shutdown().await;
}

/// Many HEADs whose answers carry a body (at once, apart, late) among many GETs for other
/// hosts, all at once on one worker's pool: not one GET gets a body that is not its own, first
/// from the origin and then from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_never_get_a_body_sent_for_another() {
    let o = ScriptedOrigin::start(head_with_body).await;
    let (p, _) = start(&o.url, CONFIG).await;
    let http = Arc::new(Http::new(p.addr));
    const REQUESTS: usize = 400;
    let gate = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = tokio::task::JoinSet::new();
    let mut gets = Vec::new();
    for i in 0..REQUESTS {
        let mode = ["now", "split", "late"][i % 3];
        let is_head = i % 2 == 0;
        let host = format!("h{i}.test");
        let path = format!("/{mode}/{i}");
        if !is_head {
            gets.push((host.clone(), path.clone()));
        }
        let (http, gate) = (Arc::clone(&http), Arc::clone(&gate));
        tasks.spawn(async move {
            let _slot = gate.acquire().await.unwrap();
            if is_head {
                let _ = head(&http, &host, &path).await;
                return 0;
            }
            let g = get(&http, &host, &path).await;
            usize::from(g.bytes() != own(&host, &path).as_bytes())
        });
    }
    let mut misattributed = 0;
    while let Some(r) = tasks.join_next().await {
        misattributed += r.unwrap();
    }
    assert_eq!(
        misattributed, 0,
        "GETs answered with bytes sent for another request"
    );
    // What was stored is each key's own body.
    let mut wrong = 0;
    for (host, path) in &gets {
        let g = get(&http, host, path).await;
        wrong += usize::from(g.bytes() != own(host, path).as_bytes());
    }
    assert_eq!(wrong, 0, "objects stored with another request's body");
    // The client's connections go first: one it opened and never used would hold the proxy's
    // shutdown for its grace period.
    drop(http);
    p.shutdown().await;
}

#[tokio::test]
async fn bytes_on_an_idle_pooled_connection_discard_it() {
    // Every answer is followed, 20 ms later, by bytes no request asked for.
    let o = ScriptedOrigin::start(|s| Reply::now(answer(s)).then(MS(20), STRAY)).await;
    let (p, _) = start(&o.url, CONFIG).await;
    let http = Http::new(p.addr);
    for i in 0..4 {
        let path = format!("/idle/{i}");
        let host = format!("h{i}.test");
        let g = get(&http, &host, &path).await;
        assert_eq!(String::from_utf8_lossy(g.bytes()), own(&host, &path));
        // The stray bytes are on the idle connection by now: it must not be lent.
        tokio::time::sleep(MS(150)).await;
    }
    assert_eq!(o.connections.load(Ordering::SeqCst), 4);
    p.shutdown().await;
}

#[tokio::test]
async fn garbage_after_a_204_or_304_is_never_read_as_the_next_response() {
    let o = ScriptedOrigin::start(|s| {
        let p = s.path.as_str();
        let no_content = b"HTTP/1.1 204 No Content\r\ncache-control: max-age=600\r\n\r\n".to_vec();
        let not_modified = b"HTTP/1.1 304 Not Modified\r\netag: \"x\"\r\n\r\n".to_vec();
        let with = |head: Vec<u8>, more: &[u8]| [head, more.to_vec()].concat();
        if p.starts_with("/204-now") {
            Reply::now(with(no_content, STRAY))
        } else if p.starts_with("/304-now") {
            Reply::now(with(not_modified, STRAY))
        } else if p.starts_with("/204-late") {
            Reply::now(no_content).then(MS(20), STRAY)
        } else if p.starts_with("/304-late") {
            Reply::now(not_modified).then(MS(20), STRAY)
        } else if p.starts_with("/304-length") {
            // A 304 announcing the body it must not send, and sending it apart: its connection
            // is not reused, so even a request at once cannot read it.
            Reply::now(b"HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\n".to_vec())
                .then(MS(10), with(b"hello".to_vec(), STRAY))
        } else {
            Reply::now(answer(s))
        }
    })
    .await;
    let (p, _) = start(&o.url, CONFIG).await;
    let http = Http::new(p.addr);
    for (first, status, wait) in [
        ("/204-now", StatusCode::NO_CONTENT, Duration::ZERO),
        ("/304-now", StatusCode::NOT_MODIFIED, Duration::ZERO),
        ("/204-late", StatusCode::NO_CONTENT, MS(150)),
        ("/304-late", StatusCode::NOT_MODIFIED, MS(150)),
        ("/304-length", StatusCode::NOT_MODIFIED, Duration::ZERO),
    ] {
        let r = get(&http, "a.test", first).await;
        assert_eq!(r.status, status, "{first}");
        tokio::time::sleep(wait).await;
        let path = format!("/after{first}");
        let g = get(&http, "b.test", &path).await;
        assert_eq!(
            String::from_utf8_lossy(g.bytes()),
            own("b.test", &path),
            "after {first}"
        );
    }
    p.shutdown().await;
}

#[tokio::test]
async fn duplicate_content_lengths_are_normalised_or_refused_never_half_answered() {
    let o = ScriptedOrigin::start(|s| {
        let cl = match s.path.as_str() {
            "/same-list" => "content-length: 5, 5\r\n",
            "/same-fields" => "content-length: 5\r\ncontent-length: 5\r\n",
            "/differ" => "content-length: 5, 6\r\n",
            "/differ-fields" => "content-length: 5\r\ncontent-length: 6\r\n",
            _ => return Reply::now(answer(s)),
        };
        Reply::now(format!(
            "HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\n{cl}\r\nhello"
        ))
    })
    .await;
    let (p, _) = start(&o.url, CONFIG).await;
    let http = Http::new(p.addr);
    for path in ["/same-list", "/same-fields"] {
        for want in ["MISS", "HIT"] {
            let g = get(&http, "a.test", path).await;
            assert_eq!(g.status, StatusCode::OK, "{path}");
            assert_eq!(g.body.as_deref().ok(), Some(&b"hello"[..]), "{path}");
            assert_eq!(g.header("content-length"), Some("5"), "{path}");
            assert_eq!(g.x_cache(), want, "{path}");
        }
    }
    for path in ["/differ", "/differ-fields"] {
        for _ in 0..2 {
            let g = get(&http, "a.test", path).await;
            assert_eq!(g.status, StatusCode::BAD_GATEWAY, "{path}");
            assert!(g.body.is_ok(), "a whole 502, not a cut answer: {path}");
        }
        assert_eq!(o.count(path), 2, "never stored: {path}");
    }
    // The connection is not trusted after them: the next request gets its own answer.
    let g = get(&http, "b.test", "/next").await;
    assert_eq!(String::from_utf8_lossy(g.bytes()), own("b.test", "/next"));
    p.shutdown().await;
}

#[tokio::test]
async fn a_transfer_coding_other_than_chunked_is_a_502_never_served_as_plain() {
    // "hello" gzipped would be binary; any bytes do: the proxy must not serve them as the body.
    let o = ScriptedOrigin::start(|s| match s.path.as_str() {
        "/gzip-chunked" => Reply::now(
            b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ntransfer-encoding: gzip, chunked\r\n\r\n5\r\n\x1f\x8bzip\r\n0\r\n\r\n",
        ),
        "/gzip-fields" => Reply::now(
            b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ntransfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n5\r\n\x1f\x8bzip\r\n0\r\n\r\n",
        ),
        "/gzip" => Reply::now(
            b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ntransfer-encoding: gzip\r\n\r\n\x1f\x8bzip",
        )
        .and_close(),
        _ => Reply::now(answer(s)),
    })
    .await;
    let (p, _) = start(&o.url, CONFIG).await;
    let http = Http::new(p.addr);
    for path in ["/gzip-chunked", "/gzip-fields", "/gzip"] {
        for _ in 0..2 {
            let g = get(&http, "a.test", path).await;
            assert_eq!(g.status, StatusCode::BAD_GATEWAY, "{path}");
            assert!(!g.bytes().starts_with(b"\x1f\x8b"), "{path}");
        }
        assert_eq!(o.count(path), 2, "never stored: {path}");
    }
    let g = get(&http, "b.test", "/next").await;
    assert_eq!(String::from_utf8_lossy(g.bytes()), own("b.test", "/next"));
    p.shutdown().await;
}

#[tokio::test]
async fn a_body_delimited_by_the_close_is_forwarded_but_never_stored() {
    // Whole or cut, the wire is the same: a head without a length, bytes, then the close.
    let o = ScriptedOrigin::start(|s| match s.path.as_str() {
        "/to-close" => {
            Reply::now("HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\n\r\nuntil the close")
                .and_close()
        }
        "/http10" => {
            Reply::now("HTTP/1.0 200 OK\r\ncache-control: max-age=600\r\n\r\nold style").and_close()
        }
        "/cut" => Reply::now("HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\n\r\nhalf of")
            .then(MS(20), " the bod")
            .and_close(),
        _ => Reply::now(answer(s)),
    })
    .await;
    let (p, _) = start(&o.url, CONFIG).await;
    let http = Http::new(p.addr);
    for (path, body) in [
        ("/to-close", "until the close"),
        ("/http10", "old style"),
        ("/cut", "half of the bod"),
    ] {
        for _ in 0..2 {
            let g = get(&http, "a.test", path).await;
            assert_eq!(g.status, StatusCode::OK, "{path}");
            assert_eq!(String::from_utf8_lossy(g.bytes()), body, "{path}");
            assert_ne!(g.x_cache(), "HIT", "{path}");
            let status = g.header("cache-status").unwrap_or("");
            assert!(!status.contains("stored"), "{path}: {status}");
            assert!(
                status.contains("detail=close-delimited"),
                "{path}: {status}"
            );
        }
        assert_eq!(o.count(path), 2, "never stored: {path}");
    }
    p.shutdown().await;
}

/// Interim responses (RFC 9110 §15.2) before the final one are never stored, and their fields
/// never reach the stored response: a 103 Early Hints with its own fields, a 102, and a 100,
/// ahead of a cacheable 200 (the suite's `interim-not-cached` and `interim-no-header-reuse`).
/// (hyper's server cannot send
/// a 1xx to the client, so the hints are dropped, as RFC 8297 §2 lets an intermediary do.)
#[tokio::test]
async fn interim_responses_are_never_stored_nor_their_fields_reused() {
    let o = ScriptedOrigin::start(|s| {
        let interim = match s.path.as_str() {
            "/hints" => "HTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload\r\nx-hint: yes\r\n\r\n",
            "/processing" => "HTTP/1.1 102 Processing\r\n\r\n",
            "/all" => "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nx-hint: yes\r\ncache-control: max-age=1\r\n\r\n",
            _ => "",
        };
        Reply::now(interim).then(MS(10), answer(s))
    })
    .await;
    let (p, _) = start(&o.url, CONFIG).await;
    let http = Http::new(p.addr);
    for path in ["/hints", "/processing", "/all"] {
        let first = get(&http, "a.test", path).await;
        assert_eq!(first.status, StatusCode::OK, "{path}");
        assert_eq!(String::from_utf8_lossy(first.bytes()), own("a.test", path));
        let again = get(&http, "a.test", path).await;
        assert_eq!(again.status, StatusCode::OK, "{path}");
        assert_eq!(
            again.x_cache(),
            "HIT",
            "{path}: the final response is stored"
        );
        assert_eq!(String::from_utf8_lossy(again.bytes()), own("a.test", path));
        for got in [&first, &again] {
            assert_eq!(got.header("x-hint"), None, "{path}");
            assert_eq!(got.header("link"), None, "{path}");
        }
        // The final response's own max-age, not the hint's.
        assert_eq!(again.header("cache-control"), Some("max-age=600"), "{path}");
        assert_eq!(o.count(path), 1, "{path}");
    }
    p.shutdown().await;
}
