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

/// A running test origin.
pub struct TestOrigin {
    pub addr: SocketAddr,
    counts: Arc<Mutex<HashMap<String, u64>>>,
    streamed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
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
        self.streamed.load(Ordering::Relaxed)
    }

    /// The origin's URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for TestOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|e| match e {}).boxed()
}

async fn respond(req: Request<Incoming>, streamed: Arc<AtomicU64>) -> Response<Body> {
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
        // Varies on X-V and says what X-V it saw (its raw bytes, escaped); "/vary-xv/slow"
        // answers after 300 ms.
        "vary-xv" => {
            let xv = req.headers().get("x-v").map_or("none".to_string(), |v| {
                v.as_bytes().escape_ascii().to_string()
            });
            if path.ends_with("/slow") {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
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
                    streamed.fetch_add(n as u64, Ordering::Relaxed);
                    left -= n;
                }
            });
            cc(b, "no-store")
                .header("content-length", size)
                .body(StreamBody::new(ReceiverStream(rx)).boxed())
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
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let streamed: Arc<AtomicU64> = Arc::default();
    let c = counts.clone();
    let st = streamed.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let c = c.clone();
            let st = st.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let c = c.clone();
                    let st = st.clone();
                    async move {
                        let key = req
                            .uri()
                            .path_and_query()
                            .map_or("/".to_string(), |p| p.as_str().to_string());
                        *c.lock().unwrap().entry(key).or_default() += 1;
                        Ok::<_, Infallible>(respond(req, st).await)
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    TestOrigin {
        addr,
        counts,
        streamed,
        task,
    }
}
