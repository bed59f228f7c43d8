//! Where requests go: `origin` and `[hosts]` name one server's URL (a group of one) or a group
//! of `[origins.NAME]`: several servers with weights and backups, how a request picks one
//! (`balance`), when a failed request is tried on another (`retry_on`, `tries`,
//! `try_timeout`), and how a server that fails is taken out and brought back (`[...outlier]`,
//! passive; `[...health]`, active probes). A group of parent caches (a shield tier) balances
//! by `hash` and names the group behind it in `fallback`.
//!
//! ```toml
//! origin = "media"                      # or a URL: a group of one
//! [origins.media]
//! servers = ["http://10.0.0.1:8080", { url = "http://10.0.0.2:8080", weight = 2 },
//!            { url = "http://10.0.0.9:8080", backup = true }]
//! balance = "round-robin"               # or "least-outstanding", "hash" (on the cache key)
//! retry_on = ["connect", "timeout", "502", "503", "504"]
//! [origins.media.health]
//! path = "/healthz"
//! interval = "2s"
//! ```

use super::de::{de_duration, de_parse};
use super::OriginUrl;
use serde::{Deserialize, Deserializer};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// What `origin` or a `[hosts]` entry names: one server's URL (a group of one, with the
/// defaults), or a group of `[origins]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OriginRef {
    /// `http://host:port` or `https://host:port`.
    Url(OriginUrl),
    /// The name of an `[origins.NAME]` group.
    Group(String),
}

/// Why a name is not a group's name.
fn check_group_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is neither an origin URL (http://host:port) nor a group name (1 to 64 letters, digits, '-' or '_')"
        ))
    }
}

impl FromStr for OriginRef {
    type Err = String;

    /// A URL when it has a scheme (`://`), else a group's name.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.contains("://") {
            return s
                .parse::<OriginUrl>()
                .map(OriginRef::Url)
                .map_err(|e| e.to_string());
        }
        check_group_name(s)?;
        Ok(OriginRef::Group(s.to_string()))
    }
}

impl From<OriginUrl> for OriginRef {
    fn from(url: OriginUrl) -> Self {
        OriginRef::Url(url)
    }
}

impl fmt::Display for OriginRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OriginRef::Url(u) => u.fmt(f),
            OriginRef::Group(g) => f.write_str(g),
        }
    }
}

/// How a request picks a server of its group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Balance {
    /// Smooth weighted round-robin (nginx's): each server in turn, as often as its weight.
    #[default]
    RoundRobin,
    /// The server with the fewest requests under way for its weight (Envoy's least request).
    LeastOutstanding,
    /// Consistent hash of the cache key (160 ring points per unit of weight, as nginx's `hash
    /// ... consistent`): each key always goes to one server while it is up, so a parent cache's
    /// filter sees both sightings of an object; a server taken out moves only its own keys.
    Hash,
}

impl FromStr for Balance {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "round-robin" => Ok(Balance::RoundRobin),
            "least-outstanding" => Ok(Balance::LeastOutstanding),
            "hash" => Ok(Balance::Hash),
            other => Err(format!(
                "balance {other:?}: expected round-robin, least-outstanding or hash"
            )),
        }
    }
}

impl Balance {
    /// The name in the configuration.
    pub const fn as_str(self) -> &'static str {
        match self {
            Balance::RoundRobin => "round-robin",
            Balance::LeastOutstanding => "least-outstanding",
            Balance::Hash => "hash",
        }
    }
}

/// A failure after which a GET or HEAD that has sent the client nothing is tried on another
/// server of the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryOn {
    /// The connection could not be made (refused, reset, TLS failed).
    Connect,
    /// No response head within `timeouts.first_byte`.
    Timeout,
    /// A response head with this status (502, 503 or 504).
    Status(u16),
}

impl FromStr for RetryOn {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "connect" => Ok(RetryOn::Connect),
            "timeout" => Ok(RetryOn::Timeout),
            "502" => Ok(RetryOn::Status(502)),
            "503" => Ok(RetryOn::Status(503)),
            "504" => Ok(RetryOn::Status(504)),
            other => Err(format!(
                "retry_on {other:?}: expected connect, timeout, 502, 503 or 504"
            )),
        }
    }
}

/// One server of a group: a URL, or `{ url, weight, backup }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// Where it is.
    pub url: OriginUrl,
    /// Its share of the group's requests against the others' (1 to 100).
    pub weight: u32,
    /// Used only when no server that is not a backup is up.
    pub backup: bool,
}

impl<'de> Deserialize<'de> for ServerConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Spec {
            Url(String),
            Full(Full),
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            url: String,
            #[serde(default = "one")]
            weight: u32,
            #[serde(default)]
            backup: bool,
        }
        fn one() -> u32 {
            1
        }
        let (url, weight, backup) = match Spec::deserialize(d)? {
            Spec::Url(u) => (u, 1, false),
            Spec::Full(f) => (f.url, f.weight, f.backup),
        };
        let url: OriginUrl = url.parse().map_err(serde::de::Error::custom)?;
        Ok(ServerConfig {
            url,
            weight,
            backup,
        })
    }
}

/// `[origins.NAME.outlier]`: passive health. A server whose requests fail `consecutive` times
/// in a row (a connection error, a timeout, or a 5xx) is ejected for `ejection`, doubled at
/// each ejection that follows its return, up to `max_ejection` (Envoy's outlier detection).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutlierConfig {
    /// Failures in a row that eject a server (0: never).
    pub consecutive: u32,
    /// The first ejection's length.
    #[serde(deserialize_with = "de_duration")]
    pub ejection: Duration,
    /// The longest ejection.
    #[serde(deserialize_with = "de_duration")]
    pub max_ejection: Duration,
}

impl Default for OutlierConfig {
    fn default() -> Self {
        OutlierConfig {
            consecutive: 5,
            ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(300),
        }
    }
}

/// `[origins.NAME.health]`: active probes (HAProxy's `check inter rise fall`). Every
/// `interval`, each server is asked `GET path`; an answer within `timeout` with one of the
/// `expect` statuses is a success. `fall` failures in a row take a server down, `rise`
/// successes bring it back up.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// The path asked.
    pub path: String,
    /// Between probes of a server.
    #[serde(deserialize_with = "de_duration")]
    pub interval: Duration,
    /// How long a probe waits for its answer's head.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Statuses that pass (empty: any 2xx or 3xx).
    pub expect: Vec<u16>,
    /// Successes in a row that bring a server back up.
    pub rise: u32,
    /// Failures in a row that take a server down.
    pub fall: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            path: "/".into(),
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            expect: Vec::new(),
            rise: 2,
            fall: 3,
        }
    }
}

/// `[origins.NAME]`: a group of servers.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupConfig {
    /// Its servers (at least one that is not a backup; at most 64).
    pub servers: Vec<ServerConfig>,
    /// How a request picks one.
    #[serde(deserialize_with = "de_parse")]
    pub balance: Balance,
    /// What makes a GET or HEAD that has sent nothing to its client go to another server.
    #[serde(deserialize_with = "de_retry_on")]
    pub retry_on: Vec<RetryOn>,
    /// Servers tried for one request, the first included (nginx's `proxy_next_upstream_tries`).
    pub tries: u32,
    /// The time all tries of a request may take together (nginx's
    /// `proxy_next_upstream_timeout`): no retry starts after it.
    #[serde(deserialize_with = "de_duration")]
    pub try_timeout: Duration,
    /// The most of the group's servers passive health may eject at once, in per cent (Envoy's
    /// `max_ejection_percent`): a group whose servers all fail keeps serving from them.
    pub max_ejected_percent: u32,
    /// Passive health.
    pub outlier: OutlierConfig,
    /// Active probes (none unless given).
    pub health: Option<HealthConfig>,
    /// For a group of parent caches (a shield tier): the group a request goes to when no
    /// parent is up or the parents failed it (Traffic Server's "go direct").
    pub fallback: Option<String>,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            servers: Vec::new(),
            balance: Balance::RoundRobin,
            retry_on: vec![
                RetryOn::Connect,
                RetryOn::Timeout,
                RetryOn::Status(502),
                RetryOn::Status(503),
                RetryOn::Status(504),
            ],
            tries: 3,
            try_timeout: Duration::from_secs(30),
            max_ejected_percent: 50,
            outlier: OutlierConfig::default(),
            health: None,
            fallback: None,
        }
    }
}

impl GroupConfig {
    /// A group of one server with the defaults: what a plain URL is.
    pub fn of_one(url: OriginUrl) -> GroupConfig {
        Self::of_equals(vec![url])
    }

    /// A group of equal-weight servers with the defaults (`serve --origin A --origin B`).
    pub fn of_equals(urls: Vec<OriginUrl>) -> GroupConfig {
        GroupConfig {
            servers: urls
                .into_iter()
                .map(|url| ServerConfig {
                    url,
                    weight: 1,
                    backup: false,
                })
                .collect(),
            ..GroupConfig::default()
        }
    }

    /// The most servers a group may have.
    pub const MAX_SERVERS: usize = 64;

    /// Checks the group, naming the field (`origins.NAME.FIELD`) and the value.
    pub fn check(&self, name: &str) -> Result<(), String> {
        let n = self.servers.len();
        if n == 0 || n > Self::MAX_SERVERS {
            return Err(format!(
                "origins.{name}.servers: {n} servers; give 1 to {}",
                Self::MAX_SERVERS
            ));
        }
        if self.servers.iter().all(|s| s.backup) {
            return Err(format!(
                "origins.{name}.servers: every server is a backup; at least one must not be"
            ));
        }
        for s in &self.servers {
            if !(1..=100).contains(&s.weight) {
                return Err(format!(
                    "origins.{name}.servers: {} has weight {}; give 1 to 100",
                    s.url, s.weight
                ));
            }
        }
        for (i, s) in self.servers.iter().enumerate() {
            if self.servers[..i].iter().any(|o| o.url == s.url) {
                return Err(format!("origins.{name}.servers: {} is listed twice", s.url));
            }
        }
        if !(1..=10).contains(&self.tries) {
            return Err(format!(
                "origins.{name}.tries: {}; give 1 to 10",
                self.tries
            ));
        }
        if self.try_timeout.is_zero() {
            return Err(format!("origins.{name}.try_timeout: must be more than 0s"));
        }
        if self.max_ejected_percent > 100 {
            return Err(format!(
                "origins.{name}.max_ejected_percent: {}; give 0 to 100",
                self.max_ejected_percent
            ));
        }
        let o = &self.outlier;
        if o.consecutive > 0 && (o.ejection.is_zero() || o.max_ejection < o.ejection) {
            return Err(format!(
                "origins.{name}.outlier: ejection must be more than 0s and at most max_ejection"
            ));
        }
        if let Some(h) = &self.health {
            if !h.path.starts_with('/') || h.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
                return Err(format!(
                    "origins.{name}.health.path: {:?} must be a path starting with /, without spaces",
                    h.path
                ));
            }
            if h.interval.is_zero() || h.timeout.is_zero() || h.timeout > h.interval {
                return Err(format!(
                    "origins.{name}.health: interval and timeout must be more than 0s, timeout at most interval"
                ));
            }
            if h.rise == 0 || h.fall == 0 {
                return Err(format!(
                    "origins.{name}.health: rise and fall must be at least 1"
                ));
            }
            if let Some(bad) = h.expect.iter().find(|s| !(100..=599).contains(*s)) {
                return Err(format!(
                    "origins.{name}.health.expect: {bad} is not an HTTP status"
                ));
            }
        }
        Ok(())
    }
}

/// `retry_on`: names, each once.
fn de_retry_on<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<RetryOn>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    let mut out = Vec::new();
    for n in &names {
        let r: RetryOn = n.parse().map_err(serde::de::Error::custom)?;
        if !out.contains(&r) {
            out.push(r);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_urls_or_group_names() {
        assert!(matches!(
            "http://127.0.0.1:80".parse::<OriginRef>(),
            Ok(OriginRef::Url(_))
        ));
        assert_eq!(
            "media_1".parse::<OriginRef>(),
            Ok(OriginRef::Group("media_1".into()))
        );
        for bad in [
            "",
            "a b",
            "ftp://x",
            "http://x/path",
            "x".repeat(65).as_str(),
        ] {
            assert!(bad.parse::<OriginRef>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_group_reads_from_toml_with_its_defaults() {
        let g: GroupConfig = toml::from_str(
            r#"servers = ["http://a:1", { url = "http://b:1", weight = 3 }, { url = "http://c:1", backup = true }]
               balance = "hash"
               retry_on = ["connect", "503", "connect"]
               [health]
               path = "/ping""#,
        )
        .unwrap();
        assert_eq!(g.servers.len(), 3);
        assert_eq!((g.servers[1].weight, g.servers[2].backup), (3, true));
        assert_eq!(g.balance, Balance::Hash);
        assert_eq!(g.retry_on, [RetryOn::Connect, RetryOn::Status(503)]);
        assert_eq!(g.health.as_ref().unwrap().rise, 2);
        assert!(g.check("m").is_ok());
        let bad = |t: &str| toml::from_str::<GroupConfig>(t).map(|g| g.check("m"));
        assert!(bad(r#"servers = ["http://a:1"]
                      balance = "random""#)
        .is_err());
        assert!(bad(r#"servers = [{ url = "http://a:1", backup = true }]"#)
            .unwrap()
            .unwrap_err()
            .contains("every server is a backup"));
        assert!(bad(r#"servers = [{ url = "http://a:1", weight = 0 }]"#)
            .unwrap()
            .unwrap_err()
            .contains("weight 0"));
        assert!(bad(r#"servers = ["http://a:1", "http://a:1"]"#)
            .unwrap()
            .unwrap_err()
            .contains("listed twice"));
        assert!(bad(r#"servers = ["http://a:1"]
                      retry_on = ["500"]"#)
        .is_err());
    }
}
