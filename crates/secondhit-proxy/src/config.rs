//! `serve`'s configuration, parsed once into types: read from TOML (every field has a default),
//! overridden by the command line (the `secondhit` binary's flags), then checked across fields by
//! [`Config::validate`], which yields the [`ValidConfig`] the server is built from. A value that
//! cannot be its type (a policy name, a size, a host, an origin URL) is refused while parsing,
//! in one line naming the file, the line, the field and the value. See `secondhit.example.toml`.

use crate::admission::{Policy, Settings};
use crate::bloom::Layout;
use crate::http_cache::{
    StoreRules, DEFAULT_FORWARDED_REQUEST_HEADERS, DEFAULT_FORWARDED_UNKEYED_HEADERS,
};
use crate::lab::ShadowSpec;
use crate::proxy::authority::Host;
use crate::store::Eviction;
use crate::units;
use http::HeaderName;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// Why a configuration was refused. Messages name the file or field and the value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// TOML syntax, or a field whose value cannot be its type.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// Where and what: `line 3: admission.policy = "third-hit": unknown admission policy ...`.
        message: String,
    },
    /// Values that parse but do not make sense together.
    #[error("config: {field}: {message}")]
    Invalid {
        /// The field, dotted (`cache.max_object_size`).
        field: &'static str,
        /// What is wrong, with the values.
        message: String,
    },
}

fn invalid(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        message: message.into(),
    }
}

/// Deserialises a string with the type's `FromStr`.
fn de_parse<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

fn de_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(u64),
        S(String),
    }
    match Raw::deserialize(d)? {
        Raw::N(n) => Ok(n),
        Raw::S(s) => units::parse_bytes(&s).map_err(serde::de::Error::custom),
    }
}

fn de_nonzero_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match de_bytes(d)? {
        0 => Err(serde::de::Error::custom("must be more than 0 bytes")),
        n => Ok(n),
    }
}

fn de_opt_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_nonzero_bytes(d).map(Some)
}

/// A buffer size that HTTP/1 parsing can work with (at least 8 KiB).
fn de_buffer<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = de_bytes(d)?;
    if n < 8192 {
        return Err(serde::de::Error::custom(format!(
            "{n} is below the 8192 bytes HTTP/1 parsing needs"
        )));
    }
    usize::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} bytes is too large")))
}

/// A per-response budget: between 1 byte and 4 GiB.
fn de_budget<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = de_nonzero_bytes(d)?;
    u32::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} is more than 4 GiB")))
}

fn de_usize_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = de_bytes(d)?;
    usize::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} bytes is too large")))
}

fn de_at_least_one<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    match usize::deserialize(d)? {
        0 => Err(serde::de::Error::custom("must be at least 1")),
        n => Ok(n),
    }
}

fn de_h2_streams<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match u32::deserialize(d)? {
        0 => Err(serde::de::Error::custom(
            "must be at least 1 (0 would refuse every HTTP/2 request)",
        )),
        n => Ok(n),
    }
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    units::parse_duration(&s)
        .map_err(serde::de::Error::custom)?
        .ok_or_else(|| serde::de::Error::custom(format!("{s:?}: this timeout must be finite")))
}

fn de_opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    units::parse_duration(&s).map_err(serde::de::Error::custom)
}

fn de_ttl<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim() == "none" {
        return Ok(None);
    }
    match units::parse_duration(&s).map_err(serde::de::Error::custom)? {
        Some(d) if d.is_zero() => Ok(None),
        other => Ok(other),
    }
}

fn de_moka_eviction<'de, D: Deserializer<'de>>(d: D) -> Result<Eviction, D::Error> {
    parse_moka_eviction(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

/// An eviction the proxy's moka store has (`lru`, `tinylfu`); the simulator's others are named
/// as such.
pub fn parse_moka_eviction(s: &str) -> Result<Eviction, String> {
    let e: Eviction = s.parse()?;
    if e.is_moka() {
        Ok(e)
    } else {
        Err(format!(
            "eviction {e} exists only in the simulator's exact store (simulate --eviction {e}); \
             the proxy's moka store has lru and tinylfu"
        ))
    }
}

fn de_opt_origin<'de, D: Deserializer<'de>>(d: D) -> Result<Option<OriginUrl>, D::Error> {
    de_parse(d).map(Some)
}

fn de_hosts<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, OriginUrl>, D::Error> {
    let raw = BTreeMap::<String, String>::deserialize(d)?;
    let mut hosts = BTreeMap::new();
    for (host, url) in raw {
        let h = Host::parse(host.trim().as_bytes(), 80)
            .map_err(|e| serde::de::Error::custom(format!("{host:?} is not a host: {e}")))?;
        let url: OriginUrl = url
            .parse()
            .map_err(|e| serde::de::Error::custom(format!("{host:?}: {e}")))?;
        if hosts.insert(h.as_str().to_string(), url).is_some() {
            return Err(serde::de::Error::custom(format!(
                "{host:?} is the same host as another entry ({})",
                h.as_str()
            )));
        }
    }
    Ok(hosts)
}

fn de_statuses<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u16>, D::Error> {
    let statuses = Vec::<u16>::deserialize(d)?;
    if let Some(bad) = statuses.iter().find(|s| !(100..=599).contains(*s)) {
        return Err(serde::de::Error::custom(format!(
            "{bad} is not an HTTP status"
        )));
    }
    Ok(statuses)
}

fn de_header_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<HeaderName>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|name| {
            HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                serde::de::Error::custom(format!("{name:?} is not a header field name"))
            })
        })
        .collect()
}

/// The whole configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address of the public listener.
    pub listen: SocketAddr,
    /// Address of the admin listener (`/metrics`, `/healthz`, purge). Keep it on loopback.
    pub admin_listen: SocketAddr,
    /// The default origin, `http://host:port`, for requests whose Host has no entry in `hosts`.
    #[serde(deserialize_with = "de_opt_origin")]
    pub origin: Option<OriginUrl>,
    /// Per-Host origins: `"img.example.com" = "http://10.0.0.5:8080"`, keyed by the normalised
    /// host (`IMG.example.com.` and `img.example.com:80` are `img.example.com`).
    #[serde(deserialize_with = "de_hosts")]
    pub hosts: BTreeMap<String, OriginUrl>,
    /// The cache.
    pub cache: CacheConfig,
    /// The admission policy.
    pub admission: AdmissionConfig,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Limits on clients.
    pub limits: Limits,
    /// Logging.
    pub log: LogConfig,
    /// TLS: on `listen` for clients, and the trust for `https://` origins.
    pub tls: TlsConfig,
    /// Where the admission filter's state is kept across restarts (`admission.snapshot`):
    /// loaded at start, written every `state_snapshot_interval` and on shutdown. Unset: the
    /// filter starts empty on every start.
    pub state_dir: Option<std::path::PathBuf>,
    /// How often the filter's state is written to `state_dir`.
    #[serde(deserialize_with = "de_duration")]
    pub state_snapshot_interval: Duration,
    /// A bearer token the admin listener requires (`Authorization: Bearer <token>`) on every
    /// endpoint but `/healthz`. Required when `admin_listen` is not a loopback address.
    pub admin_token: Option<String>,
    /// A file holding the admin token (its first line), instead of `admin_token`.
    pub admin_token_file: Option<std::path::PathBuf>,
    /// Threads serving the public listeners, each with its own event loop and its own pool of
    /// origin connections, so that a request, its origin connection and its timers stay on one
    /// thread (as nginx's worker processes do). 0: one per core.
    pub workers: usize,
    /// Shadow policies and recording.
    pub lab: LabConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            origin: None,
            hosts: BTreeMap::new(),
            cache: CacheConfig::default(),
            admission: AdmissionConfig::default(),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            log: LogConfig::default(),
            tls: TlsConfig::default(),
            state_dir: None,
            state_snapshot_interval: Duration::from_secs(60),
            admin_token: None,
            admin_token_file: None,
            workers: 0,
            lab: LabConfig::default(),
        }
    }
}

fn de_shadows<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ShadowSpec>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| s.parse().map_err(serde::de::Error::custom))
        .collect()
}

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
    /// Record every lookup as an oracleGeneral trace into this file (appended to).
    pub record: Option<PathBuf>,
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
    /// Weigh entries by body only and run moka's maintenance after every write and every 32
    /// reads, as `simulate --store moka` does: the store then keeps exactly the simulator's LRU.
    /// Slower; for agreement runs (`secondhit demo`), not for production.
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

/// Why an origin URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginUrlError {
    /// Not a URL.
    #[error("{0:?} is not a URL: expected http://host:port or https://host:port")]
    NotUrl(String),
    /// Neither `http://` nor `https://`.
    #[error("{0:?}: an origin is http:// or https://")]
    Scheme(String),
    /// No host.
    #[error("{0:?} has no host")]
    NoHost(String),
    /// A path or query.
    #[error("{0:?}: an origin is scheme://host:port, without a path")]
    Path(String),
}

/// A parsed origin: `http://host:port` or `https://host:port`, no path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginUrl {
    /// Whether it is reached over TLS (`https://`).
    pub tls: bool,
    /// `host:port` to connect to (and, for `https://`, the name its certificate must carry).
    pub authority: http::uri::Authority,
}

impl OriginUrl {
    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }
}

impl FromStr for OriginUrl {
    type Err = OriginUrlError;
    fn from_str(url: &str) -> Result<Self, OriginUrlError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|_| OriginUrlError::NotUrl(url.into()))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(OriginUrlError::Scheme(url.into())),
        };
        let Some(authority) = uri.authority().cloned() else {
            return Err(OriginUrlError::NoHost(url.into()));
        };
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(OriginUrlError::Path(url.into()));
        }
        Ok(OriginUrl { tls, authority })
    }
}

impl fmt::Display for OriginUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme(), self.authority)
    }
}

/// A configuration that passed [`Config::validate`]: what the server is built from.
#[derive(Clone, Debug)]
pub struct ValidConfig(Config, Option<String>);

impl ValidConfig {
    /// The admin token, from `admin_token` or read from `admin_token_file`.
    pub fn admin_token(&self) -> Option<&str> {
        self.1.as_deref()
    }
}

impl std::ops::Deref for ValidConfig {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0
    }
}

impl Config {
    /// The most `workers` there may be.
    pub const MAX_WORKERS: usize = 1024;

    /// The threads serving the public listeners: `workers`, or one per core when it is 0.
    pub fn worker_threads(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Self::parse("config", text)
    }

    fn parse(path: &str, text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: describe(text, &e),
        })
    }

    /// Checks what no single field can: names the fields and the values.
    pub fn validate(self) -> Result<ValidConfig, ConfigError> {
        if self.origin.is_none() && self.hosts.is_empty() {
            return Err(invalid(
                "origin",
                "no origin configured: set origin = \"http://host:port\" (or --origin), or [hosts]",
            ));
        }
        if self.listen == self.admin_listen && self.listen.port() != 0 {
            return Err(invalid(
                "admin_listen",
                format!("{} is also the public listener", self.admin_listen),
            ));
        }
        if self.workers > Config::MAX_WORKERS {
            return Err(invalid(
                "workers",
                format!(
                    "{} is more than {} threads (0 is one per core)",
                    self.workers,
                    Config::MAX_WORKERS
                ),
            ));
        }
        let d = &self.cache.disk;
        if d.dir.is_some() {
            if d.block_size < (1 << 20) || d.block_size % 4096 != 0 {
                return Err(invalid(
                    "cache.disk.block_size",
                    format!(
                        "{} is not a multiple of 4 KiB of at least 1 MiB",
                        d.block_size
                    ),
                ));
            }
            if d.capacity < 2 * d.block_size {
                return Err(invalid(
                    "cache.disk.capacity",
                    format!(
                        "{} is less than two blocks of {} bytes (set it with the directory: \
                         capacity = \"100GiB\")",
                        d.capacity, d.block_size
                    ),
                ));
            }
            if d.max_write_rate == Some(0) {
                return Err(invalid(
                    "cache.disk.max_write_rate",
                    "0 would refuse every write",
                ));
            }
        }
        let c = &self.cache;
        let max = c.max_object_size();
        if max > c.capacity {
            return Err(invalid(
                "cache.max_object_size",
                format!(
                    "{max} is more than cache.capacity ({}): no object that large could be stored",
                    c.capacity
                ),
            ));
        }
        if max > u64::from(u32::MAX) {
            return Err(invalid(
                "cache.max_object_size",
                format!("{max} is more than the 4 GiB an entry can weigh"),
            ));
        }
        let t = &self.timeouts;
        for (field, d) in [
            ("timeouts.client_header", t.client_header),
            ("timeouts.client_body", t.client_body),
            ("timeouts.client_send", t.client_send),
            ("timeouts.client_idle", t.client_idle),
        ] {
            if d.is_zero() {
                return Err(invalid(
                    field,
                    "0s would close every connection at once: give a duration such as \"60s\"",
                ));
            }
        }
        if self.limits.store_buffer_bytes < max {
            return Err(invalid(
                "limits.store_buffer_bytes",
                format!(
                    "{} is less than cache.max_object_size ({max}): the largest object could never be stored",
                    self.limits.store_buffer_bytes
                ),
            ));
        }
        let t = &self.tls;
        if t.cert.is_some() != t.key.is_some() {
            return Err(invalid(
                "tls",
                "cert and key go together: give both (--tls-cert and --tls-key) or neither",
            ));
        }
        if t.cert.is_none() && (!t.sni.is_empty() || t.plain_listen.is_some()) {
            return Err(invalid(
                "tls",
                "tls.sni and tls.plain_listen need tls.cert and tls.key (the default certificate)",
            ));
        }
        if self.state_snapshot_interval.is_zero() {
            return Err(invalid("state_snapshot_interval", "must be more than 0s"));
        }
        // The proxy decides admission before it fetches, so it cannot know the size yet.
        if let Policy::Size(limit) = self.admission.policy {
            return Err(invalid(
                "admission.policy",
                format!(
                    "size:{limit} needs the object's size before the fetch, which a proxy does not have; \
                     set cache.max_object_size = {limit} instead (larger responses are streamed and not stored)"
                ),
            ));
        }
        // The filter's size comes from expected_items and fpr together; check it without
        // allocating the filter (exact policies have none).
        if self.admission.policy.is_approximate() {
            self.admission
                .settings()
                .filter_params()
                .map_err(|e| invalid("admission", format!("filter settings: {e}")))?;
        }
        let lab = &self.lab;
        for (i, spec) in lab.shadow.iter().enumerate() {
            if lab.shadow[..i].iter().any(|s| s.text == spec.text) {
                return Err(invalid(
                    "lab.shadow",
                    format!("{spec} is given twice (its metrics would be one series twice)"),
                ));
            }
            if spec.policy.is_approximate() {
                spec.settings(&self.admission.settings())
                    .filter_params()
                    .map_err(|e| invalid("lab.shadow", format!("{spec}: filter settings: {e}")))?;
            }
        }
        // Each queue's slots are allocated at start; each rotation renames every kept file.
        for (field, n) in [
            ("lab.shadow_queue", lab.shadow_queue),
            ("lab.record_queue", lab.record_queue),
        ] {
            if n > LabConfig::MAX_QUEUE {
                return Err(invalid(
                    field,
                    format!("{n} is more than {} sightings", LabConfig::MAX_QUEUE),
                ));
            }
        }
        if lab.record_keep > LabConfig::MAX_KEEP {
            return Err(invalid(
                "lab.record_keep",
                format!(
                    "{} is more than {} files",
                    lab.record_keep,
                    LabConfig::MAX_KEEP
                ),
            ));
        }
        if self.lab.record.is_some() && self.lab.record_max_bytes < crate::lab::record::RECORD_BYTES
        {
            return Err(invalid(
                "lab.record_max_bytes",
                format!(
                    "{} is less than one record ({} bytes)",
                    self.lab.record_max_bytes,
                    crate::lab::record::RECORD_BYTES
                ),
            ));
        }
        let token = match (&self.admin_token, &self.admin_token_file) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "admin_token_file",
                    "set admin_token or admin_token_file, not both",
                ))
            }
            (Some(t), None) => Some(t.trim().to_string()),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                Some(text.lines().next().unwrap_or("").trim().to_string())
            }
            (None, None) => None,
        };
        if token.as_deref() == Some("") {
            return Err(invalid("admin_token", "is empty"));
        }
        if token.is_none() && !self.admin_listen.ip().is_loopback() {
            return Err(invalid(
                "admin_listen",
                format!(
                    "{} is not a loopback address: purge, reload and metrics would be open to the network; set admin_token or admin_token_file",
                    self.admin_listen
                ),
            ));
        }
        Ok(ValidConfig(self, token))
    }

    /// The store rules of `[cache]`.
    pub fn store_rules(&self) -> StoreRules {
        StoreRules {
            statuses: self.cache.statuses.clone(),
            default_ttl: self.cache.default_ttl,
            heuristic_max: self.cache.heuristic_max,
            store_set_cookie: self.cache.store_set_cookie,
            targeted: self.cache.targeted_cache_control.clone(),
            stale_if_error: self.cache.stale_if_error,
            share_cookie_requests: self.cache.share_cookie_requests,
        }
    }
}

/// One line for a TOML error: `line N: table.key = value: what is wrong`.
fn describe(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim().replace('\n', " ");
    let Some(span) = e.span() else {
        return message;
    };
    let start = span.start.min(text.len());
    let line_no = text[..start].matches('\n').count() + 1;
    let line = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let this_line = text[line..].lines().next().unwrap_or("").trim();
    // The table the line belongs to: the last `[header]` above it.
    let table = text[..line]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    match this_line.split_once('=') {
        Some((key, value)) if !this_line.starts_with('[') => {
            let key = key.trim().trim_matches('"');
            let field = match table {
                Some(t) => format!("{t}.{key}"),
                None => key.to_string(),
            };
            format!("line {line_no}: {field} = {}: {message}", value.trim())
        }
        _ => format!("line {line_no}: {this_line}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_file_parses_and_validates() {
        let text = include_str!("../../../secondhit.example.toml");
        let c = Config::from_toml(text).unwrap().validate().unwrap();
        assert_eq!(c.cache.capacity, 256 << 20);
        assert_eq!(c.cache.max_object_size(), 16 << 20);
        assert_eq!(c.admission.window, Some(Duration::from_secs(3600)));
        assert_eq!(c.hosts.len(), 1);
    }

    #[test]
    fn defaults_are_simulate_defaults() {
        let c = Config {
            origin: Some("http://127.0.0.1:1".parse().unwrap()),
            ..Config::default()
        };
        let c = c.validate().unwrap();
        assert_eq!(c.admission.policy, Policy::SecondHit);
        assert_eq!(c.admission.settings(), Settings::default());
        assert_eq!(c.cache.eviction, Eviction::Lru);
    }

    #[test]
    fn a_small_capacity_lowers_the_default_largest_object() {
        let c = Config::from_toml("origin = \"http://x:1\"\n[cache]\ncapacity = \"10MB\"")
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(c.cache.max_object_size(), 10_000_000);
        let c = Config::from_toml("origin = \"http://x:1\"\n[cache]\ncapacity = \"1GiB\"").unwrap();
        assert_eq!(c.cache.max_object_size(), 16 << 20);
    }

    #[test]
    fn hosts_are_keyed_by_their_normal_form() {
        let c = Config::from_toml("[hosts]\n\"IMG.test.:80\" = \"http://127.0.0.1:2\"").unwrap();
        assert_eq!(c.hosts.keys().collect::<Vec<_>>(), ["img.test"]);
        let e = Config::from_toml("[hosts]\n\"a/b\" = \"http://127.0.0.1:2\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[hosts]") && e.contains("a/b") && e.contains("not a host"),
            "{e}"
        );
        let e = Config::from_toml("[hosts]\n\"a\" = \"http://x:1\"\n\"A.\" = \"http://x:2\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("same host"), "{e}");
    }

    #[test]
    fn lab_settings_parse_and_bad_shadows_are_refused_by_line_and_value() {
        let c = Config::from_toml(
            "origin = \"http://x:1\"\n[lab]\nshadow = [\"admit-all\", \"nth-hit:3:window=10m\"]\nrecord = \"/tmp/r\"\nrecord_max_bytes = \"1MiB\"",
        )
        .unwrap();
        assert_eq!(c.lab.shadow.len(), 2);
        assert_eq!(c.lab.shadow[1].policy, Policy::NthHit(3));
        assert_eq!(c.lab.record_max_bytes, 1 << 20);
        assert!(c.validate().is_ok());
        let e = Config::from_toml("[lab]\nshadow = [\"admit-all\", \"nth-hit:1\"]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("nth-hit:1"), "{e}");
        let e = Config::from_toml(
            "origin = \"http://x:1\"\n[lab]\nrecord = \"/tmp/r\"\nrecord_max_bytes = 10",
        )
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("lab.record_max_bytes") && e.contains("10"),
            "{e}"
        );
        let e = Config::from_toml(
            "origin = \"http://x:1\"\n[lab]\nshadow = [\"second-hit:fpr=0.5:expected_items=0\"]",
        )
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("lab.shadow") && e.contains("expected_items=0"),
            "{e}"
        );
    }

    #[test]
    fn errors_are_one_line_naming_line_field_and_value() {
        let e = Config::from_toml("listen = \"nowhere\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("listen") && e.contains("line 1"), "{e}");
        let e = Config::from_toml("[cache]\ncapacity = \"12 parsecs\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2: cache.capacity = \"12 parsecs\""), "{e}");
        let e = Config::from_toml("colour = 1").unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
        let e = Config::from_toml("origin = \"ftp://x:1\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("origin = \"ftp://x:1\"") && e.contains("http:// or https://"),
            "{e}"
        );
        assert!(
            Config::from_toml("origin = \"https://x:1\"")
                .unwrap()
                .origin
                .unwrap()
                .tls
        );
        let e = Config::from_toml("origin = \"http://x:1/path\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("without a path"), "{e}");
        let e = Config::from_toml("[admission]\npolicy = \"third-hit\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("admission.policy = \"third-hit\""), "{e}");
        assert!(e.contains("unknown admission policy"), "{e}");
        let e = Config::from_toml("[log]\nlevel = \"loud\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("log.level") && e.contains("expected error, warn"),
            "{e}"
        );
        let e = Config::from_toml("[cache]\nstatuses = [200, 700]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("700 is not an HTTP status"), "{e}");
        let e = Config::from_toml("[limits]\nmax_connections = 0")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("limits.max_connections") && e.contains("at least 1"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1, "{e}");
        let check = |toml: &str| {
            Config::from_toml(toml)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string()
        };
        assert!(check("").contains("no origin configured"));
        let e = check(
            "origin = \"http://x:1\"\n[cache]\ncapacity = \"1KiB\"\nmax_object_size = \"2KiB\"",
        );
        assert!(
            e.contains("cache.max_object_size") && e.contains("2048"),
            "{e}"
        );
        let e = check("origin = \"http://x:1\"\n[admission]\nfpr = 3.0");
        assert!(e.contains("admission") && e.contains("got 3"), "{e}");
    }

    #[test]
    fn the_proxy_refuses_what_it_cannot_do_live_and_says_what_to_use() {
        let e = Config::from_toml("origin = \"http://x:1\"\n[cache]\neviction = \"sieve\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("eviction sieve exists only in the simulator")
                && e.contains("lru and tinylfu"),
            "{e}"
        );
        let c = Config::from_toml("origin = \"http://x:1\"\n[admission]\npolicy = \"size:1MiB\"")
            .unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("cache.max_object_size = 1048576"), "{e}");
        let c = Config::from_toml("origin = \"http://x:1\"\n[admission]\npolicy = \"prob:0.1\"")
            .unwrap();
        assert_eq!(
            c.validate().unwrap().admission.policy,
            Policy::Prob(1_000_000)
        );
    }
}
