//! The request path, as phases. Each phase is a function of plain values (request parts,
//! header maps, the clock's `now`) that a unit test can call without sockets; [`Proxy::handle`]
//! calls them in order:
//!
//! ```text
//!  1 check     method, body on GET/HEAD, target length, Host, route ─ Refusal ──> ERROR (4xx)
//!              │ Target { host, origin, key }            (check.rs, authority.rs)
//!              hop-by-hop fields removed (the origin never gets them)
//!  2 plan      bypass / look up / look up only / refresh  (http_cache::request_plan)
//!              │ bypass ──────────────────── fetch, never store ───────────> BYPASS
//!  3 lookup    fresh ──── serve from memory (304 / 206 / HEAD) (hit.rs) ────> HIT
//!              │ stale ── serve it, refresh behind (RFC 5861) ─────────────> STALE
//!              │ stale ── confirm with the origin (revalidate.rs) ──> REVALIDATED / MISS
//!              │ miss ─── the flash tier, if any ──────────────────────────> HIT
//!  4 admit     the admission policy: Deferred, or the Leader / a Follower of
//!              one coalesced fetch per key (coalesce.rs)
//!              │ follower ── the leader's object, or its body as it arrives,
//!              │             if the same variant ─────────────────────────> HIT
//!  5 fetch     the origin's response head (fetch.rs)  ── error ──> ERROR (502 / 504 / 400)
//!  6 classify  outcome, Cache-Status, store or not: pure (classify.rs) ──> MISS / DEFERRED / BYPASS
//!  7 pump      stream to the client; store once complete (pump.rs)
//! ```
//!
//! Phases 1 to 3 in memory never wait. When they answer (a refusal, a HIT, a stale answer while
//! a refresh runs), [`Proxy::handle`] returns the response at once and builds no future for it.
//! Only a request that goes on to the origin or the flash tier (a bypass, a revalidation, a miss)
//! gets one, boxed ([`Handling`]).
//!
//! From phase 3 on, a request that found its object or asked the policy is one sighting for the
//! lab (shadow policies and the recording, `crate::lab`): made when the answer is known, or by
//! the pump when a body of unknown length ends; a look-up-only miss is none.
//!
//! `Outcome`, `Cache-Status` and refusals are values (outcome.rs); stored entries are
//! `cached::Entry`s of one weighed moka store. Building the proxy from a configuration and
//! reloading it (what a reload may change live, what waits for a restart) is build.rs.

pub mod authority;
mod build;
pub mod cached;
pub mod check;
pub mod classify;
pub mod coalesce;
pub mod fetch;
pub mod growing;
pub mod hit;
pub mod outcome;
mod pump;
mod revalidate;
pub mod slice;
mod upstream;

use crate::access_log::{self, AccessLog};
use crate::admission::{Admission, Decision};
use crate::body::{empty, ConnectionBudget, ProxyBody};
use crate::clock::Clock;
use crate::disk::DiskTier;
use crate::hash::KeyHash;
use crate::http_cache::{request_plan, variant_key, Credentials, NoStore, RequestPlan, StoreRules};
use crate::lab::{Lab, Sighting};
use crate::metrics::Metrics;
use crate::origin::Origins;
use crate::origin::{OriginBody, OriginError};
use crate::store::Maintained;
use arc_swap::ArcSwap;
use authority::AuthorityError;
pub use build::BuildError;
use build::LabBasis;
use cached::{CachedObject, Entry};
use check::{Rules, Target};
use classify::{classify, Classified, Intent, ResponseHead};
use coalesce::{Inflight, Joined, Leader, Role, Streaming};
use fetch::{content_length, response_head, upstream_request, FetchError, Upload};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response};
use hyper::body::{Body, Incoming};
use moka::sync::Cache;
use outcome::{CacheStatus, Fwd, Outcome, Refusal};
use pump::{StoreJob, Tiers};
pub use revalidate::PurgeTarget;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Semaphore;

tokio::task_local! {
    /// Microseconds to the origin's response head, for the access log: set only while a
    /// request is logged (a fetch elsewhere finds no slot and records nothing).
    static ORIGIN_MICROS: Arc<AtomicU64>;
}

/// What a lookup found.
#[derive(Debug)]
pub enum Found {
    /// A fresh object: serve it.
    Fresh(Arc<CachedObject>),
    /// An object past its freshness (revalidation and stale serving start here).
    Stale(Arc<CachedObject>),
    /// An object stored in slices: its head (fresh or not: the slices settle it).
    Sliced(Arc<cached::Sliced>),
    /// Nothing usable.
    Miss,
}

/// A lookup's result and the key it used (the variant key when the responses vary).
#[derive(Debug)]
pub struct Lookup {
    /// What was found.
    pub found: Found,
    /// The key: the primary key, or the variant key the request selects.
    pub key: String,
}

/// What an origin exchange was allowed and needs after the response head arrives.
struct Exchange {
    intent: Intent,
    /// The coalesced fetch this is, if any.
    leader: Option<Leader>,
    /// The request's headers as the origin received them (for a stored variant's key).
    request_headers: HeaderMap,
    /// The credentials the request sent to the origin carried: whether what comes back may be
    /// shared (RFC 9111 §3.5, the cookie rule).
    credentials: Credentials,
    /// The origin was asked with HEAD (no body will come).
    upstream_head: bool,
    /// The client asked with HEAD (it gets no body).
    client_head: bool,
    /// A lookup the client waits for: the lab sees it (not a bypass, not a background refresh).
    sight: bool,
    /// Where a stored object goes.
    tiers: Tiers,
    /// The client connection's budget for bytes it has not taken (none for a fetch nobody
    /// reads, such as a background refresh).
    budget: Option<ConnectionBudget>,
}

/// What a fetch that may be stored carries to the store.
#[derive(Default)]
struct Storing {
    /// The coalesced fetch this is, if any.
    leader: Option<Leader>,
    /// Where it goes.
    tiers: Tiers,
}

/// The origin's response head to a forwarded request, with what is kept of the request.
struct Sent {
    response: Response<OriginBody>,
    method: Method,
    /// The request's fields, when the response may be stored (they select its variant).
    request_headers: Option<HeaderMap>,
}

/// The fields every response carries, named once (a `&str` name is parsed on every insert).
const X_CACHE: HeaderName = HeaderName::from_static("x-cache");
const CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// Safe methods (RFC 9110 §9.2.1); every other method, known or not, can change the target.
fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// Phase 4's answer for a miss.
enum Admit {
    /// Fetch, do not store.
    Deferred,
    /// Fetch and store; others wait for this fetch.
    Lead(Leader),
    /// Wait for the fetch another request leads.
    Follow(coalesce::Follower),
}

/// The limits the request path applies to bodies.
#[derive(Clone, Copy, Debug)]
struct BodyLimits {
    max_object: u64,
    stream_buffer: u32,
    request_ahead: usize,
}

/// The timeouts the request path applies.
#[derive(Clone, Copy, Debug)]
struct PathTimeouts {
    first_byte: Duration,
    coalesce_wait: Duration,
    client_body: Duration,
}

/// Why a purge was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PurgeError {
    /// Not a URL.
    #[error("{0:?} is not a URL: give http://host/path")]
    NotUrl(String),
    /// A URL without a host.
    #[error("{0:?} has no host: give http://host/path")]
    NoHost(String),
    /// A host that is not one.
    #[error("{url:?}: {error}")]
    BadHost {
        /// The URL.
        url: String,
        /// What is wrong with its host.
        error: AuthorityError,
    },
}

/// The caching proxy: all state shared by every connection. What a reload may change sits in
/// [`Live`], swapped whole; each request reads it once and finishes on it.
pub struct Proxy {
    live: ArcSwap<Live>,
    store: ArcSwap<Store>,
    /// What the store was built with (capacity, eviction, lab mode, exact maintenance): a
    /// reload that changes it moves the contents into a new store.
    store_shape: std::sync::Mutex<(u64, crate::store::Eviction, bool, bool)>,
    /// The store weighs bodies only (`cache.lab_mode`): what the recording says it charged.
    lab_weights: std::sync::atomic::AtomicBool,
    admission: Box<dyn Admission>,
    clock: Arc<dyn Clock>,
    inflight: Arc<Inflight>,
    metrics: Metrics,
    /// Started with the first configuration that asks for it; retargeted on reload.
    access_log: OnceLock<AccessLog>,
    /// Shadows and recording (`[lab]`), as started: a reload does not change them.
    lab: Lab,
    lab_config: crate::config::LabConfig,
    /// The live settings the shadows copied at start.
    lab_basis: LabBasis,
    /// The flash tier, if `[cache.disk]` has a directory.
    disk: Option<Arc<DiskPart>>,
    /// The URLs (object ids of primary keys) that may have entries keyed on forwarded fields
    /// (`URL\nfield:value`): an admin purge of such a URL looks for them all, and an unsafe
    /// request marks them ([`Proxy::keyed_invalidated`]); any other URL is removed by its key
    /// alone, with no scan.
    keyed_urls: crate::bloom::Bloom,
    /// When an unsafe request last invalidated a URL's keyed entries (by the object id of its
    /// primary key): a keyed entry stored before then is a miss. The request path never scans
    /// the store for them. Bounded: a mark evicted lets entries stored before it be served
    /// again until they expire, the price of not scanning.
    keyed_invalidated: Cache<u64, Duration>,
}

/// The flash tier as the proxy uses it: the store, its own admission policy, and the time of
/// the last purge it cannot apply object by object.
pub struct DiskPart {
    /// The store.
    pub tier: Arc<DiskTier>,
    admission: Box<dyn Admission>,
    /// Disk objects stored before this (nanoseconds on the proxy's clock) are not served: a
    /// purge by prefix or tag, or of everything, cannot list what the disk holds.
    purged_before: std::sync::atomic::AtomicU64,
}

impl DiskPart {
    /// Marks every disk object stored before `now` unservable, in this run and the next.
    pub(crate) fn purge_all_before(&self, now: Duration) {
        let n = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
        let before = self
            .purged_before
            .fetch_max(n, std::sync::atomic::Ordering::Relaxed);
        if n > before {
            self.tier.save_purge_mark(&self.purged_before);
        }
    }

    /// Whether `obj`, read from disk under `key`, was purged since it was stored: by a purge
    /// of everything stored before a time, or of its URL (any variant of it).
    fn purged(&self, key: &str, obj: &CachedObject) -> bool {
        let before = self
            .purged_before
            .load(std::sync::atomic::Ordering::Relaxed);
        u64::try_from(obj.stored_at.as_nanos()).unwrap_or(u64::MAX) < before
            || self.tier.url_purged(key, obj.stored_at)
    }
}

/// The settings a reload swaps in: routes and origins, rules, limits, timeouts.
pub(crate) struct Live {
    origins: Origins,
    rules: StoreRules,
    forwarded: Vec<HeaderName>,
    /// The forwarded fields that are part of the key ([`crate::http_cache::keyed_fields`]).
    keyed: Vec<HeaderName>,
    check_rules: Rules,
    /// The same for requests that came over TLS (keys and Hosts in `https`).
    check_rules_tls: Rules,
    limits: BodyLimits,
    timeouts: PathTimeouts,
    /// Bytes of bodies being stored, all responses together (`limits.store_buffer_bytes`).
    store_budget: Arc<Semaphore>,
    bypass_cookies: bool,
    /// `cache.accept_encoding`: the codings `Accept-Encoding` is normalised to (empty: off).
    accept_encoding: Vec<String>,
    /// `cache.slice_size`: bytes of a slice (0: objects are not sliced).
    slice_size: u64,
    access_log: bool,
    /// How long stale objects are kept for revalidation and stale serving.
    stale_keep: Duration,
    /// `cache.sendfile`: large bodies kept in memory are sealed ([`crate::pages`]).
    sendfile: bool,
}

/// The proxy's store: cache keys (client-chosen URLs) hashed with foldhash, seeded at random per
/// store, as hashbrown's maps are: the random seed is what keeps client-chosen keys from being
/// aimed at one bucket, and foldhash keeps it at a fraction of SipHash's cost on a lookup every
/// HIT and every miss makes. No run-to-run reproducibility is lost, as the live store was
/// already seeded at random.
type Store = Maintained<String, Entry, foldhash::quality::RandomState>;

/// The access log line of a request, its response fields still to fill: clones of the
/// request's own values (reference counts, no text made here).
fn log_line(req: &Request<Incoming>, client: IpAddr) -> access_log::Line {
    let field = |name| req.headers().get(name).cloned();
    access_log::Line {
        time: SystemTime::now(),
        client,
        method: req.method().clone(),
        uri: req.uri().clone(),
        version: req.version(),
        host: field(header::HOST),
        status: 0,
        bytes: 0,
        cache: "",
        cache_status: None,
        origin_time: None,
        total_time: Duration::ZERO,
        referer: field(header::REFERER),
        user_agent: field(header::USER_AGENT),
    }
}

/// What the phases decided, before the cache's own fields go on ([`Proxy::finish`]).
struct Answer {
    response: Response<ProxyBody>,
    outcome: Outcome,
    status: CacheStatus,
    /// What the lab is told of this request ([`crate::lab`]).
    sight: Sight,
}

/// Where phases 1 to 3 left a request.
// Returned once and taken apart at once; boxing the larger variant would only add an
// allocation to every miss.
#[allow(clippy::large_enum_variant)]
enum Begun {
    /// Answered without waiting: a refusal, a HIT, a stale answer while a refresh runs.
    Answered(Answer),
    /// The origin or the flash tier is needed: a bypass, a revalidation, or a miss (phase 4 on).
    Continue(Continuation),
}

/// A request phases 1 to 3 could not answer, and what they found.
struct Continuation {
    parts: Parts,
    body: Incoming,
    target: Target,
    client: IpAddr,
    next: Next,
}

/// What phase 3 left to do.
enum Next {
    /// Phase 2 chose to bypass the cache: fetch, never store.
    Bypass(NoStore),
    /// A stored response that must be confirmed with the origin first.
    Revalidate {
        key: String,
        stored: Arc<CachedObject>,
    },
    /// No usable entry in memory: the flash tier, then admission.
    Miss { key: String, plan: RequestPlan },
    /// An object stored in slices: answered slice by slice.
    Sliced {
        key: String,
        head: Arc<cached::Sliced>,
    },
    /// No entry, and slicing is on: the slice holding byte `start` first (it says how long
    /// the object is), then the rest as a whole object or in slices.
    Probe { start: u64 },
}

/// What [`Proxy::handle`] keeps for the end of a request, however it is answered.
struct Finish {
    start: Instant,
    head_request: bool,
    /// Boxed: most requests are not logged, and this rides in every request's [`Handling`].
    logged: Option<(Box<access_log::Line>, Arc<AtomicU64>)>,
}

/// The response to one request, as [`Proxy::handle`] returns it: ready at once when phases 1
/// to 3 answered, else the boxed rest of the work. Its output is a `Result` only because that
/// is what a hyper service returns; it never fails.
#[must_use = "phases 1 to 3 have run and been counted; the response is in the Handling"]
pub struct Handling(HandlingState);

enum HandlingState {
    Ready(Response<ProxyBody>),
    Underway(Underway),
    /// The response was returned.
    Done,
}

/// Phases 4 on, under way; then [`Proxy::finish`] as for any other answer.
struct Underway {
    work: Pin<Box<dyn Future<Output = Answer> + Send>>,
    proxy: Arc<Proxy>,
    live: Arc<Live>,
    finish: Finish,
}

impl Future for Handling {
    type Output = Result<Response<ProxyBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let state = &mut self.get_mut().0;
        if let HandlingState::Underway(u) = state {
            let answer = ready!(u.work.as_mut().poll(cx));
            // Done, and the boxed work freed, before the fields go on.
            if let HandlingState::Underway(u) = std::mem::replace(state, HandlingState::Done) {
                return Poll::Ready(Ok(u.proxy.finish(answer, &u.live, u.finish)));
            }
        }
        match std::mem::replace(state, HandlingState::Done) {
            HandlingState::Ready(response) => Poll::Ready(Ok(response)),
            _ => panic!("a Handling polled after it returned its response"),
        }
    }
}

/// What the lab is told of a request that reached the cache logic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sight {
    /// Nothing is known of the object (the fetch failed, the request was refused): a sighting
    /// of size 0, not storable, when the policy was asked.
    Unknown,
    /// An object of this size, storable by the live cache or not, and what the recording keeps
    /// of it beside.
    Now {
        size: u64,
        storable: bool,
        kept: Kept,
    },
    /// The pump tells it when the body of unknown length ends.
    Later,
    /// Not a sighting: a look-up-only miss (the policy was not asked), a background refresh.
    Skip,
}

/// What the lab's recording keeps of an object beside its size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Kept {
    /// Bytes of its stored header fields ([`StoredHeaders::weight`](cached::StoredHeaders::weight)), for its weight.
    head: usize,
    /// How long it stays fresh from now, where it could be stored.
    fresh_for: Option<Duration>,
    /// The cache served it (a hit, fresh or collapsed).
    hit: bool,
}

impl Kept {
    /// A stored object's header bytes and what is left of its freshness at `now`; `hit`: the
    /// cache served it (else it was refreshed or served stale).
    fn of(
        headers: &cached::StoredHeaders,
        fresh_until: Duration,
        now: Duration,
        hit: bool,
    ) -> Kept {
        Kept {
            head: headers.weight(),
            fresh_for: Some(fresh_until.saturating_sub(now)),
            hit,
        }
    }
}

impl Proxy {
    /// What the recording keeps of the stored object `obj` (nothing is worked out, on the hit
    /// path, when the lab is off: only the recording reads it).
    fn kept(&self, obj: &CachedObject, hit: bool) -> Kept {
        if !self.lab.is_on() {
            return Kept::default();
        }
        Kept::of(&obj.headers, obj.fresh_until, self.clock.now(), hit)
    }
}

/// Whether and when a response is one sighting for the lab, and its size: the size announced
/// (a 304, or the answer to a HEAD, keeps the object's Content-Length), or counted by the pump at
/// the end of a body of unknown length. `sighted`: the request found its object or asked the
/// policy.
fn sight_of(
    sighted: bool,
    rparts: &http::response::Parts,
    upstream_head: bool,
    expected: Option<u64>,
    storable: bool,
    fresh: Option<&crate::http_cache::Freshness>,
    lab_on: bool,
) -> Sight {
    let announced = if rparts.status == http::StatusCode::NOT_MODIFIED || upstream_head {
        Some(content_length(&rparts.headers).unwrap_or(0))
    } else {
        expected
    };
    match (sighted, announced) {
        (false, _) => Sight::Skip,
        (true, Some(size)) => Sight::Now {
            size,
            storable,
            kept: Kept {
                // Only the recording reads it: no pass over the fields otherwise.
                head: if lab_on {
                    cached::StoredHeaders::weight_of(&rparts.headers)
                } else {
                    0
                },
                fresh_for: fresh.map(|f| {
                    if f.no_cache {
                        Duration::ZERO
                    } else {
                        f.lifetime.saturating_sub(f.initial_age)
                    }
                }),
                hit: false,
            },
        },
        (true, None) => Sight::Later,
    }
}

impl Proxy {
    /// The flash tier, if there is one.
    pub fn disk(&self) -> Option<&DiskPart> {
        self.disk.as_deref()
    }

    /// Reopens the access log file (log rotation: SIGUSR1), if there is one.
    pub fn reopen_access_log(&self) {
        if let Some(log) = self.access_log.get() {
            log.reopen();
        }
    }

    /// Waits (up to `timeout`) until the access log has written every line so far. True when
    /// done or when there is no access log.
    pub fn flush_access_log(&self, timeout: Duration) -> bool {
        self.access_log.get().is_none_or(|log| log.flush(timeout))
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The admission policy.
    pub fn admission(&self) -> &dyn Admission {
        &*self.admission
    }

    /// The proxy's clock reading.
    pub fn now(&self) -> Duration {
        self.clock.now()
    }

    /// The shadows and the recording.
    pub fn lab(&self) -> &Lab {
        &self.lab
    }

    /// Hands the lab one lookup of object `id`, `size` bytes (nothing when the lab is off).
    #[inline]
    fn sight(&self, id: u64, size: u64, storable: bool) {
        self.sight_kept(id, size, storable, 0, Kept::default());
    }

    /// As [`sight`](Proxy::sight), with what the recording keeps: the object's weight under a
    /// key of `key` bytes, its freshness, whether it was a hit.
    #[inline]
    fn sight_kept(&self, id: u64, size: u64, storable: bool, key: usize, kept: Kept) {
        if self.lab.is_on() {
            let weight = if key == 0 {
                0
            } else {
                cached::object_weight(
                    key,
                    kept.head,
                    size,
                    self.lab_weights.load(std::sync::atomic::Ordering::Relaxed),
                )
            };
            self.lab.sight(Sighting {
                id,
                size,
                time: self.clock.now(),
                storable,
                weight,
                fresh_for: kept.fresh_for,
                hit: kept.hit,
            });
        }
    }

    /// Prometheus text of the metrics, the cache, the admission policy, the live lab and the
    /// flash tier: one registry, one scrape.
    pub fn render_metrics(&self) -> String {
        let store = self.store.load();
        let cache = store.cache();
        cache.run_pending_tasks();
        let mut families = crate::metrics::Families::default();
        self.metrics.collect(
            &mut families,
            cache.entry_count(),
            cache.weighted_size(),
            &self.admission.stats(),
        );
        families.gauge(
            "coalescing_waiters",
            "Requests waiting now on another request's fetch of the same object",
            self.inflight.waiting(),
        );
        self.lab.collect(&mut families);
        self.live.load().origins.collect(&mut families, self.now());
        if let Some(d) = &self.disk {
            d.tier.collect(&mut families);
        }
        families.encode()
    }

    /// Removes the object cached for `url` (`http://host/path?query`), every variant of it.
    /// Returns whether anything was cached.
    pub fn purge(&self, url: &str) -> Result<bool, PurgeError> {
        self.purge_target(&PurgeTarget::Url(url.to_string()), false)
            .map(|n| n > 0)
    }

    /// Starts the active probes of the origin groups that ask for them, on the current runtime
    /// (`server::start` does; a reload starts the new groups' own).
    pub fn start_probes(&self) {
        self.live.load().origins.start_probes();
    }

    /// Every origin group, its servers and their health now (the admin listener's `/origins`).
    pub fn origins_view(&self) -> serde_json::Value {
        self.live.load().origins.view(self.now())
    }

    /// Removes everything.
    pub fn purge_all(&self) {
        if let Some(d) = &self.disk {
            d.purge_all_before(self.now());
        }
        self.store.load().cache().invalidate_all();
    }

    /// Serves one request from a client at `client`; `secure`: it came over TLS.
    ///
    /// Phases 1 to 3 run here and now. When they answer (a refusal, a HIT, a stale answer
    /// while a refresh runs), the [`Handling`] is ready and holds only the response. Only a
    /// request that needs the origin or the flash tier gets a future for the rest, boxed.
    ///
    /// One future for every request would be sized for the longest path, a HIT's too. hyper
    /// moves it into the connection's allocation, and every `.await` moves the inner futures,
    /// so a HIT would copy kilobytes it never uses; with many connections those copies land in
    /// memory that has left the CPU's cache.
    ///
    /// Phases 1 to 3 and [`Proxy::finish`] therefore run inside hyper's `Service::call`. Over
    /// HTTP/2 that is the connection's task, not the stream's, so they must not panic on any
    /// input: a panic there would end the whole connection.
    pub fn handle(
        self: &Arc<Self>,
        req: Request<Incoming>,
        client: IpAddr,
        secure: bool,
    ) -> Handling {
        let start = Instant::now();
        // The settings this request runs on, whatever a reload swaps in meanwhile. A guard, not
        // a clone: no shared count is touched unless the request goes on to the origin.
        let live = self.live.load();
        let finish = Finish {
            start,
            head_request: req.method() == Method::HEAD,
            // Only an access log needs these: no allocation on the request path otherwise.
            logged: live.access_log.then(|| {
                let origin = Arc::new(AtomicU64::new(u64::MAX));
                (Box::new(log_line(&req, client)), origin)
            }),
        };
        match self.begin(req, client, secure, &live) {
            Begun::Answered(answer) => {
                Handling(HandlingState::Ready(self.finish(answer, &live, finish)))
            }
            Begun::Continue(rest) => {
                let live = arc_swap::Guard::into_inner(live);
                // Boxed as it is: an async block around it would be one more layer to move.
                let work = Arc::clone(self).proceed(rest, Arc::clone(&live));
                let work: Pin<Box<dyn Future<Output = Answer> + Send>> = match &finish.logged {
                    Some((_, origin)) => Box::pin(ORIGIN_MICROS.scope(Arc::clone(origin), work)),
                    None => Box::pin(work),
                };
                Handling(HandlingState::Underway(Underway {
                    work,
                    proxy: Arc::clone(self),
                    live,
                    finish,
                }))
            }
        }
    }

    /// The cache's own fields on the answer, then the metrics and the access log line.
    fn finish(&self, answer: Answer, live: &Live, finish: Finish) -> Response<ProxyBody> {
        let Answer {
            mut response,
            outcome,
            status,
            sight: _,
        } = answer;
        let Finish {
            start,
            head_request,
            logged,
        } = finish;
        // A sliced answer says which of its slices were hits.
        let cache_status = match response.extensions_mut().remove::<slice::SliceDetail>() {
            Some(slices) => slices.header(&status),
            None => status.header(),
        };
        let h = response.headers_mut();
        h.insert(X_CACHE, HeaderValue::from_static(outcome.as_str()));
        let logged_status = logged.is_some().then(|| cache_status.clone());
        h.insert(CACHE_STATUS, cache_status);
        // RFC 9213: the fields targeted at this cache are its own, not the client's.
        for name in &live.rules.targeted {
            h.remove(name);
        }
        h.append(header::VIA, HeaderValue::from_static("1.1 secondhit"));
        // Body bytes sent, as known when the headers go out (a HEAD sends none).
        let bytes = if head_request {
            0
        } else {
            content_length(response.headers()).unwrap_or(0)
        };
        let elapsed = start.elapsed();
        self.metrics.response(outcome, bytes, elapsed);
        if let (Some((mut line, origin)), Some(log)) = (logged, self.access_log.get()) {
            line.status = response.status().as_u16();
            line.bytes = bytes;
            line.cache = outcome.as_str();
            line.cache_status = logged_status;
            line.origin_time = match origin.load(Ordering::Relaxed) {
                u64::MAX => None,
                us => Some(Duration::from_micros(us)),
            };
            line.total_time = elapsed;
            if !log.log(*line) {
                self.metrics.access_log_dropped();
            }
        }
        response
    }

    /// Phases 1 to 3, which never wait: an answer, or what the rest needs.
    fn begin(
        self: &Arc<Self>,
        req: Request<Incoming>,
        client: IpAddr,
        secure: bool,
        live: &Arc<Live>,
    ) -> Begun {
        let (mut parts, body) = req.into_parts();
        // 1. check
        let rules = if secure {
            &live.check_rules_tls
        } else {
            &live.check_rules
        };
        let mut target = match check::check(&parts, body.is_end_stream(), rules, &live.origins) {
            Ok(t) => t,
            Err(refusal) => return Begun::Answered(self.refuse(refusal)),
        };
        // Hop-by-hop fields never reach the origin: gone before the key and any Vary variant is
        // made from these headers.
        crate::http_cache::strip_hop_by_hop(&mut parts.headers);
        // One spelling per coding, before the key and any variant is made from it.
        if !live.accept_encoding.is_empty() {
            crate::http_cache::normalise_accept_encoding(&mut parts.headers, &live.accept_encoding);
        }
        self.key_forwarded_fields(&mut target, &parts, live);
        // 2. plan
        let plan = request_plan(&parts.method, &parts.headers, live.bypass_cookies);
        let next = match plan {
            RequestPlan::Bypass(reason) => Next::Bypass(reason),
            // 3. lookup
            _ => {
                let lookup = self.lookup(&target.key, &parts.headers);
                match lookup.found {
                    Found::Fresh(obj) if plan != RequestPlan::Refresh => {
                        let answer = self.hit(&obj, &parts, None);
                        self.sighted(&target, &answer);
                        return Begun::Answered(answer);
                    }
                    // Stale, or asked for with `no-cache`: confirm it with the origin first
                    // (RFC 9111 §4.3), or serve it at once and refresh it behind (RFC 5861 §3).
                    Found::Fresh(obj) | Found::Stale(obj) => {
                        if plan != RequestPlan::Refresh
                            && obj.may_serve_while_revalidating(self.clock.now())
                        {
                            self.refresh_in_background(
                                &parts.headers,
                                &target,
                                client,
                                &lookup.key,
                                &obj,
                                live,
                            );
                            let answer = self.stale(&obj, &parts, false);
                            self.sighted(&target, &answer);
                            return Begun::Answered(answer);
                        }
                        Next::Revalidate {
                            key: lookup.key,
                            stored: obj,
                        }
                    }
                    Found::Sliced(head) => Next::Sliced {
                        key: lookup.key,
                        head,
                    },
                    Found::Miss => match slice::probe_start(&parts, plan, live.slice_size) {
                        Some(start) => Next::Probe { start },
                        None => Next::Miss {
                            key: lookup.key,
                            plan,
                        },
                    },
                }
            }
        };
        Begun::Continue(Continuation {
            parts,
            body,
            target,
            client,
            next,
        })
    }

    /// Phases 4 on, for what phases 1 to 3 could not answer.
    async fn proceed(self: Arc<Self>, rest: Continuation, live: Arc<Live>) -> Answer {
        let live = &live;
        let Continuation {
            parts,
            body,
            target,
            client,
            next,
        } = rest;
        let answer = match next {
            Next::Bypass(reason) => {
                let intent = Intent::Bypass(reason);
                return self
                    .forward(
                        parts,
                        body,
                        &target,
                        client,
                        intent,
                        Storing::default(),
                        live,
                    )
                    .await;
            }
            Next::Revalidate { key, stored } => {
                self.revalidate(parts, &target, client, &key, stored, live)
                    .await
            }
            Next::Miss { key, plan } => {
                self.miss(parts, body, &target, client, &key, plan, live)
                    .await
            }
            Next::Sliced { key, head } => {
                self.serve_sliced(parts, &target, client, key, head, live)
                    .await
            }
            Next::Probe { start } => self.probe(parts, body, &target, client, start, live).await,
        };
        self.sighted(&target, &answer);
        answer
    }

    /// Tells the lab of an answer from phase 3 on.
    fn sighted(&self, target: &Target, answer: &Answer) {
        let id = target.id;
        match answer.sight {
            Sight::Now {
                size,
                storable,
                kept,
            } => self.sight_kept(id, size, storable, target.key.len(), kept),
            Sight::Unknown => self.sight(id, 0, false),
            Sight::Later | Sight::Skip => {}
        }
    }

    /// Nothing fresh in memory: the flash tier, then phase 4 on.
    #[allow(clippy::too_many_arguments)]
    async fn miss(
        self: &Arc<Self>,
        parts: Parts,
        body: Incoming,
        target: &Target,
        client: IpAddr,
        key: &str,
        plan: RequestPlan,
        live: &Arc<Live>,
    ) -> Answer {
        if plan != RequestPlan::Refresh {
            if let Some(answer) = self.disk_hit(target, key, &parts).await {
                return answer;
            }
        }
        if let RequestPlan::LookupOnly(reason) = plan {
            let intent = Intent::Bypass(reason);
            let mut answer = self
                .forward(
                    parts,
                    body,
                    target,
                    client,
                    intent,
                    Storing::default(),
                    live,
                )
                .await;
            answer.sight = Sight::Skip;
            return answer;
        }
        // 4. admit
        // What memory defers and flash admits goes to disk at once, as the simulator's two
        // tiers do (no memory eviction will hand it down); it is coalesced like the rest.
        let (admit, tiers) = self.admit(target, key);
        let (intent, storing) = match admit {
            Admit::Deferred => (Intent::Deferred, Storing::default()),
            Admit::Lead(leader) => (
                Intent::Admitted,
                Storing {
                    leader: Some(leader),
                    tiers,
                },
            ),
            Admit::Follow(follower) => {
                if let Some(answer) = self.follow(follower, &parts, live).await {
                    return answer;
                }
                // The leader failed, was too slow, or fetched another variant: fetch ourselves.
                let storing = Storing {
                    leader: None,
                    tiers,
                };
                (Intent::Admitted, storing)
            }
        };
        self.forward(parts, body, target, client, intent, storing, live)
            .await
    }

    /// Phase 4 for a follower: the leader's object, or its body as it arrives, when it is the
    /// same variant and may answer this request. `None`: fetch for ourselves.
    async fn follow(
        &self,
        follower: coalesce::Follower,
        parts: &Parts,
        live: &Live,
    ) -> Option<Answer> {
        // A plain GET or HEAD streams the leader's body as it arrives; one with
        // conditions is answered from the stored object.
        let wait = live.timeouts.coalesce_wait;
        let joined = if revalidate::is_plain(&parts.headers) {
            follower.join(wait, &parts.headers).await
        } else {
            follower
                .wait(wait, &parts.headers)
                .await
                .map(Joined::Stored)
        };
        // As at lookup: an object not marked for credentials never answers a request
        // that carries them.
        let authorized = parts.headers.contains_key(header::AUTHORIZATION);
        match joined {
            Some(Joined::Stored(f)) if f.object.auth_ok || !authorized => {
                self.metrics.coalesced();
                Some(self.hit(&f.object, parts, Some("collapsed")))
            }
            Some(Joined::Streaming(s)) if s.head.auth_ok || !authorized => {
                self.metrics.coalesced();
                Some(self.stream_follower(&s, parts))
            }
            _ => None,
        }
    }

    /// A GET or HEAD that carries a forwarded field the key includes is its own entry: the
    /// origin may shape its response by that field (CloudFront's cache-key model).
    fn key_forwarded_fields(&self, target: &mut Target, parts: &Parts, live: &Live) {
        if live.keyed.is_empty() || !(parts.method == Method::GET || parts.method == Method::HEAD) {
            return;
        }
        if let Some(key) = crate::http_cache::keyed_key(&target.key, &live.keyed, &parts.headers) {
            // Read first: the filter's words are shared by every worker, written only once.
            let url = KeyHash::of_u64(target.id);
            if !self.keyed_urls.contains(url) {
                self.keyed_urls.insert(url);
            }
            target.id = crate::hash::object_id(key.as_bytes());
            target.key = key;
        }
    }

    /// Whether `obj`, stored under the keyed key `primary` (`URL\nfield:value...`), was stored
    /// before an unsafe request invalidated its URL.
    fn invalidated_keyed(&self, primary: &str, obj: &CachedObject) -> bool {
        primary.split_once('\n').is_some_and(|(url, _)| {
            self.keyed_invalidated
                .get(&crate::hash::object_id(url.as_bytes()))
                .is_some_and(|at| obj.stored_at < at)
        })
    }

    /// Whether entries keyed on forwarded fields may exist under the primary key `primary`.
    fn may_have_keyed_entries(&self, primary: &str) -> bool {
        self.keyed_urls
            .contains(KeyHash::of_u64(crate::hash::object_id(primary.as_bytes())))
    }

    fn refuse(&self, refusal: Refusal) -> Answer {
        self.metrics.refused();
        Answer {
            response: refusal.response(),
            outcome: Outcome::Error,
            status: refusal.cache_status(),
            sight: Sight::Unknown,
        }
    }

    /// Phase 3: the stored entry for `primary`, or for the variant `headers` select.
    fn lookup(&self, primary: &str, headers: &HeaderMap) -> Lookup {
        let (entry, key) = match self.store.load().get(primary) {
            Some(Entry::Variants(fields)) => {
                let key = variant_key(primary, &fields, headers);
                (self.store.load().get(&key), key)
            }
            entry => (entry, primary.to_string()),
        };
        let found = match entry {
            Some(Entry::Object(obj)) if self.invalidated_keyed(primary, &obj) => {
                self.store.load().cache().invalidate(&key);
                Found::Miss
            }
            Some(Entry::Object(obj)) => {
                if headers.contains_key(header::AUTHORIZATION) && !obj.auth_ok {
                    Found::Miss
                } else if obj.is_fresh(self.clock.now()) {
                    Found::Fresh(obj)
                } else {
                    Found::Stale(obj)
                }
            }
            Some(Entry::Sliced(head)) if self.invalidated_keyed(primary, &head.head) => {
                self.remove_sliced(primary, &head);
                Found::Miss
            }
            Some(Entry::Sliced(head)) => {
                if headers.contains_key(header::AUTHORIZATION) && !head.head.auth_ok {
                    Found::Miss
                } else {
                    Found::Sliced(head)
                }
            }
            Some(Entry::Variants(_)) | None => Found::Miss,
        };
        Lookup { found, key }
    }

    /// A follower's answer from the leader's body while it arrives: the stored response's head,
    /// and the body from its first byte, at this client's pace.
    fn stream_follower(&self, s: &Streaming, parts: &Parts) -> Answer {
        let now = self.clock.now();
        let mut status = CacheStatus::hit(s.head.ttl(now));
        status.detail = Some("collapsed");
        let mut headers = s.head.headers.to_map();
        headers.insert(header::AGE, HeaderValue::from(s.head.age(now).as_secs()));
        let body = if parts.method == Method::HEAD {
            empty()
        } else {
            http_body_util::BodyExt::boxed(s.body.reader())
        };
        let mut response = Response::new(body);
        *response.status_mut() = s.head.status;
        *response.headers_mut() = headers;
        Answer {
            response,
            outcome: Outcome::Hit,
            status,
            sight: Sight::Now {
                size: s.body.expected(),
                storable: true,
                kept: if self.lab.is_on() {
                    Kept::of(&s.head.headers, s.head.fresh_until, now, true)
                } else {
                    Kept::default()
                },
            },
        }
    }

    fn hit(&self, obj: &CachedObject, parts: &Parts, detail: Option<&'static str>) -> Answer {
        let (response, mut status) =
            hit::serve(obj, &parts.method, &parts.headers, self.clock.now());
        status.detail = detail;
        Answer {
            response,
            outcome: Outcome::Hit,
            status,
            sight: Sight::Now {
                size: obj.body.len() as u64,
                storable: true,
                kept: self.kept(obj, true),
            },
        }
    }

    /// Phase 4: the admission policy, and beside it the flash tier's (asked on every miss in
    /// both tiers, as the simulator's two tiers do), then one coalesced fetch per key if either
    /// admits; the second value says where the object goes.
    fn admit(&self, target: &Target, key: &str) -> (Admit, Tiers) {
        let now = self.clock.now();
        let hash = KeyHash::of_u64(target.id);
        let memory = self.admission.on_miss(hash, now) != Decision::Defer;
        let disk = self
            .disk
            .as_ref()
            .is_some_and(|d| d.admission.on_miss(hash, now) != Decision::Defer);
        let tiers = match (memory, disk) {
            (true, disk) => Tiers::memory(disk),
            (false, true) => Tiers::DiskOnly,
            (false, false) => return (Admit::Deferred, Tiers::Memory),
        };
        let admit = match self.inflight.join(key) {
            Role::Leader(l) => Admit::Lead(l),
            Role::Follower(f) => Admit::Follow(f),
        };
        (admit, tiers)
    }

    /// Phase 3b: a memory miss looked up on disk. A fresh object there is served (`detail=disk`)
    /// and promoted to memory if the memory policy admits it (never written to disk again).
    ///
    /// A promoted body stays on the heap, unsealed ([`crate::pages`]): sealing costs several
    /// heap copies, and a promotion is paid on every flash hit of an object memory cannot keep.
    /// Sealing promotions made 1 MiB flash hits above 1 MiB of memory cost 710 us of CPU a
    /// request instead of 245 (`FLASH=1 cargo xtask bench flash-hits`).
    async fn disk_hit(&self, target: &Target, key: &str, parts: &Parts) -> Option<Answer> {
        let d = self.disk.as_ref()?;
        let obj = d.tier.get(key).await?;
        let now = self.clock.now();
        if d.purged(key, &obj) {
            d.tier.remove(key);
            return None;
        }
        if !obj.is_fresh(now) || (parts.headers.contains_key(header::AUTHORIZATION) && !obj.auth_ok)
        {
            return None;
        }
        if self.admission.on_miss(KeyHash::of_u64(target.id), now) != Decision::Defer {
            self.store
                .load()
                .insert(key.to_owned(), Entry::Object(Arc::clone(&obj)));
        }
        Some(self.hit(&obj, parts, Some("disk")))
    }

    /// Phases 5 to 7: fetch, classify, pump.
    // The request, where it goes, what it may do and the settings it runs on: each is needed,
    // and bundling them would only rename them.
    #[allow(clippy::too_many_arguments)]
    async fn forward(
        self: &Arc<Self>,
        parts: Parts,
        body: Incoming,
        target: &Target,
        client: IpAddr,
        intent: Intent,
        storing: Storing,
        live: &Arc<Live>,
    ) -> Answer {
        let Storing { leader, tiers } = storing;
        let mut parts = parts;
        if intent == Intent::Admitted {
            // The object will be stored: fetch it whole, whatever the client's own conditions
            // (a 304 to them could not be stored); the client then gets the full response.
            revalidate::strip_client_conditionals(&mut parts.headers);
        }
        let head_request = parts.method == Method::HEAD;
        let forwarding = check::Forwarding::new(&parts.method, &live.forwarded);
        let credentials = Credentials::of(&parts.headers).forwarded(|n| forwarding.keeps(n));
        let budget = parts.extensions.get::<ConnectionBudget>().cloned();
        // 5. fetch
        let lean = match live.origins.lean_pool() {
            // GET and HEAD come without a body (`check` refuses one): the lean exchange writes
            // their head straight from the client's (every cache miss takes this way).
            Some(pool) if body.is_end_stream() && (head_request || parts.method == Method::GET) => {
                Some(pool)
            }
            _ => None,
        };
        let sent = if let Some(pool) = lean {
            self.send_lean(pool, parts, target, client, intent, live)
                .await
        } else {
            let upload = if body.is_end_stream() {
                Upload::none()
            } else {
                match self.read_upload(body, live).await {
                    Ok(u) => u,
                    Err(refused) => return refused,
                }
            };
            self.send_upload(parts, upload, target, client, intent, live)
                .await
        };
        let Sent {
            response,
            method,
            request_headers,
        } = match sent {
            Ok(sent) => sent,
            Err(failed) => return failed,
        };
        if !is_safe(&method)
            && (response.status().is_success() || response.status().is_redirection())
        {
            self.invalidate_after_unsafe(target, response.headers());
        }
        let exchange = Exchange {
            intent,
            leader,
            request_headers: request_headers.unwrap_or_default(),
            credentials,
            upstream_head: head_request,
            client_head: head_request,
            sight: !matches!(intent, Intent::Bypass(_)),
            tiers,
            budget,
        };
        self.respond(response, target, exchange, live).await
    }

    /// Phase 5 for a GET or HEAD without a body, by the lean exchange: its head written
    /// straight from the client's.
    async fn send_lean(
        &self,
        pool: &crate::origin::pool::Pool,
        parts: Parts,
        target: &Target,
        client: IpAddr,
        intent: Intent,
        live: &Live,
    ) -> Result<Sent, Answer> {
        let head = fetch::OriginHead {
            method: &parts.method,
            headers: &parts.headers,
            target,
            client,
            forwarded: &live.forwarded,
        };
        let head = &head;
        let response = self
            .upstream(
                target.id,
                target.origin,
                true,
                None,
                live,
                |server| async move {
                    pool.send_bodyless(server, head)
                        .await
                        .map_err(crate::origin::SendError::from)
                },
            )
            .await
            .map_err(|e| self.fetch_failed(e))?;
        // The selecting headers of a stored variant are the ones the origin received.
        let kept = (intent == Intent::Admitted).then_some(parts.headers);
        Ok(Sent {
            response,
            method: parts.method,
            request_headers: kept,
        })
    }

    /// The client's request body, read ahead up to `limits.request_body_buffer_bytes` before
    /// the request goes to the origin; a refusal if it breaks off or is too slow.
    async fn read_upload(&self, body: Incoming, live: &Live) -> Result<Upload, Answer> {
        match Upload::read_ahead(body, live.limits.request_ahead, live.timeouts.client_body).await {
            Ok(u) => Ok(u),
            Err(FetchError::ClientBodyTimeout) => Err(self.refuse(Refusal::RequestBodyTimeout)),
            Err(_) => Err(self.refuse(Refusal::BadRequestBody)),
        }
    }

    /// Phase 5 for any other request, through the origin's client, with its body.
    async fn send_upload(
        &self,
        parts: Parts,
        upload: Upload,
        target: &Target,
        client: IpAddr,
        intent: Intent,
        live: &Live,
    ) -> Result<Sent, Answer> {
        let upload_failed = upload.failed();
        let method = parts.method.clone();
        let kept = (intent == Intent::Admitted).then(|| parts.headers.clone());
        let request = upstream_request(
            parts.method,
            parts.headers,
            target,
            client,
            upload.into_body(),
            &live.forwarded,
        )
        .map_err(|_| self.refuse(Refusal::BadTarget))?;
        // Sent once: its body goes with the first attempt.
        let mut request = Some(request);
        let origins = &live.origins;
        let response = self
            .upstream(
                target.id,
                target.origin,
                false,
                Some(&upload_failed),
                live,
                |server| {
                    let r = request.take();
                    async move {
                        match r {
                            Some(r) => origins.send(server, r).await,
                            None => Err(crate::origin::SendError::Spent),
                        }
                    }
                },
            )
            .await
            .map_err(|e| self.fetch_failed(e))?;
        Ok(Sent {
            response,
            method,
            request_headers: kept,
        })
    }

    /// Phases 6 and 7 for an origin response: classify it, then stream it to the client and,
    /// when allowed, store it.
    async fn respond(
        self: &Arc<Self>,
        response: Response<OriginBody>,
        target: &Target,
        x: Exchange,
        live: &Arc<Live>,
    ) -> Answer {
        let (mut rparts, rbody) = response.into_parts();
        let expected = response_head(rparts.status, &mut rparts.headers, x.upstream_head);

        // 6. classify
        let head = ResponseHead {
            status: rparts.status,
            headers: &rparts.headers,
            length: expected,
            close_delimited: rbody.close_delimited(),
        };
        let mut c = classify(
            x.intent,
            head,
            x.credentials,
            &live.rules,
            live.limits.max_object,
            SystemTime::now(),
        );
        if c.store.is_some() && x.tiers == Tiers::DiskOnly {
            self.settle_disk_only(&mut c, expected, x.upstream_head);
        }
        // Without a store job the leader is dropped here, and its followers fetch for themselves.
        let job = c.store.map(|freshness| StoreJob {
            primary: target.key.clone(),
            request_headers: x.request_headers,
            status: rparts.status,
            headers: rparts.headers.clone(),
            freshness,
            leader: x.leader,
            tiers: x.tiers,
        });

        // What the lab is told: the size announced (a 304 keeps the object's Content-Length),
        // or counted by the pump at the end of a body of unknown length.
        let storable = matches!(c.outcome, Outcome::Miss | Outcome::Deferred);
        let sight = sight_of(
            x.sight,
            &rparts,
            x.upstream_head,
            expected,
            storable,
            c.fresh.as_ref(),
            self.lab.is_on(),
        );
        let sight_later = (sight == Sight::Later).then_some((target.id, storable));

        // 7. pump (or, for a small body, read it whole here)
        let body = match expected {
            Some(n) if n <= pump::READ_AHEAD && !x.upstream_head => {
                match self.read_ahead(rbody, n, job, live).await {
                    Some(body) => body,
                    None => return self.fetch_failed(FetchError::Origin(OriginError::Body)),
                }
            }
            _ => self.pump(rbody, expected, job, sight_later, x.budget.as_ref(), live),
        };
        let mut response = Response::from_parts(rparts, body);
        if x.client_head {
            *response.body_mut() = empty();
        }
        Answer {
            response,
            outcome: c.outcome,
            status: c.status,
            sight,
        }
    }

    /// For an object bound for the flash tier only: whether the disk takes it (its size, the
    /// write budget) is settled now, so that the client is told the truth; if not, the response
    /// is deferred, as the memory policy said.
    fn settle_disk_only(&self, c: &mut Classified, expected: Option<u64>, upstream_head: bool) {
        let taken = match (expected, self.disk()) {
            (Some(n), Some(d)) if !upstream_head => {
                d.tier.reserve(n, self.clock.now()) == crate::disk::Written::Queued
            }
            _ => false,
        };
        if taken {
            c.status.detail = Some("disk");
        } else {
            *c = Classified {
                outcome: Outcome::Deferred,
                status: CacheStatus::forwarded(Fwd::UriMiss, Some("deferred")),
                store: None,
                fresh: c.fresh,
            };
        }
    }

    /// Phase 5: waits (up to `first_byte`) for the response head of a request `sent` to the
    /// origin. `upload_failed` is set if the client's request body broke off on the way.
    async fn fetch(
        &self,
        sent: impl Future<Output = Result<Response<OriginBody>, crate::origin::SendError>>,
        server: &crate::config::OriginUrl,
        upload_failed: Option<&std::sync::atomic::AtomicBool>,
        live: &Live,
    ) -> Result<Response<OriginBody>, FetchError> {
        self.metrics.origin_request();
        let asked = Instant::now();
        let sent = tokio::time::timeout(live.timeouts.first_byte, sent).await;
        let failure = match sent {
            Ok(Ok(response)) => {
                let micros = u64::try_from(asked.elapsed().as_micros()).unwrap_or(u64::MAX - 1);
                let _ = ORIGIN_MICROS.try_with(|slot| slot.store(micros, Ordering::Relaxed));
                return Ok(response);
            }
            Ok(Err(e)) => {
                tracing::warn!(origin = %server, error = %e, "origin request failed");
                FetchError::Origin(e.kind())
            }
            Err(_) => {
                tracing::warn!(origin = %server, timeout = ?live.timeouts.first_byte, "origin timed out");
                FetchError::Origin(OriginError::Timeout)
            }
        };
        // A request body that broke off is the client's failure, whatever the client library
        // made of it.
        Err(
            if upload_failed.is_some_and(|f| f.load(Ordering::Relaxed)) {
                FetchError::ClientBody
            } else {
                failure
            },
        )
    }

    fn count_fetch_failure(&self, e: FetchError) {
        match e {
            FetchError::Origin(kind) => self.metrics.origin_error(kind),
            FetchError::ClientBody | FetchError::ClientBodyTimeout => self.metrics.refused(),
        }
    }

    fn fetch_failed(&self, e: FetchError) -> Answer {
        self.count_fetch_failure(e);
        let (response, status) = e.response();
        Answer {
            response,
            outcome: Outcome::Error,
            status,
            sight: Sight::Unknown,
        }
    }
}
