//! The sections of [`Config`](super::Config): one struct per TOML table, each with its defaults.

use super::de::*;
use crate::admission::{Policy, Settings};
use crate::bloom::Layout;
use crate::http_cache::{
    StoreRules, DEFAULT_FORWARDED_REQUEST_HEADERS, DEFAULT_FORWARDED_UNKEYED_HEADERS,
};
use crate::lab::ShadowSpec;
use crate::store::Eviction;
use http::HeaderName;
use serde::Deserialize;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// `[lab]`: what `serve` learns about its own traffic, off the request path (bounded queues
/// that drop and count, never block a request).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LabConfig {
    /// Shadow policies, each fed every lookup: `["admit-all", "nth-hit:3",
    /// "second-hit:window=10m"]`; options `window`, `expected_items`, `fpr`, `eviction`,
    /// `capacity` default to the live cache's. The live policy is always computed beside them.
    #[serde(deserialize_with = "de_shadows")]
    pub shadow: Vec<ShadowSpec>,
    /// Sightings the shadows' queue holds.
    #[serde(deserialize_with = "de_at_least_one")]
    pub shadow_queue: usize,
    /// Record every lookup into this file (appended to), in `record_format`.
    pub record: Option<PathBuf>,
    /// The recording's format: `secondhit` (weights, storability and freshness, for
    /// `simulate` to predict this edge) or `oracle-general` (libCacheSim's, for other tools).
    pub record_format: crate::lab::RecordFormat,
    /// Rotate the recording at this size (`FILE.1`, `FILE.2`, ...).
    #[serde(deserialize_with = "de_nonzero_bytes")]
    pub record_max_bytes: u64,
    /// Rotated recordings kept.
    pub record_keep: u32,
    /// Records the recording's queue holds.
    #[serde(deserialize_with = "de_at_least_one")]
    pub record_queue: usize,
}

impl LabConfig {
    /// The largest queue (sightings; a slot is about 40 bytes, allocated at start).
    pub const MAX_QUEUE: usize = 1 << 24;
    /// The most rotated recordings kept.
    pub const MAX_KEEP: u32 = 1000;
}

impl Default for LabConfig {
    fn default() -> Self {
        LabConfig {
            shadow: Vec::new(),
            shadow_queue: 65_536,
            record: None,
            record_format: crate::lab::RecordFormat::Secondhit,
            record_max_bytes: 1 << 30,
            record_keep: 5,
            record_queue: 65_536,
        }
    }
}

/// `[cache]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Capacity in bytes (key, headers, body and bookkeeping of every entry): `256MiB`.
    #[serde(deserialize_with = "de_nonzero_bytes")]
    pub capacity: u64,
    /// Larger responses are streamed through and never stored. Unset: the smaller of 16 MiB
    /// and the capacity ([`CacheConfig::max_object_size`]).
    #[serde(deserialize_with = "de_opt_bytes")]
    pub max_object_size: Option<u64>,
    /// moka's eviction policy: `lru`, or `tinylfu` (which stacks moka's own frequency filter on
    /// top of the admission policy). The simulator's other evictions are refused here.
    #[serde(deserialize_with = "de_moka_eviction")]
    pub eviction: Eviction,
    /// Freshness for cacheable responses without `max-age`, `s-maxage` or `Expires`: `none`
    /// (do not store them) or a duration.
    #[serde(deserialize_with = "de_ttl")]
    pub default_ttl: Option<Duration>,
    /// Statuses stored without explicit freshness (by the heuristic or `default_ttl`); any
    /// other final status is stored only with `max-age`, `s-maxage` or `Expires`.
    #[serde(deserialize_with = "de_statuses")]
    pub statuses: Vec<u16>,
    /// Cap of the heuristic freshness (10 % of the time since `Last-Modified`, RFC 9111
    /// §4.2.2) for responses without explicit freshness: a duration, or `none` for no heuristic.
    #[serde(deserialize_with = "de_ttl")]
    pub heuristic_max: Option<Duration>,
    /// How long a stale object is kept (and weighs) after it expires, to be revalidated or
    /// served stale (Varnish's keep).
    #[serde(deserialize_with = "de_duration")]
    pub stale_keep: Duration,
    /// How long past its freshness a stored object may answer when the origin fails, when the
    /// response does not say itself (`stale-if-error`); `0s`: only when it says. Never past
    /// `must-revalidate` or `no-cache`.
    #[serde(deserialize_with = "de_duration")]
    pub stale_if_error: Duration,
    /// Targeted cache-control fields for this cache, by precedence (RFC 9213): the first present
    /// governs instead of `Cache-Control` and `Expires`, and none is forwarded to clients.
    #[serde(deserialize_with = "de_header_names")]
    pub targeted_cache_control: Vec<HeaderName>,
    /// Store responses that carry `Set-Cookie` (the cookie goes to every client).
    pub store_set_cookie: bool,
    /// Never cache requests that carry a `Cookie` (neither looked up nor stored).
    pub bypass_cookie_requests: bool,
    /// Share responses fetched for requests with `Cookie` as any other (RFC 9111 alone). Off
    /// by default, as Varnish's builtin rule: such a response is stored for others only when it
    /// says `public` or `s-maxage`, so a page personalised by a session cookie without `Vary`
    /// (web cache deception: `/account/x.css`) never reaches another client. Requests with a
    /// cookie still get stored responses.
    pub share_cookie_requests: bool,
    /// The request fields a GET or HEAD may pass to the origin; every other field is dropped.
    /// Each one forwarded is part of the cache key (its value selects a stored response of its
    /// own) unless it is in `forwarded_unkeyed_headers` or the cache answers for it itself
    /// (`Cache-Control`, `Pragma`, conditionals, `Range`), so that no input outside the key can
    /// shape a stored response. Hop-by-hop fields are always dropped; `Host`, `Via` and
    /// `X-Forwarded-For` are always set by the proxy. `"*"` forwards every field except the
    /// header-override ones (`X-Forwarded-Host`, ...) and keys on none: for origins that name
    /// in `Vary` every field that changes a cacheable response.
    #[serde(deserialize_with = "de_header_names")]
    pub forwarded_request_headers: Vec<HeaderName>,
    /// Forwarded fields that are not part of the key: the operator's word that the origin
    /// shapes no cacheable response by them except as its `Vary` says (then each variant is
    /// keyed through `Vary`). Default: the credentials, `Authorization` and `Cookie`, since what
    /// they fetch is shared only when marked `public` or `s-maxage`. A name here that is not
    /// forwarded has no effect.
    #[serde(deserialize_with = "de_header_names")]
    pub forwarded_unkeyed_headers: Vec<HeaderName>,
    /// Content codings by preference: a request's `Accept-Encoding` is rewritten, before the
    /// lookup and before the origin sees it, to the first of these the client accepts, else
    /// `identity`, so that `Vary: Accept-Encoding` (or the keyed field) makes at most one variant
    /// per coding listed, plus one, whatever browsers send (as Fastly and Varnish normalise it).
    /// `[]` (the default): forwarded as the client sent it. (Off by default for now: a request
    /// without the field becomes `identity`, which is keyed, and so changes the object ids of
    /// recordings and the proxy's own keys.)
    pub accept_encoding: Vec<String>,
    /// Slicing (`"1MiB"`; `0`, the default: off). With it, a GET miss asks the origin for the
    /// aligned slice of this many bytes that holds the first byte it wants, as nginx's `slice`
    /// module does: an object of one slice or less is stored whole as any other; a larger one
    /// (every object larger than `max_object_size` among them) is stored in slices, each its
    /// own entry for admission, coalescing and the flash tier, and a `Range` request fetches
    /// only the slices it covers. Without it, objects larger than `max_object_size` stream
    /// through and are never stored, and a `Range` miss is forwarded and not stored.
    #[serde(deserialize_with = "de_bytes")]
    pub slice_size: u64,
    /// Run moka's maintenance after every write and every 32 reads, as `simulate --store moka`
    /// does, instead of when moka's own buffers and timer say: evictions then follow the order
    /// of requests, not of a 300 ms timer, and `simulate` predicts them (docs/lab.md). Its cost
    /// is within this machine's noise (`scripts/bench-maintenance.sh`); off for a many-core host
    /// whose workers would queue on moka's maintenance lock.
    pub exact_maintenance: bool,
    /// Keep stored bodies of 128 KiB or more in sealed memory files and send them to plain
    /// HTTP/1.1 clients with `sendfile`, as nginx's `sendfile on` does with its files: a hit's
    /// body is then not copied into the socket (see [`crate::pages`]). `false`: every body on
    /// the heap, written with `writev`.
    pub sendfile: bool,
    /// Weigh entries by body only (and maintain them exactly), as `simulate --store moka`
    /// without `--object-cost`: the store then keeps exactly the simulator's LRU. For
    /// agreement runs (`secondhit demo --lab-mode`), not for production: the capacity then
    /// bounds bodies, not memory.
    pub lab_mode: bool,
    /// The flash tier under memory (off unless `dir` is set).
    pub disk: DiskConfig,
}

/// `[cache.disk]`: a flash tier in a local directory, under the memory store. What reaches it
/// is `admission.disk`'s decision; objects are written once, when memory evicts them (at once if
/// the memory policy deferred them).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskConfig {
    /// The directory (created if missing). Unset: no flash tier.
    pub dir: Option<PathBuf>,
    /// Bytes of disk it may use (required with `dir`; at least two blocks).
    #[serde(deserialize_with = "de_bytes")]
    pub capacity: u64,
    /// Bytes a block: written sequentially and evicted as one (FIFO). Also bounds the largest
    /// object the disk takes (half a block less 64 KiB: foyer 0.22 loses writes of larger
    /// ones once it evicts).
    #[serde(deserialize_with = "de_bytes")]
    pub block_size: u64,
    /// At most this many bytes written a second (`"50MiB"`); writes past it are refused and
    /// counted (`secondhit_disk_refusals_total`). Unset: no budget.
    #[serde(deserialize_with = "de_opt_bytes")]
    pub max_write_rate: Option<u64>,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            dir: None,
            capacity: 0,
            block_size: 16 << 20,
            max_write_rate: None,
        }
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            capacity: 256 << 20,
            max_object_size: None,
            eviction: Eviction::Lru,
            default_ttl: None,
            statuses: StoreRules::default().statuses,
            heuristic_max: StoreRules::default().heuristic_max,
            stale_keep: Duration::from_secs(4 * 3600),
            stale_if_error: Duration::ZERO,
            targeted_cache_control: StoreRules::default().targeted,
            store_set_cookie: false,
            bypass_cookie_requests: false,
            share_cookie_requests: false,
            forwarded_request_headers: DEFAULT_FORWARDED_REQUEST_HEADERS
                .iter()
                .map(|s| HeaderName::from_static(s))
                .collect(),
            forwarded_unkeyed_headers: DEFAULT_FORWARDED_UNKEYED_HEADERS
                .iter()
                .map(|s| HeaderName::from_static(s))
                .collect(),
            accept_encoding: Vec::new(),
            slice_size: 0,
            exact_maintenance: true,
            sendfile: true,
            lab_mode: false,
            disk: DiskConfig::default(),
        }
    }
}

impl CacheConfig {
    /// The default largest object: 16 MiB, or the capacity if that is smaller.
    pub const DEFAULT_MAX_OBJECT_SIZE: u64 = 16 << 20;

    /// The largest object stored: as set, or the smaller of 16 MiB and the capacity.
    pub fn max_object_size(&self) -> u64 {
        self.max_object_size
            .unwrap_or(Self::DEFAULT_MAX_OBJECT_SIZE.min(self.capacity))
    }
}

/// `[admission]`: the same settings and defaults as `simulate`'s.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdmissionConfig {
    /// `admit-all`, `second-hit`, `second-hit-exact`, `nth-hit:N`, `nth-hit-exact:N`.
    #[serde(deserialize_with = "de_parse")]
    pub policy: Policy,
    /// Generation window: `1h`, `30m`, or `inf`.
    #[serde(deserialize_with = "de_opt_duration")]
    pub window: Option<Duration>,
    /// Distinct keys per generation.
    pub expected_items: u64,
    /// Target false-positive rate per generation.
    pub fpr: f64,
    /// `blocked` or `standard`.
    #[serde(deserialize_with = "de_parse")]
    pub layout: Layout,
    /// Which objects reach the flash tier (`[cache.disk]`), asked on every miss in both tiers
    /// beside `policy` (memory's), with the same window and sizing.
    #[serde(deserialize_with = "de_parse")]
    pub disk: Policy,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        let s = Settings::default();
        AdmissionConfig {
            policy: Policy::SecondHit,
            window: s.window,
            expected_items: s.expected_items,
            fpr: s.fpr,
            layout: s.layout,
            disk: Policy::SecondHit,
        }
    }
}

impl AdmissionConfig {
    /// The filter settings.
    pub fn settings(&self) -> Settings {
        Settings {
            window: self.window,
            expected_items: self.expected_items,
            fpr: self.fpr,
            layout: self.layout,
        }
    }
}

/// `[timeouts]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// Connecting to an origin (502 after it).
    #[serde(deserialize_with = "de_duration")]
    pub connect: Duration,
    /// From sending a request to the origin's response headers, and between body chunks
    /// (504 after it, or a cut-off response mid-body).
    #[serde(deserialize_with = "de_duration")]
    pub first_byte: Duration,
    /// Idle pooled origin connections are closed after this.
    #[serde(deserialize_with = "de_duration")]
    pub origin_idle: Duration,
    /// A client must send its request headers within this, counted from the connection's
    /// start and, on keep-alive connections, from the previous response (slow-loris and idle
    /// guard); also bounds the TLS handshake.
    #[serde(deserialize_with = "de_duration")]
    pub client_header: Duration,
    /// The longest wait for each piece of a request body the proxy reads (nginx's
    /// `client_body_timeout`, default 60 s): a client that stops sending its body mid-way gets
    /// 400 and the origin is never sent the part it got. Measured between reads, not over the
    /// whole body, so a slow uplink is not cut off; a body trickled faster than this is bounded
    /// by eviction when the slots are full.
    #[serde(deserialize_with = "de_duration")]
    pub client_body: Duration,
    /// A connection whose response cannot be written (the client stopped reading, or an HTTP/2
    /// client keeps a zero flow-control window) and that made no progress in either direction
    /// for this long is closed, with what was buffered for it (nginx's `send_timeout`, default
    /// 60 s). Keep it above `first_byte` + `coalesce_wait`: a request waiting for its origin
    /// is silent too.
    #[serde(deserialize_with = "de_duration")]
    pub client_send: Duration,
    /// A keep-alive HTTP/1.1 or an HTTP/2 connection with no request in flight is closed after
    /// this long without a new one (nginx's `keepalive_timeout`, default 75 s; HTTP/2 PINGs do
    /// not count as requests). HTTP/1.1 waits between requests are also bounded by
    /// `client_header`.
    #[serde(deserialize_with = "de_duration")]
    pub client_idle: Duration,
    /// How long a request waits for another request's fetch of the same object before going to
    /// the origin itself.
    #[serde(deserialize_with = "de_duration")]
    pub coalesce_wait: Duration,
    /// On shutdown, in-flight requests get this long to finish.
    #[serde(deserialize_with = "de_duration")]
    pub shutdown_grace: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(15),
            origin_idle: Duration::from_secs(90),
            client_header: Duration::from_secs(10),
            client_body: Duration::from_secs(60),
            client_send: Duration::from_secs(60),
            client_idle: Duration::from_secs(75),
            coalesce_wait: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// `[limits]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Client connections served at once (default 4096). When every slot is taken, a new
    /// connection makes room by closing the idlest one (one with no request in flight first,
    /// then the one quiet longest), so that held connections cannot lock others out; a
    /// connection younger than a second, or making progress, is never the one closed.
    #[serde(deserialize_with = "de_at_least_one")]
    pub max_connections: usize,
    /// Connections served at once for one client address (0, the default: no limit, as a CDN
    /// edge sees whole networks behind one NAT address). Past it a new connection from that
    /// address is closed at once.
    pub max_connections_per_ip: usize,
    /// Requests in flight at once on one HTTP/2 connection (default 128, as nginx's
    /// `http2_max_concurrent_streams`); more are refused with `REFUSED_STREAM`. The bytes a
    /// connection's responses hold are bounded for all its streams together
    /// (`stream_buffer_bytes`).
    #[serde(deserialize_with = "de_h2_streams")]
    pub max_h2_streams: u32,
    /// Request URIs longer than this get 414.
    pub max_uri_bytes: usize,
    /// Request headers larger than this (all together) get 431.
    #[serde(deserialize_with = "de_buffer")]
    pub max_header_bytes: usize,
    /// Requests with more header fields than this get 431.
    pub max_headers: usize,
    /// An origin response whose header block is larger than this is a 502; also the largest
    /// body chunk read from an origin at once.
    #[serde(deserialize_with = "de_buffer")]
    pub max_origin_header_bytes: usize,
    /// Bytes of responses streamed from the origin that a client connection has not yet taken,
    /// all its requests together (HTTP/2 streams share it); past it the origin is read no faster
    /// than the client reads, so a slow reader holds at most this much however many streams it
    /// opens. Bodies being stored are not paced by it: they are read at the origin's pace into
    /// one buffer per object (within `store_buffer_bytes`) that every client reads.
    #[serde(deserialize_with = "de_budget")]
    pub stream_buffer_bytes: u32,
    /// Bytes of all the response bodies being stored at once; a response that would go past it
    /// is served but not stored (`secondhit_cache_write_over_budget_total`).
    #[serde(deserialize_with = "de_nonzero_bytes")]
    pub store_buffer_bytes: u64,
    /// A request body is read this far before the origin is contacted, so that a malformed or
    /// cut-off body is the client's 400 and never costs an origin connection.
    #[serde(deserialize_with = "de_usize_bytes")]
    pub request_body_buffer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 4096,
            max_connections_per_ip: 0,
            max_h2_streams: 128,
            max_uri_bytes: 8192,
            max_header_bytes: 32 * 1024,
            max_headers: 100,
            max_origin_header_bytes: 64 * 1024,
            stream_buffer_bytes: 256 * 1024,
            store_buffer_bytes: 256 << 20,
            request_body_buffer_bytes: 64 * 1024,
        }
    }
}

/// `[tls]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain for clients; with `key`, `listen` speaks TLS (ALPN `h2`,
    /// `http/1.1`).
    pub cert: Option<std::path::PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<std::path::PathBuf>,
    /// More certificates, chosen by the SNI name the client asks for: `[[tls.sni]]` with
    /// `host`, `cert`, `key`.
    pub sni: Vec<SniConfig>,
    /// A cleartext listener beside the TLS one (the TLS one is `listen`).
    pub plain_listen: Option<SocketAddr>,
    /// Extra CA certificates (PEM) trusted for `https://` origins, beside the webpki roots.
    pub origin_ca_file: Option<std::path::PathBuf>,
    /// Offer HTTP/2 to `https://` origins (by ALPN; they may still choose HTTP/1.1).
    pub origin_http2: bool,
}

/// `[[tls.sni]]`: a certificate for one host name.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SniConfig {
    /// The host name the client asks for by SNI.
    pub host: String,
    /// Its PEM certificate chain.
    pub cert: std::path::PathBuf,
    /// Its PEM private key.
    pub key: std::path::PathBuf,
}

impl TlsConfig {
    /// The default certificate pair and the SNI ones, when TLS is on.
    pub fn pairs(&self) -> Option<(crate::tls::CertPair, Vec<crate::tls::CertPair>)> {
        let (cert, key) = (self.cert.clone()?, self.key.clone()?);
        let default = crate::tls::CertPair {
            host: None,
            cert,
            key,
        };
        let sni = self
            .sni
            .iter()
            .map(|s| crate::tls::CertPair {
                host: Some(s.host.clone()),
                cert: s.cert.clone(),
                key: s.key.clone(),
            })
            .collect();
        Some((default, sni))
    }
}

/// A log level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// And warnings.
    Warn,
    /// And start, stop and (with `access_log`) one line per request.
    Info,
    /// And per-connection detail.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The name, as `RUST_LOG` takes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

impl FromStr for LogLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim() {
            "error" => LogLevel::Error,
            "warn" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            "trace" => LogLevel::Trace,
            other => {
                return Err(format!(
                    "{other:?}: expected error, warn, info, debug or trace"
                ))
            }
        })
    }
}

impl TryFrom<String> for LogLevel {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[log]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `error`, `warn`, `info`, `debug` or `trace` (the `RUST_LOG` variable overrides it).
    pub level: LogLevel,
    /// One line per request (see [`crate::access_log`]).
    pub access_log: bool,
    /// `combined` (Apache/nginx combined, with the cache outcome and times appended) or
    /// `json` (one object a line).
    pub access_log_format: crate::access_log::Format,
    /// The file the access log is appended to (reopened on SIGUSR1 and reload, for rotation);
    /// unset: stderr.
    pub access_log_file: Option<PathBuf>,
}

impl LogConfig {
    /// Where access log lines go, if they are logged.
    pub fn access_log_target(&self) -> Option<crate::access_log::Target> {
        self.access_log.then(|| crate::access_log::Target {
            format: self.access_log_format,
            file: self.access_log_file.clone(),
        })
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: LogLevel::Info,
            access_log: false,
            access_log_format: crate::access_log::Format::Combined,
            access_log_file: None,
        }
    }
}
