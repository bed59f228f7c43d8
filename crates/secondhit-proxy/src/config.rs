//! `serve`'s configuration, parsed once into types: read from TOML (every field has a default),
//! overridden by the command line (the `secondhit` binary's flags), then checked across fields by
//! [`Config::validate`], which yields the [`ValidConfig`] the server is built from. A value that
//! cannot be its type (a policy name, a size, a host, an origin URL) is refused while parsing,
//! in one line naming the file, the line, the field and the value. See `secondhit.example.toml`.

//!
//! Layout:
//! - this file: [`Config`], its errors, [`OriginUrl`] and [`ValidConfig`];
//! - `sections`: one struct per TOML table (`[cache]`, `[admission]`, `[timeouts]`, ...);
//! - `origins`: where requests go: [`OriginRef`] and the `[origins.NAME]` groups;
//! - `de`: the serde helpers that parse a field's string into its type;
//! - `validate`: [`Config::validate`], one check per section.

mod de;
mod origins;
mod sections;
mod validate;

pub use de::parse_moka_eviction;
pub use origins::{
    Balance, GroupConfig, HealthConfig, OriginRef, OutlierConfig, RetryOn, ServerConfig,
};
pub use sections::{
    AdmissionConfig, CacheConfig, DiskConfig, LabConfig, Limits, LogConfig, LogLevel, SniConfig,
    Timeouts, TlsConfig,
};

use crate::http_cache::StoreRules;
use de::{de_duration, de_hosts, de_opt_origin};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
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

/// The whole configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address of the public listener.
    pub listen: SocketAddr,
    /// Address of the admin listener (`/metrics`, `/healthz`, purge). Keep it on loopback.
    pub admin_listen: SocketAddr,
    /// The default origin for requests whose Host has no entry in `hosts`: `http://host:port`
    /// (a group of one) or the name of an `[origins]` group.
    #[serde(deserialize_with = "de_opt_origin")]
    pub origin: Option<OriginRef>,
    /// Per-Host origins: `"img.example.com" = "http://10.0.0.5:8080"` (or a group's name),
    /// keyed by the normalised host (`IMG.example.com.` and `img.example.com:80` are
    /// `img.example.com`).
    #[serde(deserialize_with = "de_hosts")]
    pub hosts: BTreeMap<String, OriginRef>,
    /// Groups of origin servers by name (`[origins.NAME]`), which `origin` and `hosts` may name.
    pub origins: BTreeMap<String, GroupConfig>,
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
            origins: BTreeMap::new(),
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

    /// Every group requests may go to, by name: the `[origins]` groups, and a group of one for
    /// each URL `origin` or `hosts` names (named by the URL). In name order.
    pub fn groups(&self) -> BTreeMap<String, GroupConfig> {
        let mut all = self.origins.clone();
        for r in self.origin.iter().chain(self.hosts.values()) {
            if let OriginRef::Url(url) = r {
                all.entry(url.to_string())
                    .or_insert_with(|| GroupConfig::of_one(url.clone()));
            }
        }
        all
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
    use crate::admission::{Policy, Settings};
    use crate::store::Eviction;

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
    fn accept_encoding_lists_each_coding_once_in_lower_case() {
        let with = |list: &str| {
            Config::from_toml(&format!(
                "origin = \"http://x:1\"\n[cache]\naccept_encoding = {list}"
            ))
            .unwrap()
            .validate()
        };
        assert_eq!(
            with("[\"zstd\", \"gzip\"]").unwrap().cache.accept_encoding,
            ["zstd", "gzip"]
        );
        assert!(with("[]").unwrap().cache.accept_encoding.is_empty());
        for bad in [
            "\"GZIP\"",
            "\"identity\"",
            "\"gzip\", \"gzip\"",
            "\"\"",
            "\"g zip\"",
        ] {
            let e = with(&format!("[{bad}]")).unwrap_err().to_string();
            assert!(e.contains("cache.accept_encoding"), "{bad}: {e}");
        }
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
        assert!(matches!(
            Config::from_toml("origin = \"https://x:1\"")
                .unwrap()
                .origin,
            Some(OriginRef::Url(OriginUrl { tls: true, .. }))
        ));
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
