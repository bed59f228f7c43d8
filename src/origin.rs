//! The origins: which configured origin serves a request, and a pooled keep-alive client to
//! them. Only configured origins are ever contacted.

use crate::body::ProxyBody;
use crate::config::Config;
use crate::proxy::authority::Host;
use http::uri::Authority;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::collections::HashMap;

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
}

impl OriginError {
    /// Every kind, for metrics.
    pub const ALL: [OriginError; 5] = [
        OriginError::Connect,
        OriginError::Timeout,
        OriginError::Other,
        OriginError::Body,
        OriginError::HeadersTooLarge,
    ];
    /// Label for metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            OriginError::Connect => "connect",
            OriginError::Timeout => "timeout",
            OriginError::Other => "other",
            OriginError::Body => "body",
            OriginError::HeadersTooLarge => "headers-too-large",
        }
    }
}

/// The configured origins and a pooled client to them.
pub struct Origins {
    default: Option<Authority>,
    hosts: HashMap<String, Authority>,
    client: Client<HttpConnector, ProxyBody>,
}

impl Origins {
    /// Builds the routing table and the client from a validated configuration: connect timeout,
    /// idle pooled connections closed after `origin_idle` (the pool needs a timer for that), and
    /// the client's read buffer capped at `limits.max_origin_header_bytes`, which bounds both an
    /// origin's header block and the size of each body chunk read from it.
    pub fn new(config: &Config) -> Origins {
        let default = config.origin.as_ref().map(|o| o.authority.clone());
        // Keys are normalised hosts already (config::de_hosts).
        let hosts: HashMap<String, Authority> = config
            .hosts
            .iter()
            .map(|(host, url)| (host.clone(), url.authority.clone()))
            .collect();
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.timeouts.connect));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(config.timeouts.origin_idle)
            .pool_timer(TokioTimer::new())
            .http1_max_buf_size(config.limits.max_origin_header_bytes)
            .build(connector);
        Origins {
            default,
            hosts,
            client,
        }
    }

    /// The origin for a request's host: a `[hosts]` entry matching `host:port` or `host`, else
    /// the default origin, unless the request came in absolute form (a proxy-style request for
    /// some other site), which only a `[hosts]` entry may serve.
    pub fn route(&self, host: &Host, absolute_form: bool) -> Option<&Authority> {
        if let Some(o) = self
            .hosts
            .get(host.as_str())
            .or_else(|| self.hosts.get(host.name()))
        {
            return Some(o);
        }
        if absolute_form {
            return None;
        }
        self.default.as_ref()
    }

    /// The pooled client.
    pub fn client(&self) -> &Client<HttpConnector, ProxyBody> {
        &self.client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(toml: &str) -> Origins {
        let c = Config::from_toml(toml).unwrap();
        Origins::new(&c)
    }

    #[tokio::test]
    async fn routes_only_to_configured_origins() {
        let o = origins("origin = \"http://127.0.0.1:1000\"\n[hosts]\n\"img.example\" = \"http://127.0.0.1:2000\"");
        let r = |a: &str, abs: bool| {
            o.route(&Host::parse(a.as_bytes(), 80).unwrap(), abs)
                .map(|x| x.to_string())
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
