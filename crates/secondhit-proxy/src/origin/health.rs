//! Active health probes (`[origins.NAME.health]`): one task per server of a group that asks for
//! probes, each asking `GET path` every `interval` through a client of its own (the origins'
//! TLS trust), and feeding the answer to the server's health (`ServerHealth::probed`): `fall`
//! failures in a row take it down, `rise` successes bring it back. A state change is logged
//! once and counted. A task holds its group weakly: when a reload replaces the group (and no
//! request holds the old settings any more) the task ends, and the new group's tasks go on
//! with the same health.

use super::group::Group;
use crate::body::{empty, ProxyBody};
use crate::config::HealthConfig;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::{Arc, Weak};

/// The probes' client: no pooling (each probe a fresh connection, as a health check should be).
pub type ProbeClient = Client<HttpsConnector<HttpConnector>, ProxyBody>;

/// A client for probes over `connector`.
pub fn client(connector: HttpsConnector<HttpConnector>) -> ProbeClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(connector)
}

/// Whether `status` passes the probe.
pub fn passes(h: &HealthConfig, status: u16) -> bool {
    if h.expect.is_empty() {
        (200..400).contains(&status)
    } else {
        h.expect.contains(&status)
    }
}

/// Starts the probes of every server of `group` on the current runtime (nothing without a
/// runtime or without `[health]`).
pub fn start(group: &Arc<Group>, client: &ProbeClient) {
    let Some(h) = group.health.clone() else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    for i in 0..group.servers.len() {
        let weak = Arc::downgrade(group);
        let client = client.clone();
        let h = h.clone();
        runtime.spawn(async move { probe_loop(weak, i, h, client).await });
    }
}

async fn probe_loop(group: Weak<Group>, i: usize, h: HealthConfig, client: ProbeClient) {
    let mut tick = tokio::time::interval(h.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(g) = group.upgrade() else { return };
        let server = &g.servers[i];
        let uri = format!("{}{}", server.url, h.path);
        let Ok(uri) = uri.parse::<http::Uri>() else {
            return;
        };
        let mut request = http::Request::new(empty());
        *request.uri_mut() = uri;
        request.headers_mut().insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static("secondhit-probe"),
        );
        let answer = tokio::time::timeout(h.timeout, client.request(request)).await;
        let (ok, why) = match answer {
            Ok(Ok(r)) => (
                passes(&h, r.status().as_u16()),
                format!("status {}", r.status().as_u16()),
            ),
            Ok(Err(e)) => (false, e.to_string()),
            Err(_) => (false, format!("no answer within {:?}", h.timeout)),
        };
        match server.health.probed(ok, h.rise, h.fall) {
            Some(true) => {
                tracing::warn!(group = %g.name, server = %server.url, "origin server up: probes pass again")
            }
            Some(false) => {
                tracing::warn!(group = %g.name, server = %server.url, why, "origin server down: probes fail")
            }
            None => {}
        }
        // The group is not held between probes: a reload can drop it.
        drop(g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_statuses_or_any_2xx_3xx() {
        let any = HealthConfig::default();
        assert!(passes(&any, 200) && passes(&any, 301) && !passes(&any, 404) && !passes(&any, 503));
        let only = HealthConfig {
            expect: vec![204],
            ..HealthConfig::default()
        };
        assert!(passes(&only, 204) && !passes(&only, 200));
    }
}
