//! Live replay: a trace as HTTP requests against any cache, measuring what it achieves.
//!
//! Each request becomes `GET <target>/k/<32 hex digits of the key hash>?size=<bytes>`, the URL
//! form `secondhit origin` serves, so a cache in front of that origin can be checked byte for
//! byte; a request with a range (a trace's `range` column) carries it as `Range: bytes=A-B` and
//! must be answered 206 with exactly those bytes (its requested and hit bytes are the range's). Hits are read from `X-Cache: HIT` and, for caches that send no such header (nginx,
//! Varnish), from the origin's own counters (`/_stats`). At concurrency 1 the requests go in
//! trace order, one at a time.

use crate::origin_server::{verify, OriginStats};
use crate::sim::Progress;
use crate::trace::{Request as TraceRequest, TraceError};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Mutex};

/// The replayer's latency histogram: microseconds from 1 µs to 1 h at 3 significant digits
/// (larger values saturate when recorded with `saturating_record`): exact percentiles of one
/// run, where `serve`'s `/metrics` keeps fixed buckets.
fn latency_histogram() -> hdrhistogram::Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts; the fallback auto-resizes.
    hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3)
        .unwrap_or_else(|_| hdrhistogram::Histogram::new(3).expect("3 significant digits is valid"))
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Reading the trace failed.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// `concurrency` 0.
    #[error("concurrency must be at least 1")]
    Concurrency,
    /// A target that is not `http://host:port`.
    #[error("target {0} must be http://host:port")]
    Target(Uri),
    /// A rate or speed that is not a positive number.
    #[error("{name} must be a positive number, got {value}")]
    Pace {
        /// `rate` or `speed`.
        name: &'static str,
        /// The value.
        value: f64,
    },
    /// A worker or the trace reader panicked (a bug); its requests would be missing from the
    /// figures, so there are none.
    #[error("the replay's {thread} panicked: {message}")]
    Panicked {
        /// Which one.
        thread: &'static str,
        /// The panic's message.
        message: String,
    },
}

/// Why one replayed request failed: the `errors_by_kind` keys of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// The URL could not be built.
    Url,
    /// No connection to the target.
    Connect,
    /// The request failed before a response.
    Request,
    /// The body broke off.
    Body,
    /// A status other than 200.
    Status(u16),
    /// No complete answer within the timeout.
    Timeout,
}

impl Failure {
    /// The label: `connect`, `status-503`, ...
    pub fn label(self) -> String {
        match self {
            Failure::Url => "url".into(),
            Failure::Connect => "connect".into(),
            Failure::Request => "request".into(),
            Failure::Body => "body".into(),
            Failure::Status(code) => format!("status-{code}"),
            Failure::Timeout => "timeout".into(),
        }
    }
}

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// The cache (or origin) to drive: `http://host:port`.
    pub target: Uri,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// At most this many requests a second (`None`: as fast as answers come).
    pub rate: Option<f64>,
    /// Follow the trace's timestamps, sped up this many times (`None`: ignore them).
    pub speed: Option<f64>,
    /// Replay only the first N requests (after `skip`).
    pub limit: Option<u64>,
    /// Start after the trace's first N requests (never sent): replay a trace in parts.
    pub skip: u64,
    /// Leave the first N requests out of the figures (they still warm the cache).
    pub warmup: u64,
    /// The origin's `/_stats` URL, to count what reached the origin.
    pub origin_stats: Option<Uri>,
    /// Per-request timeout, headers and body.
    pub timeout: Duration,
    /// Stop sending new requests after this long (`None`: run to the end of the trace).
    pub duration: Option<Duration>,
}

impl ReplayOptions {
    /// Defaults for `target`: concurrency 16, no pacing, 30 s timeout.
    pub fn new(target: Uri) -> Self {
        ReplayOptions {
            target,
            concurrency: 16,
            rate: None,
            speed: None,
            limit: None,
            skip: 0,
            warmup: 0,
            origin_stats: None,
            timeout: Duration::from_secs(30),
            duration: None,
        }
    }
}

/// Latency percentiles, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
    /// Samples.
    pub count: u64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            mean: h.mean() / 1000.0,
            count: h.len(),
        }
    }
}

/// What a replay measured. Ratios are fractions in [0, 1]; sizes are bytes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReplayReport {
    /// Requests measured (after the warm-up).
    pub requests: u64,
    /// Responses with `X-Cache: HIT`.
    pub hits: u64,
    /// `hits / requests`.
    pub hit_ratio: f64,
    /// Bytes of `HIT` responses over all bytes requested.
    pub byte_hit_ratio: f64,
    /// Bytes requested (the trace's sizes).
    pub requested_bytes: u64,
    /// Requests the origin saw during the measured part (with `origin_stats`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin_requests: Option<u64>,
    /// Body bytes the origin sent during the measured part (with `origin_stats`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin_bytes: Option<u64>,
    /// `1 - origin_requests / requests`: the hit ratio as the origin sees it, for caches that
    /// send no `X-Cache`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin_offload: Option<f64>,
    /// Failed requests (connect, timeout, non-2xx status, broken body).
    pub errors: u64,
    /// Failures by kind.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Responses whose body was not the object's content or length: must be 0.
    pub corrupted: u64,
    /// Responses by `X-Cache` value (`none` when absent).
    pub outcomes: BTreeMap<String, u64>,
    /// Measured requests per second of wall time.
    pub requests_per_sec: f64,
    /// Wall time of the measured part, in seconds.
    pub duration_secs: f64,
    /// Latency of whole responses (headers and body), all requests.
    pub latency_ms: Latency,
    /// Latency by `X-Cache` value.
    pub latency_by_outcome: BTreeMap<String, Latency>,
}

/// The URL path of a trace request.
pub fn path_of(r: &TraceRequest) -> String {
    format!("/k/{:032x}", r.key.raw())
}

#[derive(Default)]
struct Tally {
    requests: u64,
    hits: u64,
    hit_bytes: u64,
    requested_bytes: u64,
    errors: BTreeMap<String, u64>,
    corrupted: u64,
    outcomes: BTreeMap<String, u64>,
    latency: Option<Histogram<u64>>,
    by_outcome: BTreeMap<String, Histogram<u64>>,
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.requests += o.requests;
        self.hits += o.hits;
        self.hit_bytes += o.hit_bytes;
        self.requested_bytes += o.requested_bytes;
        self.corrupted += o.corrupted;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        for (k, v) in o.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        if let Some(h) = o.latency {
            let _ = self.latency.get_or_insert_with(latency_histogram).add(&h);
        }
        for (k, h) in o.by_outcome {
            let _ = self
                .by_outcome
                .entry(k)
                .or_insert_with(latency_histogram)
                .add(&h);
        }
    }

    /// One measured answer, `us` microseconds from sending to the whole body.
    fn record(&mut self, size: u64, outcome: Result<(String, bool), Failure>, us: u64) {
        self.requests += 1;
        self.requested_bytes += size;
        let label = match outcome {
            Ok((x_cache, ok)) => {
                if !ok {
                    self.corrupted += 1;
                }
                if x_cache == "HIT" {
                    self.hits += 1;
                    self.hit_bytes += size;
                }
                x_cache
            }
            Err(kind) => {
                *self.errors.entry(kind.label()).or_default() += 1;
                "error".to_string()
            }
        };
        let _ = self
            .latency
            .get_or_insert_with(latency_histogram)
            .record(us);
        let _ = self
            .by_outcome
            .entry(label.clone())
            .or_insert_with(latency_histogram)
            .record(us);
        *self.outcomes.entry(label).or_default() += 1;
    }

    /// The report of a replay that measured for `elapsed`, and what reached the origin then.
    fn into_report(self, elapsed: Duration, origin: (Option<u64>, Option<u64>)) -> ReplayReport {
        let (origin_requests, origin_bytes) = origin;
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        ReplayReport {
            requests: self.requests,
            hits: self.hits,
            hit_ratio: ratio(self.hits, self.requests),
            byte_hit_ratio: ratio(self.hit_bytes, self.requested_bytes),
            requested_bytes: self.requested_bytes,
            origin_requests,
            origin_bytes,
            origin_offload: origin_requests.map(|o| 1.0 - ratio(o, self.requests)),
            errors: self.errors.values().sum(),
            errors_by_kind: self.errors,
            corrupted: self.corrupted,
            outcomes: self.outcomes,
            requests_per_sec: self.requests as f64 / elapsed.as_secs_f64().max(1e-9),
            duration_secs: elapsed.as_secs_f64(),
            latency_ms: self.latency.as_ref().map(Latency::of).unwrap_or_default(),
            latency_by_outcome: self
                .by_outcome
                .iter()
                .map(|(k, h)| (k.clone(), Latency::of(h)))
                .collect(),
        }
    }
}

async fn origin_stats(
    client: &Client<HttpConnector, Empty<Bytes>>,
    url: &Uri,
) -> Option<OriginStats> {
    let resp = client.get(url.clone()).await.ok()?;
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    serde_json::from_slice(&body).ok()
}

/// Replays `requests` against the target. Trace reading runs on its own thread; `progress`
/// hears of every completed request.
pub async fn run(
    requests: impl Iterator<Item = Result<TraceRequest, TraceError>> + Send + 'static,
    options: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<ReplayReport, ReplayError> {
    options.validate()?;
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(options.concurrency)
        .build_http();
    let (tx, rx) = mpsc::channel::<(u64, TraceRequest)>(4096);
    let reader = spawn_reader(
        requests,
        options.skip,
        options.limit.unwrap_or(u64::MAX),
        tx,
    );
    // Dropping the receiver (all workers done) stops the reader thread at its next send.
    let rx = Arc::new(Mutex::new(rx));
    let (shared, measuring_rx) = Shared::new(options, client);
    let shared = Arc::new(shared);
    if options.warmup == 0 {
        // Nothing to warm: the counters are read before the first request goes out.
        shared.begin_measuring().await;
    }
    let workers = (0..options.concurrency)
        .map(|_| {
            let worker = Worker {
                shared: Arc::clone(&shared),
                requests: Arc::clone(&rx),
                measuring: measuring_rx.clone(),
            };
            tokio::spawn(worker.run())
        })
        .collect();
    // Only the workers hold the receiver now: when they stop (trace end or `duration`), the
    // reader thread's next send fails and it ends.
    drop(rx);
    let tallies = wait_reporting(workers, &shared.done, options.limit, progress).await;
    let elapsed = shared
        .measured_start
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .map_or(Duration::ZERO, |s| s.elapsed());
    match reader.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(ReplayError::Trace(e)),
        Err(p) => {
            return Err(ReplayError::Panicked {
                thread: "trace reader",
                message: crate::sim::panic_message(p),
            })
        }
    }
    let mut tally = Tally::default();
    for t in tallies? {
        tally.merge(t);
    }
    Ok(tally.into_report(elapsed, shared.origin_delta().await))
}

impl ReplayOptions {
    /// Checks the options, naming the bad one.
    fn validate(&self) -> Result<(), ReplayError> {
        if self.concurrency == 0 {
            return Err(ReplayError::Concurrency);
        }
        if self.target.scheme_str() != Some("http") || self.target.authority().is_none() {
            return Err(ReplayError::Target(self.target.clone()));
        }
        for (name, v) in [("rate", self.rate), ("speed", self.speed)] {
            if let Some(value) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(ReplayError::Pace { name, value });
            }
        }
        Ok(())
    }
}

/// The reader thread: feeds (index, request) in trace order, `limit` requests after the first
/// `skip`; a read error ends the replay.
fn spawn_reader(
    requests: impl Iterator<Item = Result<TraceRequest, TraceError>> + Send + 'static,
    skip: u64,
    limit: u64,
    tx: mpsc::Sender<(u64, TraceRequest)>,
) -> std::thread::JoinHandle<Result<(), TraceError>> {
    std::thread::spawn(move || -> Result<(), TraceError> {
        for (n, r) in requests.enumerate() {
            let i = (n as u64).wrapping_sub(skip);
            if n as u64 >= skip && i >= limit {
                break;
            }
            // Skipped requests are still read (and a bad record among them reported).
            let r = r?;
            if (n as u64) < skip {
                continue;
            }
            if tx.blocking_send((i, r)).is_err() {
                break;
            }
        }
        Ok(())
    })
}

/// What the workers share: the options, the client, and the bookkeeping of the measuring.
struct Shared {
    options: ReplayOptions,
    /// The target without a trailing `/`.
    target: String,
    client: Client<HttpConnector, Empty<Bytes>>,
    /// When the replay began: what pacing and `duration` count from.
    start: Instant,
    /// Requests answered, warm-up included (for progress).
    done: AtomicU64,
    /// Warm-up requests answered so far, and whether measuring has begun: no measured request is
    /// sent before every warm-up request is answered and the origin's counters are read, so
    /// neither side of the snapshot leaks into the other.
    warm_done: AtomicU64,
    measuring: watch::Sender<bool>,
    /// When measuring began.
    measured_start: std::sync::Mutex<Option<Instant>>,
    /// The origin's counters when measuring began (with `origin_stats`).
    origin_before: Mutex<Option<OriginStats>>,
    /// The first request's trace time (with `speed`).
    first_time: std::sync::Mutex<Option<Duration>>,
}

impl Shared {
    /// The replay's shared state as it begins (its clock starts now), and a receiver of whether
    /// measuring has begun.
    fn new(
        options: &ReplayOptions,
        client: Client<HttpConnector, Empty<Bytes>>,
    ) -> (Shared, watch::Receiver<bool>) {
        let (measuring, measuring_rx) = watch::channel(options.warmup == 0);
        let shared = Shared {
            options: options.clone(),
            target: options.target.to_string().trim_end_matches('/').to_string(),
            client,
            start: Instant::now(),
            done: AtomicU64::new(0),
            warm_done: AtomicU64::new(0),
            measuring,
            measured_start: std::sync::Mutex::default(),
            origin_before: Mutex::default(),
            first_time: std::sync::Mutex::default(),
        };
        (shared, measuring_rx)
    }

    /// Snapshots the origin's counters (with `origin_stats`), then starts the measuring clock.
    async fn begin_measuring(&self) {
        if let Some(url) = &self.options.origin_stats {
            *self.origin_before.lock().await = origin_stats(&self.client, url).await;
        }
        *self
            .measured_start
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Waits until request `i` is due: by `rate`, or by the trace's clock sped up `speed` times.
    async fn pace(&self, i: u64, r: &TraceRequest) {
        if let Some(rate) = self.options.rate {
            tokio::time::sleep_until(
                (self.start + Duration::from_secs_f64(i as f64 / rate)).into(),
            )
            .await;
        } else if let Some(speed) = self.options.speed {
            let t0 = *self
                .first_time
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(r.time);
            let at = r.time.saturating_sub(t0).div_f64(speed);
            tokio::time::sleep_until((self.start + at).into()).await;
        }
    }

    /// Requests and body bytes that reached the origin while measuring (with `origin_stats`,
    /// when both snapshots were read).
    async fn origin_delta(&self) -> (Option<u64>, Option<u64>) {
        let Some(url) = &self.options.origin_stats else {
            return (None, None);
        };
        let after = origin_stats(&self.client, url).await;
        let before = self.origin_before.lock().await.clone();
        match (before, after) {
            (Some(b), Some(a)) => (
                Some(a.requests.saturating_sub(b.requests)),
                Some(a.bytes.saturating_sub(b.bytes)),
            ),
            _ => (None, None),
        }
    }
}

/// One of `concurrency` workers: takes the next request, waits until it is due, sends it, and
/// tallies the answer once measuring has begun.
struct Worker {
    shared: Arc<Shared>,
    requests: Arc<Mutex<mpsc::Receiver<(u64, TraceRequest)>>>,
    measuring: watch::Receiver<bool>,
}

impl Worker {
    async fn run(mut self) -> Tally {
        let s = Arc::clone(&self.shared);
        let mut t = Tally::default();
        loop {
            if s.options.duration.is_some_and(|d| s.start.elapsed() >= d) {
                break;
            }
            let next = self.requests.lock().await.recv().await;
            let Some((i, r)) = next else { break };
            s.pace(i, &r).await;
            self.wait_for_warm_up(i).await;
            let measured = i >= s.options.warmup;
            let path = path_of(&r);
            let url = format!("{}{path}?size={}", s.target, r.size);
            let asked = Asked::of(&r);
            let sent = Instant::now();
            let outcome = fetch(&s.client, &url, &path, asked, s.options.timeout).await;
            let us = u64::try_from(sent.elapsed().as_micros())
                .unwrap_or(u64::MAX)
                .max(1);
            s.done.fetch_add(1, Relaxed);
            if !measured {
                s.warm_done.fetch_add(1, Relaxed);
                continue;
            }
            t.record(asked.len(), outcome, us);
        }
        t
    }

    /// Holds request `i` back until measuring begins. The first measured request begins it,
    /// once the warm-up is answered: it snapshots the origin's counters and the clock, then lets
    /// the measured requests go.
    async fn wait_for_warm_up(&mut self, i: u64) {
        let s = &self.shared;
        let warmup = s.options.warmup;
        if i == warmup && warmup > 0 {
            while s.warm_done.load(Relaxed) < warmup {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            s.begin_measuring().await;
            let _ = s.measuring.send(true);
        } else if i > warmup {
            let _ = self.measuring.wait_for(|m| *m).await;
        }
    }
}

/// Waits for the workers, telling `progress` every 100 ms how many requests were answered
/// (`done`).
async fn wait_reporting(
    workers: Vec<tokio::task::JoinHandle<Tally>>,
    done: &AtomicU64,
    total: Option<u64>,
    progress: &dyn Progress,
) -> Result<Vec<Tally>, ReplayError> {
    progress.begin("replaying", total);
    let mut reported = 0;
    let all = futures_join(workers);
    tokio::pin!(all);
    let tallies = loop {
        tokio::select! {
            t = &mut all => break t,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                let d = done.load(Relaxed);
                progress.advance(d - reported);
                reported = d;
            }
        }
    };
    progress.advance(done.load(Relaxed) - reported);
    progress.end();
    tallies
}

/// Every worker's tally, or the first worker's panic: a missing tally would make the figures
/// lie, so there are none then.
async fn futures_join(
    workers: Vec<tokio::task::JoinHandle<Tally>>,
) -> Result<Vec<Tally>, ReplayError> {
    let mut out = Vec::with_capacity(workers.len());
    for w in workers {
        match w.await {
            Ok(t) => out.push(t),
            Err(e) => {
                return Err(ReplayError::Panicked {
                    thread: "worker",
                    message: if e.is_panic() {
                        crate::sim::panic_message(e.into_panic())
                    } else {
                        e.to_string()
                    },
                })
            }
        }
    }
    Ok(out)
}

/// What a trace request asks of its object: the whole of it, or one byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    Whole(u64),
    /// First and last byte (inclusive), within the object.
    Range(u64, u64),
    /// A range that starts at this byte, past the object's end: a 416 is the right answer.
    Past(u64),
}

impl Asked {
    fn of(r: &TraceRequest) -> Asked {
        match r.range {
            None => Asked::Whole(r.size),
            Some((first, _)) if first >= r.size => Asked::Past(first),
            Some((first, last)) => Asked::Range(first, last.min(r.size - 1)),
        }
    }

    /// Bytes asked.
    fn len(self) -> u64 {
        match self {
            Asked::Whole(n) => n,
            Asked::Range(a, b) => b - a + 1,
            Asked::Past(_) => 0,
        }
    }
}

/// One request: `Ok((x-cache value, body verified))` or `Err(kind of failure)`.
async fn fetch(
    client: &Client<HttpConnector, Empty<Bytes>>,
    url: &str,
    path: &str,
    asked: Asked,
    timeout: Duration,
) -> Result<(String, bool), Failure> {
    let uri: Uri = url.parse().map_err(|_| Failure::Url)?;
    let mut request = http::Request::get(uri);
    let range = match asked {
        Asked::Whole(_) => None,
        Asked::Range(first, last) => Some(format!("bytes={first}-{last}")),
        Asked::Past(first) => Some(format!("bytes={first}-")),
    };
    if let Some(spec) = range {
        request = request.header(http::header::RANGE, spec);
    }
    let request = request.body(Empty::new()).map_err(|_| Failure::Url)?;
    let work = async {
        let resp = client.request(request).await.map_err(|e| {
            if e.is_connect() {
                Failure::Connect
            } else {
                Failure::Request
            }
        })?;
        let status = resp.status();
        let x_cache = resp
            .headers()
            .get("x-cache")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_ascii_uppercase();
        let x_cache = if x_cache == "NONE" {
            "none".to_string()
        } else {
            x_cache
        };
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|_| Failure::Body)?
            .to_bytes();
        let (want, offset) = match asked {
            Asked::Whole(n) => (StatusCode::OK, (n, 0)),
            Asked::Range(a, b) => (StatusCode::PARTIAL_CONTENT, (b - a + 1, a)),
            Asked::Past(_) => (StatusCode::RANGE_NOT_SATISFIABLE, (0, 0)),
        };
        if status != want {
            return Err(Failure::Status(status.as_u16()));
        }
        let (len, offset) = offset;
        let verified = want == StatusCode::RANGE_NOT_SATISFIABLE
            || (body.len() as u64 == len && verify(path, offset, &body));
        Ok((x_cache, verified))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Timeout),
    }
}

impl ReplayReport {
    /// A readable summary.
    pub fn to_text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let pct = |x: f64| format!("{:.2} %", x * 100.0);
        let _ = writeln!(
            s,
            "requests        {}",
            secondhit_proxy::units::count(self.requests)
        );
        let _ = writeln!(
            s,
            "hit ratio       {} ({} hits)",
            pct(self.hit_ratio),
            secondhit_proxy::units::count(self.hits)
        );
        let _ = writeln!(s, "byte hit ratio  {}", pct(self.byte_hit_ratio));
        if let (Some(o), Some(off)) = (self.origin_requests, self.origin_offload) {
            let _ = writeln!(
                s,
                "origin requests {} (offload {})",
                secondhit_proxy::units::count(o),
                pct(off)
            );
        }
        let outcomes: Vec<String> = self
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "X-Cache         {}", outcomes.join(", "));
        let _ = writeln!(
            s,
            "errors          {} {:?}",
            self.errors, self.errors_by_kind
        );
        let _ = writeln!(s, "corrupted       {}", self.corrupted);
        let _ = writeln!(
            s,
            "throughput      {:.0} requests/s over {:.2} s",
            self.requests_per_sec, self.duration_secs
        );
        let l = &self.latency_ms;
        let _ = writeln!(
            s,
            "latency (ms)    p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
            l.p50, l.p90, l.p99, l.p999, l.max
        );
        for (k, l) in &self.latency_by_outcome {
            let _ = writeln!(
                s,
                "  {k:<13} p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  ({} requests)",
                l.p50, l.p90, l.p99, l.p999, l.max, l.count
            );
        }
        s
    }
}
