//! Phase 5 across a group of origin servers: a server for each attempt ([`Group::pick`]), the
//! failures after which a request goes to another (`retry_on`, within `tries` and
//! `try_timeout`), passive health fed with every attempt, and, for a group of parent caches,
//! the group behind it when no parent is left.
//!
//! Only a request whose attempt can be made again is ever retried: GET and HEAD without a
//! body, before anything was sent to the client (an answer's head is what ends an attempt, and
//! nothing reaches the client before it). A request with a body is sent once. A coalesced
//! request's followers wait for its leader, so they follow its retries.

use super::fetch::FetchError;
use super::{Live, Proxy};
use crate::body::{empty, ProxyBody};
use crate::config::OriginUrl;
use crate::origin::group::{Failure, Tried};
use crate::origin::{OriginBody, OriginError, SendError};
use http::{Request, Response};
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// The kind of a failed attempt, as a server's health counts it.
fn failure_of(e: &FetchError) -> Option<Failure> {
    match e {
        FetchError::Origin(OriginError::Connect | OriginError::Tls | OriginError::Other) => {
            Some(Failure::Connect)
        }
        FetchError::Origin(OriginError::Timeout) => Some(Failure::Timeout),
        FetchError::Origin(
            OriginError::HeadersTooLarge | OriginError::Body | OriginError::Unavailable,
        ) => Some(Failure::Other),
        // The client's request body broke off: not the server's doing.
        FetchError::ClientBody | FetchError::ClientBodyTimeout => None,
    }
}

/// A copy of a request without a body, to send it again.
pub(super) fn bodyless_copy(r: &Request<ProxyBody>) -> Request<ProxyBody> {
    let mut out = Request::new(empty());
    *out.method_mut() = r.method().clone();
    *out.uri_mut() = r.uri().clone();
    *out.headers_mut() = r.headers().clone();
    out
}

impl Proxy {
    /// A bodyless request built once (`request`), sent to the target's group through the
    /// origins' client, a copy for each attempt.
    pub(super) async fn get_upstream(
        &self,
        request: &Request<ProxyBody>,
        target: &super::check::Target,
        live: &Live,
    ) -> Result<Response<OriginBody>, FetchError> {
        let origins = &live.origins;
        self.upstream(target.id, target.origin, true, None, live, |server| {
            let copy = bodyless_copy(request);
            async move { origins.send(server, copy).await }
        })
        .await
    }

    /// Sends a request to its target's group: `send(server)` makes one attempt on a server;
    /// with `resend`, an attempt that failed as `retry_on` says is made again on another
    /// server. The first answer that is not to be retried comes back, or the last failure, or
    /// `Unavailable` (503) when no server of the group (nor of the groups behind it) was
    /// available. `upload_failed` is set if the client's body broke off on the way.
    pub(super) async fn upstream<'l, F, Fut>(
        &self,
        key: u64,
        group: crate::origin::GroupId,
        resend: bool,
        upload_failed: Option<&AtomicBool>,
        live: &'l Live,
        mut send: F,
    ) -> Result<Response<OriginBody>, FetchError>
    where
        F: FnMut(&'l OriginUrl) -> Fut,
        Fut: Future<Output = Result<Response<OriginBody>, SendError>>,
    {
        let started = Instant::now();
        let mut g = live.origins.group(group);
        let mut tried: Tried = 0;
        let mut attempts = 0;
        // Each group in the fallback chain at most once (validation refuses cycles).
        let mut hops = live.origins.groups().len();
        let mut last = None;
        loop {
            let may = attempts == 0
                || (resend && attempts < g.tries && started.elapsed() < g.try_timeout);
            let pick = if may {
                g.pick(key, tried, self.clock.now())
            } else {
                None
            };
            let Some(i) = pick else {
                // This group is done: the group behind it, if any, gets the request.
                match g.fallback {
                    Some(f) if hops > 0 && (attempts == 0 || resend) => {
                        hops -= 1;
                        g = live.origins.group(f);
                        tried = 0;
                        attempts = 0;
                        continue;
                    }
                    _ => {
                        return last.unwrap_or(Err(FetchError::Origin(OriginError::Unavailable)));
                    }
                }
            };
            // The failure this attempt replaces counts as the origin's (the last one counts
            // when it is answered).
            match &last {
                Some(Err(e)) => {
                    self.count_fetch_failure(*e);
                    self.metrics.origin_retry();
                }
                Some(Ok(_)) => self.metrics.origin_retry(),
                None => {}
            }
            attempts += 1;
            tried |= 1 << i;
            let server = &g.servers[i];
            g.begin(i);
            let t0 = Instant::now();
            let result = self
                .fetch(send(&server.url), &server.url, upload_failed, live)
                .await;
            let (failure, status) = match &result {
                Ok(r) => (
                    r.status().is_server_error().then_some(Failure::Status5xx),
                    Some(r.status().as_u16()),
                ),
                Err(e) => (failure_of(e), None),
            };
            g.finish(i, failure, t0.elapsed(), self.clock.now());
            if !(resend && failure.is_some() && g.retries_on(failure, status)) {
                return result;
            }
            tracing::info!(group = %g.name, server = %server.url, status, failure = failure.map(Failure::as_str), "origin attempt failed; another server is tried if one is left");
            // Its answer is dropped unread (the connection is closed, not reused).
            last = Some(result);
        }
    }
}
