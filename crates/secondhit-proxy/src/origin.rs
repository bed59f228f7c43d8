//! The origins: which configured group of servers serves a request ([`group`]: its servers'
//! health and the choice of one for each attempt), and pooled keep-alive connections to them
//! over HTTP or HTTPS ([`pool`], one per worker thread; hyper-util's pooled client only when
//! `tls.origin_http2` lets requests share a connection), with a lean HTTP/1.1 exchange for
//! requests without a body ([`h1`]). Only configured origins are ever contacted.

pub mod group;
pub mod h1;
pub mod health;
pub mod pool;

use crate::body::ProxyBody;
use crate::config::{Config, OriginRef, OriginUrl};
use crate::proxy::authority::Host;
use crate::tls::TlsError;
pub use group::{Failure, Group, GroupId, ServerHealth};
use http::{Request, Response, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
pub use pool::{BodyError, OriginBody, PoolError};
use std::collections::HashMap;
use std::sync::Arc;

/// hyper-util's pooled client, for origins that may speak HTTP/2 (`tls.origin_http2`).
pub type OriginClient = Client<HttpsConnector<HttpConnector>, ProxyBody>;

/// How origin requests travel: each worker's own HTTP/1.1 pool, or (with `tls.origin_http2`)
/// each worker's hyper-util client, which multiplexes HTTP/2.
enum Transport {
    Http1(Box<[pool::Pool]>),
    Negotiated(Box<[OriginClient]>),
}

/// Why an origin request got no response head.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// From a worker's HTTP/1.1 pool.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// From hyper-util's client.
    #[error(transparent)]
    Client(#[from] hyper_util::client::legacy::Error),
    /// The absolute URI hyper-util's client needs could not be made (never, from a
    /// configured origin and a checked path).
    #[error("origin URI: {0}")]
    Uri(#[from] http::Error),
    /// A request whose body went with an earlier attempt is not sent again (never: such a
    /// request is tried once).
    #[error("the request's body went with an earlier attempt")]
    Spent,
}

impl SendError {
    /// The kind of failure: TLS, connect, headers too large, or other.
    pub fn kind(&self) -> OriginError {
        let hyper_error = match self {
            SendError::Pool(PoolError::Connect(e)) => {
                let e: &(dyn std::error::Error + 'static) = e.as_ref();
                return if crate::tls::is_tls_error(e) {
                    OriginError::Tls
                } else {
                    OriginError::Connect
                };
            }
            SendError::Pool(PoolError::Http(e)) => {
                // A TLS failure after the handshake (an alert) reaches us as hyper's I/O error.
                if crate::tls::is_tls_error(e) {
                    return OriginError::Tls;
                }
                Some(e)
            }
            SendError::Pool(PoolError::Lean(e)) => {
                return match e {
                    h1::H1Error::TooLarge(_) | h1::H1Error::TooManyFields => {
                        OriginError::HeadersTooLarge
                    }
                    h1::H1Error::Io(io) if crate::tls::is_tls_error(io) => OriginError::Tls,
                    _ => OriginError::Other,
                };
            }
            SendError::Uri(_) | SendError::Spent => None,
            SendError::Client(e) => {
                if crate::tls::is_tls_error(e) {
                    return OriginError::Tls;
                }
                if e.is_connect() {
                    return OriginError::Connect;
                }
                let mut source = std::error::Error::source(e);
                let mut found = None;
                while let Some(s) = source {
                    if let Some(h) = s.downcast_ref::<hyper::Error>() {
                        found = Some(h);
                        break;
                    }
                    source = s.source();
                }
                found
            }
        };
        match hyper_error {
            Some(h) if h.is_parse_too_large() => OriginError::HeadersTooLarge,
            _ => OriginError::Other,
        }
    }
}

/// Kinds of origin failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginError {
    /// Could not connect (502).
    Connect,
    /// No response headers in time (504).
    Timeout,
    /// Any other failure before the headers (502).
    Other,
    /// The body broke off, stalled or had the wrong length (the client sees a cut response).
    Body,
    /// The response's header block was larger than `limits.max_origin_header_bytes` (502).
    HeadersTooLarge,
    /// An `https://` origin's certificate did not verify, or the handshake failed (502): never
    /// a silent downgrade.
    Tls,
    /// No server of the group was available (probes down, or ejected): 503 with `Retry-After`.
    Unavailable,
}

impl OriginError {
    /// Every kind, for metrics.
    pub const ALL: [OriginError; 7] = [
        OriginError::Connect,
        OriginError::Timeout,
        OriginError::Other,
        OriginError::Body,
        OriginError::HeadersTooLarge,
        OriginError::Tls,
        OriginError::Unavailable,
    ];
    /// Label for metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            OriginError::Connect => "connect",
            OriginError::Timeout => "timeout",
            OriginError::Other => "other",
            OriginError::Body => "body",
            OriginError::HeadersTooLarge => "headers-too-large",
            OriginError::Tls => "tls",
            OriginError::Unavailable => "unavailable",
        }
    }
}

/// The configured groups of origin servers, the routes to them, and a pooled client to every
/// server for each worker thread.
pub struct Origins {
    groups: Box<[Arc<Group>]>,
    default: Option<GroupId>,
    hosts: HashMap<String, GroupId>,
    transport: Transport,
    /// The active probes' client (the origins' TLS trust, HTTP/1.1, no pooling).
    probes: health::ProbeClient,
}

thread_local! {
    /// Which worker thread this is (see [`set_worker`]); 0 elsewhere.
    static WORKER: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks this thread as worker `index`: its origin requests go through that worker's pool, whose
/// connections' tasks run on this thread's event loop, so a request and its origin connection
/// never wake each other across threads.
pub fn set_worker(index: usize) {
    WORKER.with(|w| w.set(index));
}

impl Origins {
    /// Builds the routing table and the client from a validated configuration: connect timeout,
    /// idle pooled connections closed after `origin_idle`, and
    /// the client's read buffer capped at `limits.max_origin_header_bytes`, which bounds both an
    /// origin's header block and the size of each body chunk read from it. `https://` origins
    /// are verified against the webpki roots and `tls.origin_ca_file`, with SNI from the
    /// origin's host name, and offered HTTP/2 by ALPN when `tls.origin_http2`.
    ///
    /// `previous`: the origins a reload replaces; a server that stays keeps its health.
    pub fn new(config: &Config, previous: Option<&Origins>) -> Result<Origins, TlsError> {
        let configs = config.groups();
        let index: HashMap<&str, GroupId> = configs
            .keys()
            .enumerate()
            .map(|(i, name)| (name.as_str(), i))
            .collect();
        let groups: Box<[Arc<Group>]> = configs
            .iter()
            .map(|(name, g)| {
                let before = previous.and_then(|p| p.groups.iter().find(|o| o.name == *name));
                let fallback = g.fallback.as_deref().and_then(|f| index.get(f).copied());
                Arc::new(Group::new(name, g, before.map(|b| &**b), fallback))
            })
            .collect();
        let id_of = |r: &OriginRef| -> GroupId {
            let name = match r {
                OriginRef::Url(u) => u.to_string(),
                OriginRef::Group(g) => g.clone(),
            };
            // Validation made sure every name is there.
            index.get(name.as_str()).copied().unwrap_or(0)
        };
        // Keys are normalised hosts already (config::de::de_hosts).
        let hosts: HashMap<String, GroupId> = config
            .hosts
            .iter()
            .map(|(host, r)| (host.clone(), id_of(r)))
            .collect();
        let default = config.origin.as_ref().map(id_of);
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(config.timeouts.connect));
        http.set_nodelay(true);
        http.enforce_http(false);
        let tls = crate::tls::origin_client_config(config.tls.origin_ca_file.as_deref())?;
        let probes = health::client(
            hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls.clone())
                .https_or_http()
                .enable_http1()
                .wrap_connector(http.clone()),
        );
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1();
        let workers = 0..config.worker_threads();
        let transport = if config.tls.origin_http2 {
            let connector = builder.enable_http2().wrap_connector(http);
            Transport::Negotiated(
                workers
                    .map(|_| {
                        Client::builder(TokioExecutor::new())
                            .pool_idle_timeout(config.timeouts.origin_idle)
                            .pool_timer(TokioTimer::new())
                            .http1_max_buf_size(config.limits.max_origin_header_bytes)
                            .build(connector.clone())
                    })
                    .collect(),
            )
        } else {
            let connector = builder.wrap_connector(http);
            let mut h1 = hyper::client::conn::http1::Builder::new();
            h1.max_buf_size(config.limits.max_origin_header_bytes);
            let all = || groups.iter().flat_map(|g| g.servers.iter().map(|s| &s.url));
            Transport::Http1(
                workers
                    .map(|_| {
                        pool::Pool::new(
                            all(),
                            connector.clone(),
                            h1.clone(),
                            config.timeouts.origin_idle,
                            config.limits.max_origin_header_bytes,
                        )
                    })
                    .collect(),
            )
        };
        Ok(Origins {
            groups,
            default,
            hosts,
            transport,
            probes,
        })
    }

    /// Group `id`.
    pub fn group(&self, id: GroupId) -> &Group {
        &self.groups[id]
    }

    /// Every group, in name order (a plain URL's group is named by the URL).
    pub fn groups(&self) -> &[Arc<Group>] {
        &self.groups
    }

    /// Starts the active probes of every group that asks for them, on the current runtime.
    pub fn start_probes(&self) {
        for g in self.groups.iter() {
            health::start(g, &self.probes);
        }
    }

    /// What the admin listener's `/origins` answers: each group, its servers and their health
    /// at `now`, as JSON.
    pub fn view(&self, now: std::time::Duration) -> serde_json::Value {
        serde_json::json!({
            "groups": self.groups.iter().map(|g| g.view(now)).collect::<Vec<_>>(),
        })
    }

    /// Adds every server's families to `out` (`secondhit_origin_server_*{group, server}`).
    pub fn collect(&self, out: &mut crate::metrics::Families, now: std::time::Duration) {
        group::collect(&self.groups, out, now);
    }

    /// The origin for a request's host: a `[hosts]` entry matching `host:port` or `host`, else
    /// the default origin, unless the request came in absolute form (a proxy-style request for
    /// some other site), which only a `[hosts]` entry may serve.
    pub fn route(&self, host: &Host, absolute_form: bool) -> Option<GroupId> {
        if let Some(&g) = self
            .hosts
            .get(host.as_str())
            .or_else(|| self.hosts.get(host.name()))
        {
            return Some(g);
        }
        if absolute_form {
            return None;
        }
        self.default
    }

    /// This thread's worker's HTTP/1.1 connections (the first worker's off the worker threads),
    /// for a bodyless request written by the lean exchange itself
    /// ([`Pool::send_bodyless`](pool::Pool::send_bodyless)); `None` when origins are reached over
    /// HTTP/2 (`tls.origin_http2`), which takes whole requests ([`Origins::send`]).
    pub fn lean_pool(&self) -> Option<&pool::Pool> {
        match &self.transport {
            Transport::Http1(pools) => {
                let i = WORKER.with(|w| w.get());
                Some(&pools[i % pools.len()])
            }
            Transport::Negotiated(_) => None,
        }
    }

    /// Sends `request` (origin-form, with its `Host`) to `origin` through this thread's
    /// worker's connections (the first worker's off the worker threads) and returns the
    /// response head.
    pub async fn send(
        &self,
        origin: &OriginUrl,
        mut request: Request<ProxyBody>,
    ) -> Result<Response<OriginBody>, SendError> {
        let i = WORKER.with(|w| w.get());
        match &self.transport {
            Transport::Http1(pools) => Ok(pools[i % pools.len()].send(origin, request).await?),
            Transport::Negotiated(clients) => {
                // The client picks the connection from an absolute URI.
                let mut absolute = Uri::builder()
                    .scheme(origin.scheme())
                    .authority(origin.authority.clone());
                if let Some(pq) = request.uri().path_and_query() {
                    absolute = absolute.path_and_query(pq.clone());
                }
                *request.uri_mut() = absolute.build()?;
                let head_request = request.method() == http::Method::HEAD;
                let mut response = clients[i % clients.len()].request(request).await?;
                let close_delimited = h1::check_head(
                    response.status(),
                    response.version(),
                    response.headers_mut(),
                    head_request,
                )
                .map_err(PoolError::Lean)?;
                Ok(response.map(|body| OriginBody::unpooled(body, close_delimited)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(toml: &str) -> Origins {
        let c = Config::from_toml(toml).unwrap();
        Origins::new(&c, None).unwrap()
    }

    #[tokio::test]
    async fn routes_only_to_configured_origins() {
        let o = origins("origin = \"http://127.0.0.1:1000\"\n[hosts]\n\"img.example\" = \"http://127.0.0.1:2000\"");
        let r = |a: &str, abs: bool| {
            o.route(&Host::parse(a.as_bytes(), 80).unwrap(), abs)
                .map(|g| o.group(g).servers[0].url.authority.to_string())
        };
        assert_eq!(r("img.example", false).as_deref(), Some("127.0.0.1:2000"));
        assert_eq!(
            r("IMG.example:8080", false).as_deref(),
            Some("127.0.0.1:2000")
        );
        assert_eq!(r("other.example", false).as_deref(), Some("127.0.0.1:1000"));
        // Absolute-form requests for sites we do not serve go nowhere.
        assert_eq!(r("evil.example", true), None);
        assert_eq!(r("img.example", true).as_deref(), Some("127.0.0.1:2000"));
        let only_hosts = origins("[hosts]\n\"a.example\" = \"http://127.0.0.1:3000\"");
        let b = Host::parse(b"b.example", 80).unwrap();
        assert!(only_hosts.route(&b, false).is_none());
    }
}
