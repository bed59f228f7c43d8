//! `secondhit origin`: a synthetic origin for replay, tests and benchmarks.
//!
//! `GET /<key>?size=<bytes>` answers exactly `size` bytes whose content is derived from the key
//! ([`content`]), so any client can check every byte, with `Cache-Control: public, max-age=N`,
//! `ETag`, `Last-Modified` and `Content-Length`; `HEAD` and single `Range`s work, and a GET
//! whose `If-None-Match` names the object's `ETag` is answered 304 (a cache's revalidation
//! refreshes its copy without a body, as from a real origin). It counts
//! requests and body bytes, readable as JSON at `/_stats`. Optional faults, chosen per request
//! with a seeded RNG: latency, 5xx, a reset mid-body, a body shorter than its Content-Length, a
//! slow drip.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use secondhit_proxy::body::{channel, empty, full, BoxError, ProxyBody};
use secondhit_proxy::http_cache::{range_answer, RangeAnswer};
use secondhit_proxy::listener;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use xxhash_rust::xxh3::xxh3_64;

/// The content of object `key` from byte `offset` on, `len` bytes: byte `i` is byte `i % 8`
/// (little-endian) of `splitmix64(xxh3_64(key) + i / 8)`. Documented so any client can verify.
pub fn content(key: &str, offset: u64, len: usize) -> Vec<u8> {
    let seed = xxh3_64(key.as_bytes());
    let mut out = Vec::with_capacity(len);
    let mut i = offset;
    let end = offset + len as u64;
    while i < end {
        let word = splitmix64(seed.wrapping_add(i / 8)).to_le_bytes();
        let from = (i % 8) as usize;
        let take = ((end - i) as usize).min(8 - from);
        out.extend_from_slice(&word[from..from + take]);
        i += take as u64;
    }
    out
}

/// Whether `bytes` is object `key`'s content from `offset` on.
pub fn verify(key: &str, offset: u64, bytes: &[u8]) -> bool {
    content(key, offset, bytes.len()) == bytes
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Bodies larger than this are made and sent in chunks of this size.
const STREAM_ABOVE: u64 = 64 * 1024;

/// The synthetic origin's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct OriginOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// `max-age` of every response, in seconds.
    pub max_age: u64,
    /// Size when the request has no `?size=`.
    pub default_size: u64,
    /// Largest size served (bigger requests get 413): by default the largest a trace record
    /// holds (4 GiB less 1 byte), as media traces reach 2 GiB.
    pub max_size: u64,
    /// Fixed delay before the response headers.
    pub latency: Duration,
    /// Share of requests answered with 503.
    pub error_rate: f64,
    /// Share of requests whose connection is reset after half the body.
    pub reset_rate: f64,
    /// Share of requests whose body stops short of its Content-Length (the connection closes).
    pub short_rate: f64,
    /// Share of requests whose body drips slowly (1 KiB every `drip_interval`).
    pub drip_rate: f64,
    /// Pause between dripped chunks.
    pub drip_interval: Duration,
    /// Seed of the fault choices.
    pub seed: u64,
}

impl Default for OriginOptions {
    fn default() -> Self {
        OriginOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            max_age: 3600,
            default_size: 1024,
            max_size: u64::from(u32::MAX),
            latency: Duration::ZERO,
            error_rate: 0.0,
            reset_rate: 0.0,
            short_rate: 0.0,
            drip_rate: 0.0,
            drip_interval: Duration::from_millis(100),
            seed: 1,
        }
    }
}

/// Why the synthetic origin could not start.
#[derive(Debug, thiserror::Error)]
pub enum OriginServerError {
    /// A fault rate outside [0, 1].
    #[error("{name} must be a fraction in [0, 1], got {value}")]
    Rate {
        /// The option (`error rate`, ...).
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// The fault rates add up to more than 1.
    #[error("the fault rates add up to more than 1 (got {0})")]
    RatesOverOne(f64),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

impl OriginOptions {
    /// Checks the options, naming the bad one.
    pub fn validate(&self) -> Result<(), OriginServerError> {
        for (name, value) in [
            ("error rate", self.error_rate),
            ("reset rate", self.reset_rate),
            ("short rate", self.short_rate),
            ("drip rate", self.drip_rate),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(OriginServerError::Rate { name, value });
            }
        }
        let sum = self.error_rate + self.reset_rate + self.short_rate + self.drip_rate;
        if sum > 1.0 {
            return Err(OriginServerError::RatesOverOne(sum));
        }
        Ok(())
    }
}

/// The origin's counters, as `/_stats` reports them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct OriginStats {
    /// Requests for objects (not `/_stats`).
    pub requests: u64,
    /// Body bytes sent: bodies up to 64 KiB count when their response is made; larger ones
    /// count as each 64 KiB chunk is handed to the connection, so a client that leaves early
    /// shows; a cut-off body counts what was sent.
    pub bytes: u64,
    /// Responses with injected faults.
    pub faults: u64,
    /// Conditional GETs answered 304 (`If-None-Match` named the object's `ETag`).
    #[serde(default)]
    pub not_modified: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    bytes: AtomicU64,
    faults: AtomicU64,
    not_modified: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> OriginStats {
        OriginStats {
            requests: self.requests.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            faults: self.faults.load(Relaxed),
            not_modified: self.not_modified.load(Relaxed),
        }
    }
}

/// A running synthetic origin.
pub struct RunningOrigin {
    /// Its address.
    pub addr: SocketAddr,
    counters: Arc<Counters>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningOrigin {
    /// The counters so far.
    pub fn stats(&self) -> OriginStats {
        self.counters.snapshot()
    }

    /// Stops accepting and waits for the accept loop to end.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

enum Fault {
    None,
    Error,
    Reset,
    Short,
    Drip,
}

struct Shared {
    options: OriginOptions,
    counters: Arc<Counters>,
    rng: Mutex<Xoshiro256PlusPlus>,
}

impl Shared {
    fn fault(&self) -> Fault {
        let o = &self.options;
        if o.error_rate + o.reset_rate + o.short_rate + o.drip_rate == 0.0 {
            return Fault::None;
        }
        let x: f64 = match self.rng.lock() {
            Ok(mut r) => r.random(),
            Err(_) => return Fault::None,
        };
        let mut edge = o.error_rate;
        if x < edge {
            return Fault::Error;
        }
        edge += o.reset_rate;
        if x < edge {
            return Fault::Reset;
        }
        edge += o.short_rate;
        if x < edge {
            return Fault::Short;
        }
        edge += o.drip_rate;
        if x < edge {
            return Fault::Drip;
        }
        Fault::None
    }
}

async fn respond(shared: Arc<Shared>, req: Request<Incoming>) -> Response<ProxyBody> {
    let path = req.uri().path().to_string();
    if path == "/_stats" {
        let stats = serde_json::to_string(&shared.counters.snapshot()).unwrap_or_default();
        let mut r = Response::new(full(stats));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return r;
    }
    let o = &shared.options;
    shared.counters.requests.fetch_add(1, Relaxed);
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD only\n");
    }
    let size = match requested_size(&req, o) {
        Ok(n) => n,
        Err(message) => return plain(StatusCode::PAYLOAD_TOO_LARGE, message),
    };
    if !o.latency.is_zero() {
        tokio::time::sleep(o.latency).await;
    }
    let fault = shared.fault();
    if matches!(fault, Fault::Error) {
        shared.counters.faults.fetch_add(1, Relaxed);
        return plain(StatusCode::SERVICE_UNAVAILABLE, "injected error\n");
    }
    let mut b = object_headers(&path, size, o.max_age);
    if none_match(req.headers().get(header::IF_NONE_MATCH), &etag(&path, size)) {
        shared.counters.not_modified.fetch_add(1, Relaxed);
        return b
            .status(StatusCode::NOT_MODIFIED)
            .body(empty())
            .unwrap_or_else(|_| Response::new(full("")));
    }
    let (status, start, len) = match range_answer(req.headers().get(header::RANGE), size) {
        RangeAnswer::Full => (StatusCode::OK, 0, size),
        RangeAnswer::Partial {
            start,
            end,
            content_range,
        } => {
            b = b.header(header::CONTENT_RANGE, content_range);
            (StatusCode::PARTIAL_CONTENT, start, end - start + 1)
        }
        RangeAnswer::Unsatisfiable { content_range } => {
            let mut r = plain(StatusCode::RANGE_NOT_SATISFIABLE, "");
            r.headers_mut().insert(header::CONTENT_RANGE, content_range);
            return r;
        }
    };
    b = b.status(status).header(header::CONTENT_LENGTH, len);
    if req.method() == Method::HEAD {
        return b.body(empty()).unwrap_or_else(|_| Response::new(full("")));
    }
    let body = shared.body(path, start, len, fault);
    b.body(body).unwrap_or_else(|_| Response::new(full("")))
}

/// A response of `status` with a short text body.
fn plain(status: StatusCode, body: impl Into<Bytes>) -> Response<ProxyBody> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r
}

/// The size `?size=` asks for (`default_size` without one), or what is wrong with it.
fn requested_size(req: &Request<Incoming>, o: &OriginOptions) -> Result<u64, String> {
    match req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("size=")))
    {
        None => Ok(o.default_size),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n <= o.max_size => Ok(n),
            _ => Err(format!("bad size {v:?}: 0..={}\n", o.max_size)),
        },
    }
}

/// The strong ETag of the object at `path` of `size` bytes.
fn etag(path: &str, size: u64) -> String {
    format!("\"{:016x}-{size}\"", xxh3_64(path.as_bytes()))
}

/// Whether an `If-None-Match` field names `etag` (or is `*`): weak comparison, RFC 9110 §13.1.2.
fn none_match(field: Option<&HeaderValue>, etag: &str) -> bool {
    let Some(value) = field.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    value
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

/// The headers of the object at `path` of `size` bytes, whole or in part.
fn object_headers(path: &str, size: u64, max_age: u64) -> http::response::Builder {
    Response::builder()
        .header(header::CACHE_CONTROL, format!("public, max-age={max_age}"))
        .header(header::ETAG, etag(path, size))
        .header(header::LAST_MODIFIED, "Wed, 01 Jan 2025 00:00:00 GMT")
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CONTENT_TYPE, "application/octet-stream")
}

impl Shared {
    /// The body of bytes `start..start + len` of the object at `path`, broken as `fault` says,
    /// its bytes counted as sent.
    fn body(&self, path: String, start: u64, len: u64, fault: Fault) -> ProxyBody {
        if matches!(fault, Fault::None | Fault::Error) && len > STREAM_ABOVE {
            return streamed(path, start, len, Arc::clone(&self.counters));
        }
        let body = Bytes::from(content(&path, start, len as usize));
        match fault {
            Fault::None | Fault::Error => {
                self.counters.bytes.fetch_add(len, Relaxed);
                full(body)
            }
            Fault::Reset | Fault::Short => {
                self.counters.faults.fetch_add(1, Relaxed);
                let half = body.slice(..body.len() / 2);
                self.counters.bytes.fetch_add(half.len() as u64, Relaxed);
                let reset = matches!(fault, Fault::Reset);
                let (tx, rx) = channel(2, None, None);
                tokio::spawn(async move {
                    let _ = tx.send(Frame::data(half)).await;
                    // Let the headers and the half go out first, then break the connection.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let err: BoxError = if reset {
                        "injected reset".into()
                    } else {
                        "injected short body".into()
                    };
                    tx.fail(err).await;
                });
                rx.boxed()
            }
            Fault::Drip => {
                self.counters.faults.fetch_add(1, Relaxed);
                self.counters.bytes.fetch_add(len, Relaxed);
                let interval = self.options.drip_interval;
                let (tx, rx) = channel(2, None, None);
                tokio::spawn(async move {
                    let mut rest = body;
                    while !rest.is_empty() {
                        let n = rest.len().min(1024);
                        if tx.send(Frame::data(rest.split_to(n))).await.is_err() {
                            break;
                        }
                        tokio::time::sleep(interval).await;
                    }
                });
                rx.boxed()
            }
        }
    }
}

/// A large body, made as the connection takes it and counted as it goes: a client that leaves
/// early shows in `bytes`, and a large object costs no more memory than a few chunks.
fn streamed(path: String, start: u64, len: u64, counters: Arc<Counters>) -> ProxyBody {
    let (tx, rx) = channel(2, None, None);
    tokio::spawn(async move {
        let mut offset = start;
        let end = start + len;
        while offset < end {
            let n = (end - offset).min(STREAM_ABOVE);
            let chunk = Bytes::from(content(&path, offset, n as usize));
            if tx.send(Frame::data(chunk)).await.is_err() {
                break;
            }
            counters.bytes.fetch_add(n, Relaxed);
            offset += n;
        }
    });
    rx.boxed()
}

/// Starts the origin.
pub async fn start(options: OriginOptions) -> Result<RunningOrigin, OriginServerError> {
    options.validate()?;
    let bind = |source| OriginServerError::Bind {
        addr: options.listen,
        source,
    };
    let listener = TcpListener::bind(options.listen).await.map_err(bind)?;
    let addr = listener.local_addr().map_err(bind)?;
    let counters = Arc::new(Counters::default());
    let shared = Arc::new(Shared {
        rng: Mutex::new(Xoshiro256PlusPlus::seed_from_u64(options.seed)),
        options,
        counters: Arc::clone(&counters),
    });
    let (stop, stopped) = watch::channel(false);
    // A test and benchmark origin: no timeouts, no eviction worth speaking of.
    let limits = listener::Limits {
        max_connections: 16_384,
        max_per_ip: 0,
        first_byte: None,
        watch: listener::activity::Timeouts::default(),
        grace: Duration::from_secs(1),
        // Its bodies are its own channels, unbudgeted.
        connection_buffer: u32::MAX,
    };
    let task = tokio::spawn(listener::serve(
        listener,
        auto::Builder::new(TokioExecutor::new()),
        None,
        limits,
        stopped,
        move |req, _| {
            let shared = Arc::clone(&shared);
            async move { Ok(respond(shared, req).await) }
        },
    ));
    Ok(RunningOrigin {
        addr,
        counters,
        stop,
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_stable_and_offsets_agree() {
        let whole = content("/k/abc", 0, 1000);
        assert_eq!(whole.len(), 1000);
        assert_eq!(content("/k/abc", 0, 1000), whole);
        for (off, len) in [(0, 1), (3, 10), (7, 9), (8, 8), (995, 5), (500, 0)] {
            assert_eq!(
                content("/k/abc", off, len),
                whole[off as usize..off as usize + len]
            );
        }
        assert!(verify("/k/abc", 10, &whole[10..90]));
        assert!(!verify("/k/abd", 10, &whole[10..90]));
        assert_ne!(content("/k/abd", 0, 16), whole[..16]);
    }

    #[test]
    fn fault_rates_are_checked() {
        let bad = OriginOptions {
            error_rate: 0.7,
            reset_rate: 0.5,
            ..OriginOptions::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("more than 1"));
        let bad = OriginOptions {
            drip_rate: -0.1,
            ..OriginOptions::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("drip rate"));
    }
}
