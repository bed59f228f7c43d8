//! A purpose-built origin for the proxy tests, on 127.0.0.1:0. Its behaviour is chosen by the
//! path; it counts every request per path.
#![allow(dead_code)]

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

type Body = http_body_util::combinators::BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// The body the origin sends for `path` of `size` bytes: derived from the path, so a test can
/// check every byte.
pub fn content(path: &str, size: usize) -> Vec<u8> {
    let seed = path
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    (0..size)
        .map(|i| (seed.wrapping_add(i as u32).wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

/// The bytes `/media/` sends for `path` at version `v`: version 0 is [`content`] of the path.
pub fn media(path: &str, v: u64, size: usize) -> Vec<u8> {
    if v == 0 {
        content(path, size)
    } else {
        content(&format!("{path}#{v}"), size)
    }
}

/// A single `bytes=A-B`, `bytes=A-` or `bytes=-N` range of a body of `len` bytes, as an origin
/// that honours ranges reads it: `Some(Ok((first, last)))`, `Some(Err(()))` when it selects
/// nothing (416), `None` to send the whole body.
fn media_range(value: &str, len: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = value.strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (first, last) = match (a.parse::<u64>().ok(), b.parse::<u64>().ok()) {
        (None, Some(n)) if a.is_empty() => (len.saturating_sub(n), len.saturating_sub(1)),
        (Some(f), None) if b.is_empty() => (f, len.saturating_sub(1)),
        (Some(f), Some(l)) if l >= f => (f, l.min(len.saturating_sub(1))),
        _ => return None,
    };
    Some(if first >= len {
        Err(())
    } else {
        Ok((first, last))
    })
}

/// A running test origin.
pub struct TestOrigin {
    pub addr: SocketAddr,
    counts: Arc<Mutex<HashMap<String, u64>>>,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

/// State the routes share.
#[derive(Default)]
struct Shared {
    /// Body bytes the `/stream/` route handed out.
    streamed: AtomicU64,
    /// Responses made by `/reval/` (each carries its number in `x-response`).
    responses: AtomicU64,
    /// 304s sent by `/reval/`, by path and query.
    not_modified: Mutex<HashMap<String, u64>>,
    /// Requests to `/personal/` that carried `Authorization` or `Cookie`.
    credentialed: AtomicU64,
    /// Gates by path (with its query): see [`TestOrigin::hold`].
    gates: Mutex<HashMap<String, Arc<Gate>>>,
    /// `/media/`: the version of each path (0 unless set), and every request's path and
    /// `Range` (or `-`), in order.
    versions: Mutex<HashMap<String, u64>>,
    media_requests: Mutex<Vec<(String, String)>>,
}

/// Holds the requests for one path until the test opens it, and tells the test when they
/// arrive: a test orders events by what happened, never by sleeping.
pub struct Gate {
    arrived: tokio::sync::watch::Sender<u64>,
    open: tokio::sync::watch::Sender<bool>,
}

impl Gate {
    /// Waits until `n` requests have arrived at the gate (panics after 10 s).
    pub async fn arrivals(&self, n: u64) {
        let mut rx = self.arrived.subscribe();
        let arrived = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|a| *a >= n));
        assert!(
            matches!(arrived.await, Ok(Ok(_))),
            "{n} requests did not arrive at the gate (got {})",
            *self.arrived.borrow()
        );
    }

    /// Requests that arrived so far.
    pub fn arrived(&self) -> u64 {
        *self.arrived.borrow()
    }

    /// Lets every held request (and every later one) through.
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// Counts a request in and waits until the gate is open.
    async fn pass(&self) {
        self.arrived.send_modify(|n| *n += 1);
        let _ = self.open.subscribe().wait_for(|open| *open).await;
    }
}

impl TestOrigin {
    /// Requests seen for a path (with its query), any method.
    pub fn count(&self, path: &str) -> u64 {
        self.counts.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// Requests seen in all.
    pub fn total(&self) -> u64 {
        self.counts.lock().unwrap().values().sum()
    }

    /// Body bytes the `/stream/` route has handed to its connections so far.
    pub fn streamed(&self) -> u64 {
        self.shared.streamed.load(Ordering::Relaxed)
    }

    /// 304s `/reval/` sent for a path (with its query).
    pub fn not_modified(&self, path: &str) -> u64 {
        self.shared
            .not_modified
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Holds every request for `path` (with its query, as the origin sees it) until the gate
    /// returned opens.
    pub fn hold(&self, path: &str) -> Arc<Gate> {
        let gate = Arc::new(Gate {
            arrived: tokio::sync::watch::channel(0).0,
            open: tokio::sync::watch::channel(false).0,
        });
        let mut gates = self.shared.gates.lock().unwrap();
        gates.insert(path.to_string(), Arc::clone(&gate));
        gate
    }

    /// Makes `/media/` answer `path` (without its query) as version `v` from now on.
    pub fn set_version(&self, path: &str, v: u64) {
        self.shared
            .versions
            .lock()
            .unwrap()
            .insert(path.to_string(), v);
    }

    /// The `Range` of every request `/media/` answered for `path` (without its query), in
    /// order (`-` for none); taken, so the next call starts afresh.
    pub fn media_ranges(&self, path: &str) -> Vec<String> {
        let mut all = self.shared.media_requests.lock().unwrap();
        let (mine, rest): (Vec<_>, Vec<_>) = all.drain(..).partition(|(p, _)| p == path);
        *all = rest;
        mine.into_iter().map(|(_, r)| r).collect()
    }

    /// Requests to `/personal/` that carried `Authorization` or `Cookie`.
    pub fn credentialed(&self) -> u64 {
        self.shared.credentialed.load(Ordering::Relaxed)
    }

    /// Stops the origin: its port refuses connections and every open connection is closed.
    pub fn stop(&self) {
        self.task.abort();
        for c in self.connections.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    /// The origin's URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for TestOrigin {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A query parameter, percent-decoded.
fn param(req: &Request<Incoming>, name: &str) -> Option<String> {
    let q = req.uri().query()?;
    let raw = q
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))?;
    let mut out = Vec::new();
    let b = raw.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match (
            b[i],
            b.get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok()),
        ) {
            (b'%', Some(h)) if u8::from_str_radix(h, 16).is_ok() => {
                out.push(u8::from_str_radix(h, 16).unwrap());
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|e| match e {}).boxed()
}

async fn respond(req: Request<Incoming>, shared: Arc<Shared>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let size = req
        .uri()
        .query()
        .and_then(|q| q.strip_prefix("size="))
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000usize);
    let body = content(&path, size);
    let mut b = Response::builder()
        .header("etag", format!("\"{}\"", path.len()))
        .header("last-modified", "Wed, 01 Jan 2025 00:00:00 GMT");
    let first = path.split('/').nth(1).unwrap_or("");
    let cc = |b: http::response::Builder, v: &str| b.header("cache-control", v);
    let resp = match first {
        "cache" => cc(b, "public, max-age=60").body(full(body)),
        "short-ttl" => cc(b, "max-age=5").body(full(body)),
        "nostore" => cc(b, "no-store").body(full(body)),
        "private" => cc(b, "private, max-age=60").body(full(body)),
        "cookie" => cc(b, "max-age=60")
            .header("set-cookie", "session=secret")
            .body(full(body)),
        "varystar" => cc(b, "max-age=60").header("vary", "*").body(full(body)),
        "auth" => cc(b, "max-age=60").body(full(body)),
        "nocc" => b.body(full(body)),
        "missing" => {
            b = b.status(StatusCode::NOT_FOUND);
            cc(b, "max-age=60").body(full(body))
        }
        "error" => {
            b = b.status(StatusCode::INTERNAL_SERVER_ERROR);
            cc(b, "max-age=60").body(full(body))
        }
        "vary" => {
            let lang = req
                .headers()
                .get("accept-language")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_string();
            cc(b, "max-age=60")
                .header("vary", "Accept-Language")
                .body(full(format!("language={lang}")))
        }
        // Varies on Accept-Encoding and says what it received (`-`: no field).
        "vary-ae" => {
            let ae = req
                .headers()
                .get("accept-encoding")
                .map_or("-".to_string(), |v| v.as_bytes().escape_ascii().to_string());
            cc(b, "max-age=60")
                .header("vary", "Accept-Encoding")
                .body(full(format!("accept-encoding={ae}")))
        }
        // Varies on X-V and says what X-V it saw (its raw bytes, escaped). (A test that needs
        // the answer late holds it with a gate: `TestOrigin::hold`.)
        "vary-xv" => {
            let xv = req.headers().get("x-v").map_or("none".to_string(), |v| {
                v.as_bytes().escape_ascii().to_string()
            });
            cc(b, "max-age=60")
                .header("vary", "X-V")
                .body(full(format!("x-v={xv}")))
        }
        // `size` bytes made as they are read (64 KiB at a time, never more than two chunks
        // ahead), counted in `streamed`; never stored.
        "stream" => {
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            tokio::spawn(async move {
                let chunk = Bytes::from(vec![b's'; 65_536]);
                let mut left = size;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if tx.send(Ok(Frame::data(chunk.slice(..n)))).await.is_err() {
                        break;
                    }
                    shared.streamed.fetch_add(n as u64, Ordering::Relaxed);
                    left -= n;
                }
            });
            cc(b, "no-store")
                .header("content-length", size)
                .body(StreamBody::new(ReceiverStream(rx)).boxed())
        }
        // For revalidation tests. ETag "v1", Last-Modified fixed; the query sets the rest:
        // cc= Cache-Control, cdn= CDN-Cache-Control, sc= Surrogate-Control, tag= Surrogate-Key,
        // slow=MS delays the answer. A matching If-None-Match gets a 304 (counted). Other
        // methods get post_status= (default 200) with loc= as Location. Every response says
        // its number in x-response.
        "reval" => {
            if let Some(ms) = param(&req, "slow").and_then(|v| v.parse().ok()) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let n = shared.responses.fetch_add(1, Ordering::Relaxed) + 1;
            let mut b = b.header("x-response", n).header(
                "date",
                httpdate::fmt_http_date(std::time::SystemTime::now()),
            );
            for (q, h) in [
                ("cc", "cache-control"),
                ("cdn", "cdn-cache-control"),
                ("sc", "surrogate-control"),
                ("tag", "surrogate-key"),
            ] {
                if let Some(v) = param(&req, q) {
                    b = b.header(h, v);
                }
            }
            if req.method() != http::Method::GET && req.method() != http::Method::HEAD {
                let code = param(&req, "post_status")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(200u16);
                if let Some(loc) = param(&req, "loc") {
                    b = b.header("location", loc);
                }
                return b.status(code).body(full("done")).unwrap();
            }
            let etag_matches = req
                .headers()
                .get("if-none-match")
                .is_some_and(|v| v.as_bytes() == format!("\"{}\"", path.len()).as_bytes());
            if etag_matches {
                let key = req
                    .uri()
                    .path_and_query()
                    .map_or(String::new(), |p| p.to_string());
                *shared.not_modified.lock().unwrap().entry(key).or_default() += 1;
                return b.status(StatusCode::NOT_MODIFIED).body(full("")).unwrap();
            }
            b.body(full(body))
        }
        // Answers for whoever asks, as a site behind a login does: `for=WHO` in the body and in
        // `x-for`, WHO being the request's `Authorization`, else its `Cookie`, else
        // `anonymous`. ETag `"WHO"` (`same_etag=1`: `"v1"` for all, so a revalidation by anyone
        // gets a 304, which carries its `x-for`). The query sets cc= Cache-Control (none:
        // heuristic freshness from a Last-Modified a year old) and slow=MS.
        "personal" => {
            if let Some(ms) = param(&req, "slow").and_then(|v| v.parse().ok()) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let h = req.headers();
            let who = h
                .get("authorization")
                .or_else(|| h.get("cookie"))
                .map_or("anonymous".to_string(), |v| {
                    v.as_bytes().escape_ascii().to_string()
                });
            if who != "anonymous" {
                shared.credentialed.fetch_add(1, Ordering::Relaxed);
            }
            let etag = if param(&req, "same_etag").is_some() {
                "\"v1\"".to_string()
            } else {
                format!("\"{who}\"")
            };
            let mut b = Response::builder()
                .header("etag", etag.as_str())
                .header("x-for", who.as_str())
                .header("last-modified", "Wed, 01 Jan 2025 00:00:00 GMT")
                .header(
                    "date",
                    httpdate::fmt_http_date(std::time::SystemTime::now()),
                );
            if let Some(v) = param(&req, "cc") {
                b = b.header("cache-control", v);
            }
            if h.get("if-none-match")
                .is_some_and(|v| v.as_bytes() == etag.as_bytes())
            {
                return b.status(StatusCode::NOT_MODIFIED).body(full("")).unwrap();
            }
            b.body(full(format!("for={who}")))
        }
        // Reflects what origins commonly reflect, without `Vary`: `Origin` into
        // `Access-Control-Allow-Origin`, and `User-Agent`, `Referer`, `Accept-Language` into the
        // body (`-` for a field not received). Cacheable for a minute.
        "reflect" => {
            let h = req.headers();
            let field = |name: &str| {
                h.get(name)
                    .map_or("-".to_string(), |v| v.as_bytes().escape_ascii().to_string())
            };
            let body = format!(
                "ua={} referer={} lang={}",
                field("user-agent"),
                field("referer"),
                field("accept-language")
            );
            cc(b, "max-age=60")
                .header("access-control-allow-origin", field("origin"))
                .body(full(body))
        }
        // A large object that honours single ranges: `size` bytes of [`media`] at the path's
        // version (`TestOrigin::set_version`), ETag `"vN"`. The query: `cc=` Cache-Control
        // (default `max-age=60`), `tag=` Surrogate-Key, `noranges=1` answers 200 whole, `novalidator=1` sends no ETag
        // or Last-Modified, `lie=range` answers a range with the next one (and says so), `lie=long`
        // sends one byte more than its Content-Range. Every request's Range is recorded.
        "media" => {
            let version = shared
                .versions
                .lock()
                .unwrap()
                .get(&path)
                .copied()
                .unwrap_or(0);
            let range = req
                .headers()
                .get("range")
                .map_or("-".to_string(), |v| v.to_str().unwrap_or("?").to_string());
            shared
                .media_requests
                .lock()
                .unwrap()
                .push((path.clone(), range.clone()));
            let size = param(&req, "size")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1000usize);
            let body = media(&path, version, size);
            let mut b = Response::builder().header(
                "cache-control",
                param(&req, "cc").unwrap_or_else(|| "max-age=60".into()),
            );
            if let Some(tag) = param(&req, "tag") {
                b = b.header("surrogate-key", tag);
            }
            if param(&req, "novalidator").is_none() {
                b = b
                    .header("etag", format!("\"v{version}\""))
                    .header("last-modified", "Wed, 01 Jan 2025 00:00:00 GMT");
            }
            let honoured = if param(&req, "noranges").is_some() {
                None
            } else {
                media_range(&range, size as u64)
            };
            let lie = param(&req, "lie").unwrap_or_default();
            match honoured {
                None => b.body(full(body)),
                Some(Err(())) => b
                    .status(StatusCode::RANGE_NOT_SATISFIABLE)
                    .header("content-range", format!("bytes */{size}"))
                    .body(full("")),
                Some(Ok((first, last))) => {
                    let (f, l) = (first as usize, last as usize);
                    let (from, to) = if lie == "range" {
                        let n = l - f + 1;
                        ((f + n).min(size - 1), (l + n).min(size - 1))
                    } else {
                        (f, l)
                    };
                    let mut bytes = body[from..=to].to_vec();
                    if lie == "long" {
                        bytes.push(b'!');
                    }
                    let b = b
                        .status(StatusCode::PARTIAL_CONTENT)
                        .header("content-range", format!("bytes {from}-{to}/{size}"))
                        .header("content-length", bytes.len());
                    // `midway=N`: a range from byte N sends its first half, then waits for the
                    // gate held for `PATH#rest` (`TestOrigin::hold`) before the rest.
                    let midway = param(&req, "midway").and_then(|v| v.parse::<usize>().ok());
                    let gate = shared
                        .gates
                        .lock()
                        .unwrap()
                        .get(&format!("{path}#rest"))
                        .cloned();
                    match (midway == Some(f), gate) {
                        (true, Some(gate)) => {
                            let (tx, rx) = tokio::sync::mpsc::channel(2);
                            tokio::spawn(async move {
                                let mut bytes = Bytes::from(bytes);
                                let first = bytes.split_to(bytes.len() / 2);
                                let _ = tx.send(Ok(Frame::data(first))).await;
                                gate.pass().await;
                                let _ = tx.send(Ok(Frame::data(bytes))).await;
                            });
                            b.body(StreamBody::new(ReceiverStream(rx)).boxed())
                        }
                        _ => b.body(full(bytes)),
                    }
                }
            }
        }
        // `/fail/NNN`: status NNN, never stored; `/fail/ok` answers 200 (for health probes).
        "fail" => {
            let code = path
                .split('/')
                .nth(2)
                .and_then(|c| c.parse::<u16>().ok())
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::OK);
            b = b.status(code);
            cc(b, "no-store").body(full(format!("status {}", code.as_u16())))
        }
        // 204 No Content, cacheable.
        "nocontent" => {
            b = b.status(StatusCode::NO_CONTENT);
            cc(b, "max-age=60").body(full(""))
        }
        // Echoes every request header it received, one per line, sorted.
        "headers" => {
            let mut lines: Vec<String> = req
                .headers()
                .iter()
                .map(|(k, v)| format!("{k}: {}", v.as_bytes().escape_ascii()))
                .collect();
            lines.sort();
            cc(b, "max-age=60").body(full(lines.join("\n")))
        }
        "echo" => {
            let xfh = req
                .headers()
                .get("x-forwarded-host")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_string();
            cc(b, "max-age=60").body(full(format!("x-forwarded-host={xfh}")))
        }
        "delay" => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cc(b, "max-age=60").body(full(body))
        }
        "slow-headers" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            cc(b, "max-age=60").body(full(body))
        }
        // Announces the whole body, sends half, then breaks the connection.
        "short" => {
            let half = Bytes::from(body[..size / 2].to_vec());
            let (tx, rx) = tokio::sync::mpsc::channel(2);
            tokio::spawn(async move {
                let _ = tx.send(Ok(Frame::data(half))).await;
                // Let the headers and the first half go out before the reset.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = tx.send(Err("origin reset".into())).await;
            });
            cc(b, "max-age=60")
                .header("content-length", size)
                .body(StreamBody::new(ReceiverStream(rx)).boxed())
        }
        // Sends half, then stalls for longer than the proxy's body timeout.
        "stall" => {
            let half = Bytes::from(body[..size / 2].to_vec());
            let (tx, rx) = tokio::sync::mpsc::channel(2);
            tokio::spawn(async move {
                let _ = tx.send(Ok(Frame::data(half))).await;
                tokio::time::sleep(Duration::from_secs(30)).await;
                drop(tx);
            });
            cc(b, "max-age=60")
                .header("content-length", size)
                .body(StreamBody::new(ReceiverStream(rx)).boxed())
        }
        _ => {
            b = b.status(StatusCode::NOT_FOUND);
            b.body(full("no such test route"))
        }
    };
    resp.unwrap_or_else(|_| Response::new(full("bad test response")))
}

type FrameResult = Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>;

struct ReceiverStream(tokio::sync::mpsc::Receiver<FrameResult>);

impl futures_core::Stream for ReceiverStream {
    type Item = FrameResult;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<FrameResult>> {
        self.0.poll_recv(cx)
    }
}

/// Starts the origin.
pub async fn start() -> TestOrigin {
    start_at("127.0.0.1:0".parse().unwrap()).await
}

/// Starts the origin on `addr` (the port of one stopped before: a server restarted).
pub async fn start_at(addr: SocketAddr) -> TestOrigin {
    let listener = TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let shared: Arc<Shared> = Arc::default();
    let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
    let (c, sh, conns) = (counts.clone(), shared.clone(), connections.clone());
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let c = c.clone();
            let sh = sh.clone();
            let conn = tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let c = c.clone();
                    let sh = sh.clone();
                    async move {
                        let key = req
                            .uri()
                            .path_and_query()
                            .map_or("/".to_string(), |p| p.as_str().to_string());
                        *c.lock().unwrap().entry(key.clone()).or_default() += 1;
                        let gate = sh.gates.lock().unwrap().get(&key).cloned();
                        if let Some(gate) = gate {
                            gate.pass().await;
                        }
                        Ok::<_, Infallible>(respond(req, sh).await)
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
            conns.lock().unwrap().push(conn.abort_handle());
        }
    });
    TestOrigin {
        addr,
        counts,
        shared,
        task,
        connections,
    }
}
