//! [`SecondHitProxy`]: a Pingora caching proxy for one origin whose cache admits an object only
//! on its second miss.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use pingora_cache::cache_control::CacheControl;
use pingora_cache::filters::{request_cacheable, resp_cacheable};
use pingora_cache::storage::Storage;
use pingora_cache::{
    CacheKey, CacheMetaDefaults, CachePhase, MemCache, NoCacheReason, RespCacheable,
};
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::Result;
use pingora_http::ResponseHeader;
use pingora_proxy::{ProxyHttp, Session};
use secondhit_admission::admission::{Admission, Decision};
use secondhit_admission::clock::{Clock, SystemClock};

use crate::key::{cache_key, key_hash};
use crate::status::{CacheStatus, CACHE_STATUS_HEADER};

/// No heuristic freshness: a response is stored only when its origin says for how long
/// (`s-maxage`, `max-age` or `Expires`), as in the `secondhit` server's default
/// (`default_ttl = none`). No stale-while-revalidate or stale-if-error either.
const EXPLICIT_FRESHNESS_ONLY: CacheMetaDefaults = CacheMetaDefaults::new(|_status| None, 0, 0);

/// A Pingora [`ProxyHttp`] that forwards every request to one plain-HTTP origin and caches GET
/// and HEAD responses, storing an object only when a `secondhit-admission` policy admits it.
///
/// Per request:
///
/// 1. `request_cache_filter` enables Pingora's cache for GET and HEAD; `cache_key_callback` keys
///    it by host and path with query ([`cache_key`]).
/// 2. A hit is served from storage and never reaches the policy.
/// 3. On a miss the request goes to the origin. `response_cache_filter` first applies the
///    origin's own rules (`Cache-Control`, `Expires`, `Authorization`; responses with `Vary` are
///    not stored, since no variance key is built). Only a response that is cacheable by those
///    rules, on a plain miss (not a revalidation or a refetch of an expired object), is put to
///    the policy with [`key_hash`] and the proxy clock's `now`. `Defer` becomes
///    `Uncacheable(NoCacheReason::Deferred)`: the body streams to the client and nothing is
///    written to storage.
/// 4. `response_filter` adds [`CACHE_STATUS_HEADER`] with the [`CacheStatus`].
///
/// Pingora wants storage that lives for `'static`: [`SecondHitProxy::new`] leaks one
/// [`MemCache`] (Pingora's in-memory test store, unbounded and without eviction) per proxy, so
/// build one proxy per process, or pass long-lived storage of your own to
/// [`SecondHitProxy::with_storage`].
///
/// # Example
///
/// ```no_run
/// use std::sync::Arc;
/// use pingora_core::server::Server;
/// use secondhit_admission::admission::{Policy, Settings};
/// use secondhit_pingora::SecondHitProxy;
///
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let policy = Settings::default().build(Policy::SecondHit)?;
///     let proxy = SecondHitProxy::new("127.0.0.1:8080".parse()?, Arc::from(policy));
///
///     let mut server = Server::new(None)?;
///     server.bootstrap();
///     let mut service = pingora_proxy::http_proxy_service(&server.configuration, proxy);
///     service.add_tcp("127.0.0.1:6188");
///     server.add_service(service);
///     server.run_forever()
/// }
/// ```
pub struct SecondHitProxy {
    origin: SocketAddr,
    policy: Arc<dyn Admission>,
    clock: Arc<dyn Clock>,
    storage: &'static (dyn Storage + Sync),
}

impl SecondHitProxy {
    /// A proxy for `origin` (plain HTTP) that asks `policy` on each cacheable miss, with its own
    /// in-memory cache (leaked, see the type's documentation) and the system's monotonic clock.
    ///
    /// Keep a clone of `policy` to read its [`stats`](Admission::stats) while the proxy runs.
    pub fn new(origin: SocketAddr, policy: Arc<dyn Admission>) -> Self {
        let storage: &'static MemCache = Box::leak(Box::new(MemCache::new()));
        Self::with_storage(origin, policy, storage)
    }

    /// Like [`SecondHitProxy::new`], with storage supplied by the caller (any Pingora
    /// [`Storage`]; several proxies may share one).
    pub fn with_storage(
        origin: SocketAddr,
        policy: Arc<dyn Admission>,
        storage: &'static (dyn Storage + Sync),
    ) -> Self {
        SecondHitProxy {
            origin,
            policy,
            clock: Arc::new(SystemClock::new()),
            storage,
        }
    }

    /// Replaces the clock whose `now` is passed to the policy (the admission window runs on
    /// it; object freshness stays on Pingora's wall clock). Tests can pass a
    /// [`ManualClock`](secondhit_admission::clock::ManualClock).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The origin every request is forwarded to.
    pub fn origin(&self) -> SocketAddr {
        self.origin
    }

    /// The admission policy.
    pub fn policy(&self) -> &dyn Admission {
        self.policy.as_ref()
    }

    /// The admission decision for a response that Pingora would otherwise store, or `None`
    /// when the policy is not asked (see the type's documentation). Records the decision in
    /// `ctx`.
    fn admit(
        &self,
        phase: CachePhase,
        key: Option<&CacheKey>,
        ctx: &mut RequestCtx,
    ) -> Option<Decision> {
        if phase != CachePhase::Miss {
            return None;
        }
        let decision = self.policy.on_miss(key_hash(key?), self.clock.now());
        ctx.decision = Some(decision);
        Some(decision)
    }
}

impl fmt::Debug for SecondHitProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecondHitProxy")
            .field("origin", &self.origin)
            .field("policy", &self.policy.name())
            .finish_non_exhaustive()
    }
}

/// What [`SecondHitProxy`] remembers during one request (Pingora's per-request `CTX`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestCtx {
    decision: Option<Decision>,
}

impl RequestCtx {
    /// The admission policy's decision for this request, if it was asked (a cacheable miss).
    pub fn decision(&self) -> Option<Decision> {
        self.decision
    }
}

#[async_trait]
impl ProxyHttp for SecondHitProxy {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::default()
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.origin, false, String::new())))
    }

    fn request_cache_filter(&self, session: &mut Session, _ctx: &mut RequestCtx) -> Result<()> {
        if request_cacheable(session.req_header()) {
            // No eviction manager, predictor or cache lock: the storage keeps what it is given,
            // and concurrent misses of one key each go to the origin.
            session.cache.enable(self.storage, None, None, None, None);
        }
        Ok(())
    }

    fn cache_key_callback(&self, session: &Session, _ctx: &mut RequestCtx) -> Result<CacheKey> {
        Ok(cache_key(session.req_header()))
    }

    fn response_cache_filter(
        &self,
        session: &Session,
        resp: &ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<RespCacheable> {
        if resp.headers.contains_key("vary") {
            return Ok(RespCacheable::Uncacheable(NoCacheReason::Custom("vary")));
        }
        let cache_control = CacheControl::from_resp_headers(resp);
        let authorization = session.req_header().headers.contains_key("authorization");
        let verdict = resp_cacheable(
            cache_control.as_ref(),
            resp.clone(),
            authorization,
            &EXPLICIT_FRESHNESS_ONLY,
        );
        if !verdict.is_cacheable() {
            return Ok(verdict);
        }
        Ok(
            match self.admit(session.cache.phase(), session.cache.maybe_cache_key(), ctx) {
                Some(Decision::Defer) => RespCacheable::Uncacheable(NoCacheReason::Deferred),
                Some(Decision::Admit) | None => verdict,
            },
        )
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let status = CacheStatus::of(session.cache.phase(), ctx.decision);
        resp.insert_header(CACHE_STATUS_HEADER, status.as_str())
    }
}
