//! `serve`'s configuration: a serde struct with defaults for everything, read from TOML, then
//! overridden by command-line flags, then checked by [`Config::validate`]. See
//! `secondhit.example.toml` for a commented sample.

use crate::admission::{Policy, Settings};
use crate::bloom::Layout;
use crate::http_cache::StoreRules;
use crate::store::Eviction;
use crate::units;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// Why a configuration was refused. Messages name the field and the value.
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
    /// TOML syntax or a field of the wrong type (the message gives line and column).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What the TOML parser said.
        message: String,
    },
    /// A value that parses but makes no sense.
    #[error("config: {field}: {message}")]
    Invalid {
        /// The field, dotted (`cache.capacity`).
        field: &'static str,
        /// What is wrong, with the value.
        message: String,
    },
}

fn invalid(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        message: message.into(),
    }
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

fn de_bytes_usize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = de_bytes(d)?;
    usize::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} bytes is too large")))
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

/// The whole configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address of the public listener.
    pub listen: SocketAddr,
    /// Address of the admin listener (`/metrics`, `/healthz`, purge). Keep it on loopback.
    pub admin_listen: SocketAddr,
    /// The default origin, `http://host:port`, for requests whose Host has no entry in `hosts`.
    pub origin: Option<String>,
    /// Per-Host origins: `"img.example.com" = "http://10.0.0.5:8080"`.
    pub hosts: BTreeMap<String, String>,
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
        }
    }
}

/// `[cache]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Capacity in bytes (body plus headers of every entry): `256MiB`.
    #[serde(deserialize_with = "de_bytes")]
    pub capacity: u64,
    /// Larger responses are streamed through and never stored.
    #[serde(deserialize_with = "de_bytes")]
    pub max_object_size: u64,
    /// moka's eviction policy: `lru`, or `tinylfu` (which stacks moka's own frequency filter on
    /// top of the admission policy).
    pub eviction: Eviction,
    /// Freshness for cacheable responses without `max-age`, `s-maxage` or `Expires`: `none`
    /// (do not store them) or a duration.
    #[serde(deserialize_with = "de_ttl")]
    pub default_ttl: Option<Duration>,
    /// Statuses that may be stored.
    pub statuses: Vec<u16>,
    /// Store responses that carry `Set-Cookie` (the cookie goes to every client).
    pub store_set_cookie: bool,
    /// Never cache requests that carry a `Cookie`.
    pub bypass_cookie_requests: bool,
    /// The request fields a GET or HEAD may pass to the origin; every other field is dropped,
    /// so no input outside the cache key can shape a stored response (hop-by-hop fields are
    /// always dropped; `Host`, `Via` and `X-Forwarded-For` are always set by the proxy).
    pub forwarded_request_headers: Vec<String>,
    /// Weigh entries by body only and run moka's maintenance after every write and every 32
    /// reads, as `simulate --store moka` does: the store then keeps exactly the simulator's LRU.
    /// Slower; for agreement runs (`secondhit demo`), not for production.
    pub lab_mode: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            capacity: 256 << 20,
            max_object_size: 16 << 20,
            eviction: Eviction::Lru,
            default_ttl: None,
            statuses: StoreRules::default().statuses,
            store_set_cookie: false,
            bypass_cookie_requests: false,
            forwarded_request_headers: crate::http_cache::DEFAULT_FORWARDED_REQUEST_HEADERS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            lab_mode: false,
        }
    }
}

impl CacheConfig {
    /// `forwarded_request_headers` as field names.
    pub fn forwarded_request_headers(&self) -> Result<Vec<http::HeaderName>, ConfigError> {
        self.forwarded_request_headers
            .iter()
            .map(|name| {
                http::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                    invalid(
                        "cache.forwarded_request_headers",
                        format!("{name:?} is not a header field name"),
                    )
                })
            })
            .collect()
    }
}

/// `[admission]`: the same settings and defaults as `simulate`'s.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdmissionConfig {
    /// `admit-all`, `second-hit`, `second-hit-exact`, `nth-hit:N`, `nth-hit-exact:N`.
    pub policy: String,
    /// Generation window: `1h`, `30m`, or `inf`.
    #[serde(deserialize_with = "de_opt_duration")]
    pub window: Option<Duration>,
    /// Distinct keys per generation.
    pub expected_items: u64,
    /// Target false-positive rate per generation.
    pub fpr: f64,
    /// `blocked` or `standard`.
    pub layout: String,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        let s = Settings::default();
        AdmissionConfig {
            policy: Policy::SecondHit.to_string(),
            window: s.window,
            expected_items: s.expected_items,
            fpr: s.fpr,
            layout: s.layout.to_string(),
        }
    }
}

impl AdmissionConfig {
    /// The policy and its settings.
    pub fn build(&self) -> Result<(Policy, Settings), ConfigError> {
        let policy: Policy = self
            .policy
            .parse()
            .map_err(|e: crate::admission::PolicyError| {
                invalid("admission.policy", e.to_string())
            })?;
        let layout: Layout = self
            .layout
            .parse()
            .map_err(|e: crate::bloom::ParamError| invalid("admission.layout", e.to_string()))?;
        let settings = Settings {
            window: self.window,
            expected_items: self.expected_items,
            fpr: self.fpr,
            layout,
        };
        // Check the filter's parameters without allocating it (exact policies have none).
        if policy.is_approximate() {
            settings
                .filter_params()
                .map_err(|e| invalid("admission", format!("filter settings: {e}")))?;
        }
        Ok((policy, settings))
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
    /// A client must send its request headers within this (slow-loris guard).
    #[serde(deserialize_with = "de_duration")]
    pub client_header: Duration,
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
            coalesce_wait: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// `[limits]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Client connections served at once; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Request URIs longer than this get 414.
    pub max_uri_bytes: usize,
    /// Request headers larger than this (all together) get 431.
    pub max_header_bytes: usize,
    /// Requests with more header fields than this get 431.
    pub max_headers: usize,
    /// An origin response whose header block is larger than this is a 502; also the largest
    /// body chunk read from an origin at once (at least 8 KiB).
    #[serde(deserialize_with = "de_bytes_usize")]
    pub max_origin_header_bytes: usize,
    /// Bytes of a response the client has not yet taken; past it the origin is read no faster
    /// than the client reads (so a slow reader holds at most this much).
    #[serde(deserialize_with = "de_bytes_usize")]
    pub stream_buffer_bytes: usize,
    /// Bytes of all the response bodies being stored at once; a response that would go past it
    /// is served but not stored (`secondhit_cache_write_over_budget_total`).
    #[serde(deserialize_with = "de_bytes")]
    pub store_buffer_bytes: u64,
    /// A request body is read this far before the origin is contacted, so that a malformed or
    /// cut-off body is the client's 400 and never costs an origin connection.
    #[serde(deserialize_with = "de_bytes_usize")]
    pub request_body_buffer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 4096,
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

/// `[log]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `error`, `warn`, `info`, `debug` or `trace` (the `RUST_LOG` variable overrides it).
    pub level: String,
    /// One line per request at info level, target `secondhit::access`.
    pub access_log: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            access_log: false,
        }
    }
}

/// A parsed origin: `http://host:port`, no path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginUrl {
    /// `host:port` to connect to and send as Host.
    pub authority: http::uri::Authority,
}

impl OriginUrl {
    /// Parses and checks an origin URL, naming `field` in errors.
    pub fn parse(field: &'static str, url: &str) -> Result<OriginUrl, ConfigError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| invalid(field, format!("{url:?} is not a URL: {e}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(invalid(
                field,
                format!("{url:?}: only http:// origins are supported (put TLS in front of secondhit, not behind it)"),
            ));
        }
        let Some(authority) = uri.authority().cloned() else {
            return Err(invalid(field, format!("{url:?} has no host")));
        };
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(invalid(
                field,
                format!("{url:?}: an origin is scheme://host:port, without a path"),
            ));
        }
        Ok(OriginUrl { authority })
    }
}

impl Config {
    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "config".into(),
            message: e.to_string().trim_end().replace('\n', " "),
        })
    }

    /// Checks everything that parsing cannot: names the field and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.origin.is_none() && self.hosts.is_empty() {
            return Err(invalid(
                "origin",
                "no origin configured: set origin = \"http://host:port\" (or --origin), or [hosts]",
            ));
        }
        if let Some(o) = &self.origin {
            OriginUrl::parse("origin", o)?;
        }
        for url in self.hosts.values() {
            OriginUrl::parse("hosts", url)?;
        }
        if self.listen == self.admin_listen && self.listen.port() != 0 {
            return Err(invalid(
                "admin_listen",
                format!("{} is also the public listener", self.admin_listen),
            ));
        }
        let c = &self.cache;
        if c.capacity == 0 {
            return Err(invalid("cache.capacity", "must be more than 0 bytes"));
        }
        if c.max_object_size == 0 || c.max_object_size > c.capacity {
            return Err(invalid(
                "cache.max_object_size",
                format!(
                    "{} must be between 1 byte and cache.capacity ({})",
                    c.max_object_size, c.capacity
                ),
            ));
        }
        if c.max_object_size > u64::from(u32::MAX) {
            return Err(invalid(
                "cache.max_object_size",
                format!(
                    "{} is more than the 4 GiB an entry can weigh",
                    c.max_object_size
                ),
            ));
        }
        if let Some(bad) = c.statuses.iter().find(|s| !(100..=599).contains(*s)) {
            return Err(invalid(
                "cache.statuses",
                format!("{bad} is not an HTTP status"),
            ));
        }
        self.admission.build()?;
        if self.limits.max_connections == 0 {
            return Err(invalid("limits.max_connections", "must be at least 1"));
        }
        if self.limits.max_header_bytes < 8192 {
            return Err(invalid(
                "limits.max_header_bytes",
                format!(
                    "{} is below the 8192 bytes HTTP/1 parsing needs",
                    self.limits.max_header_bytes
                ),
            ));
        }
        self.cache.forwarded_request_headers()?;
        let l = &self.limits;
        if l.max_origin_header_bytes < 8192 {
            return Err(invalid(
                "limits.max_origin_header_bytes",
                format!(
                    "{} is below the 8192 bytes HTTP/1 parsing needs",
                    l.max_origin_header_bytes
                ),
            ));
        }
        if l.stream_buffer_bytes == 0 || l.stream_buffer_bytes > u32::MAX as usize {
            return Err(invalid(
                "limits.stream_buffer_bytes",
                format!("{} must be between 1 byte and 4 GiB", l.stream_buffer_bytes),
            ));
        }
        if l.store_buffer_bytes < c.max_object_size {
            return Err(invalid(
                "limits.store_buffer_bytes",
                format!(
                    "{} is less than cache.max_object_size ({}): the largest object could never be stored",
                    l.store_buffer_bytes, c.max_object_size
                ),
            ));
        }
        if !matches!(
            self.log.level.as_str(),
            "error" | "warn" | "info" | "debug" | "trace"
        ) {
            return Err(invalid(
                "log.level",
                format!(
                    "{:?}: expected error, warn, info, debug or trace",
                    self.log.level
                ),
            ));
        }
        Ok(())
    }

    /// The store rules of `[cache]`.
    pub fn store_rules(&self) -> StoreRules {
        StoreRules {
            statuses: self.cache.statuses.clone(),
            default_ttl: self.cache.default_ttl,
            store_set_cookie: self.cache.store_set_cookie,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_file_parses_and_validates() {
        let text = include_str!("../secondhit.example.toml");
        let c = Config::from_toml(text).unwrap();
        c.validate().unwrap();
        assert_eq!(c.cache.capacity, 256 << 20);
        assert_eq!(c.admission.window, Some(Duration::from_secs(3600)));
        assert_eq!(c.hosts.len(), 1);
    }

    #[test]
    fn defaults_are_simulate_defaults() {
        let c = Config {
            origin: Some("http://127.0.0.1:1".into()),
            ..Config::default()
        };
        c.validate().unwrap();
        let (policy, settings) = c.admission.build().unwrap();
        assert_eq!(policy, Policy::SecondHit);
        assert_eq!(settings, Settings::default());
        assert_eq!(c.cache.eviction, Eviction::Lru);
    }

    #[test]
    fn errors_name_field_and_value() {
        let e = Config::from_toml("listen = \"nowhere\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("listen") && e.contains("line 1"), "{e}");
        let e = Config::from_toml("[cache]\ncapacity = \"12 parsecs\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("parsecs"), "{e}");
        let e = Config::from_toml("colour = 1").unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
        let check = |toml: &str| {
            Config::from_toml(toml)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string()
        };
        assert!(check("").contains("no origin configured"));
        let e = check("origin = \"https://x:1\"");
        assert!(e.contains("origin") && e.contains("only http://"), "{e}");
        let e = check("origin = \"http://x:1/path\"");
        assert!(e.contains("without a path"), "{e}");
        let e = check("origin = \"http://x:1\"\n[admission]\npolicy = \"third-hit\"");
        assert!(
            e.contains("admission.policy") && e.contains("third-hit"),
            "{e}"
        );
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
}
