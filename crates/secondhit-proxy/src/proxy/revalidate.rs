//! Stored objects that need the origin's word (RFC 9111 §4.3, RFC 5861): revalidation with a
//! conditional request (a 304 refreshes the object's headers and freshness; a full response
//! replaces it), serving stale while refreshing in the background or when the origin fails,
//! invalidation after unsafe requests (§4.4), and purges (by URL, prefix or tag; hard or soft).
//!
//! A revalidation does not ask the admission policy (the object was admitted) and a 304 is not
//! a body write: it is counted in `secondhit_cache_refreshes_total`, not in the writes.

use super::authority::Host;
use super::cached::{CachedObject, Entry, Sliced};
use super::check::Target;
use super::classify::Intent;
use super::coalesce::{Fetched, Leader, Role};
use super::fetch::upstream_request;
use super::outcome::{Fwd, Outcome, Refusal};
use super::pump::Tiers;
use super::{hit, Answer, Exchange, Live, Proxy, PurgeError, Sight};
use crate::body::empty;
use crate::http_cache::{
    cache_key, storability, strip_hop_by_hop, updated_headers, validates, vary_fields, Credentials,
    NoStore,
};
use crate::origin::OriginBody;
use http::header::{self, HeaderMap};
use http::request::Parts;
use http::{Method, Response, StatusCode, Uri};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The request fields that make a request conditional or partial: replaced by the cache's own
/// validators when it revalidates a stored object (the client's are answered from the result).
const CLIENT_CONDITIONALS: [header::HeaderName; 6] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
    header::RANGE,
];

/// The headers of a conditional request for `stored` (RFC 9111 §4.3.1): the client's
/// headers without its own conditionals, plus `If-None-Match` from the stored `ETag` and
/// `If-Modified-Since` from the stored `Last-Modified`. A stored response varies only on fields
/// whose values matched this request's, so the selecting fields sent are the stored request's.
pub fn conditional_headers(request: &HeaderMap, stored: &HeaderMap) -> HeaderMap {
    let mut h = request.clone();
    strip_client_conditionals(&mut h);
    if let Some(etag) = stored.get(header::ETAG) {
        h.insert(header::IF_NONE_MATCH, etag.clone());
    }
    if let Some(lm) = stored.get(header::LAST_MODIFIED) {
        h.insert(header::IF_MODIFIED_SINCE, lm.clone());
    }
    h
}

/// The request fields a fetch made on behalf of a stored entry sends (a background refresh):
/// the triggering client's, less its credentials (`Authorization`, `Cookie`), since the answer
/// is for everyone. A credential the stored response varies on stays: that variant is keyed on
/// its value and serves only clients that send the same.
pub fn on_behalf_of_entry(request: &HeaderMap, stored: &HeaderMap) -> HeaderMap {
    let mut h = request.clone();
    let varies = vary_fields(stored);
    for name in [header::AUTHORIZATION, header::COOKIE] {
        if !varies.contains(&name) {
            h.remove(name);
        }
    }
    h
}

/// Whether a request is neither conditional nor partial: answered with the whole response.
pub fn is_plain(headers: &HeaderMap) -> bool {
    !CLIENT_CONDITIONALS.iter().any(|n| headers.contains_key(n))
}

/// Removes the fields that make a request conditional or partial.
pub fn strip_client_conditionals(headers: &mut HeaderMap) {
    for name in CLIENT_CONDITIONALS {
        headers.remove(name);
    }
}

/// The path of `location` (a `Location` or `Content-Location` value) if it names the same origin
/// as the request (RFC 9111 §4.4: only then may it be invalidated).
pub fn same_origin_path(
    location: &str,
    host: &Host,
    scheme: &str,
    default_port: u16,
) -> Option<String> {
    if location.starts_with('/') && !location.starts_with("//") {
        return Some(location.to_string());
    }
    let uri: Uri = location.parse().ok()?;
    if uri.scheme_str() != Some(scheme) {
        return None;
    }
    let other = Host::parse(uri.authority()?.as_str().as_bytes(), default_port).ok()?;
    (other == *host).then(|| uri.path_and_query().map_or("/", |p| p.as_str()).to_string())
}

/// Which stored objects a purge removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PurgeTarget {
    /// One URL (`http://host/path?query`), every variant of it.
    Url(String),
    /// Every URL that starts with this one.
    Prefix(String),
    /// Every object carrying this surrogate key (`Surrogate-Key`, `Cache-Tag`).
    Tag(String),
}

impl Proxy {
    /// Revalidates a stored object for a request that may not use it as it is: one conditional
    /// request per key at a time (concurrent requests wait for it), then answers from what came
    /// back.
    pub(super) async fn revalidate(
        self: &Arc<Self>,
        parts: Parts,
        target: &Target,
        client: IpAddr,
        key: &str,
        stored: Arc<CachedObject>,
        live: &Arc<Live>,
    ) -> Answer {
        let leader = match self.lead_or_wait(key, &parts, live).await {
            Ok(leader) => leader,
            Err(collapsed) => return collapsed,
        };
        let headers = conditional_headers(&parts.headers, &stored.headers.to_map());
        let request = match upstream_request(
            Method::GET,
            headers,
            target,
            client,
            empty(),
            &live.forwarded,
        ) {
            Ok(r) => r,
            Err(_) => return self.refuse(Refusal::BadTarget),
        };
        let response = match self.get_upstream(&request, target, live).await {
            Ok(r) => r,
            Err(e) => {
                if stored.may_serve_on_error(self.clock.now()) {
                    self.count_fetch_failure(e);
                    return self.stale(&stored, &parts, true);
                }
                return self.fetch_failed(e);
            }
        };
        let status = response.status();
        if status == StatusCode::NOT_MODIFIED {
            let (mut rparts, _) = response.into_parts();
            strip_hop_by_hop(&mut rparts.headers);
            if validates(&stored.headers.to_map(), &rparts.headers) {
                return self.refreshed(key, &stored, &rparts.headers, &parts, target, leader, live);
            }
            // A 304 for something else than what is stored: nothing to refresh; fetch it whole.
            return self
                .refetch(key, &parts, target, client, leader, live)
                .await;
        }
        if matches!(status.as_u16(), 500 | 502 | 503 | 504)
            && stored.may_serve_on_error(self.clock.now())
        {
            return self.stale(&stored, &parts, true);
        }
        self.replace(response, &parts, target, leader, live).await
    }

    /// One conditional request per key at a time: `Ok(Some)` to lead it, `Ok(None)` to fetch
    /// alone (the leader failed, was too slow, or its object may not answer this request), or
    /// `Err` the leader's refreshed object, for a follower.
    async fn lead_or_wait(
        &self,
        key: &str,
        parts: &Parts,
        live: &Live,
    ) -> Result<Option<Leader>, Answer> {
        let authorized = parts.headers.contains_key(header::AUTHORIZATION);
        match self.inflight.join(key) {
            Role::Leader(l) => Ok(Some(l)),
            Role::Follower(f) => {
                let fetched = f.wait(live.timeouts.coalesce_wait, &parts.headers).await;
                if let Some(f) = fetched.filter(|f| f.object.auth_ok || !authorized) {
                    self.metrics.coalesced();
                    return Err(self.hit(&f.object, parts, Some("collapsed")));
                }
                Ok(None)
            }
        }
    }

    /// A 304 that validates the stored object: refresh it with the 304's fields, hand it to
    /// the waiters if it was stored for everyone, and answer from it.
    #[allow(clippy::too_many_arguments)]
    fn refreshed(
        &self,
        key: &str,
        stored: &Arc<CachedObject>,
        not_modified: &HeaderMap,
        parts: &Parts,
        target: &Target,
        leader: Option<Leader>,
        live: &Live,
    ) -> Answer {
        let credentials = Credentials::of(&parts.headers)
            .forwarded(|n| super::check::Forwarding::new(&Method::GET, &live.forwarded).keeps(n));
        let (refreshed, shared) = self.refresh(key, stored, not_modified, credentials, live);
        // Waiters get the refreshed object only if it was stored for everyone; else the
        // leader is dropped and each fetches for itself.
        if let Some(leader) = leader.filter(|_| shared) {
            leader.complete(Arc::new(Fetched {
                object: Arc::clone(&refreshed),
                primary: target.key.clone(),
                key: key.to_string(),
            }));
        }
        let (response, mut cs) =
            hit::serve(&refreshed, &parts.method, &parts.headers, self.clock.now());
        cs.hit = false;
        cs.fwd = Some(Fwd::Stale);
        cs.fwd_status = Some(304);
        Answer {
            response,
            outcome: Outcome::Revalidated,
            status: cs,
            sight: Sight::Now {
                size: refreshed.body.len() as u64,
                storable: true,
                kept: self.kept(&refreshed, false),
            },
        }
    }

    /// After a 304 that does not validate what is stored: drop the entry and fetch the object
    /// whole (the client's own conditions only), to replace it.
    async fn refetch(
        self: &Arc<Self>,
        key: &str,
        parts: &Parts,
        target: &Target,
        client: IpAddr,
        leader: Option<Leader>,
        live: &Arc<Live>,
    ) -> Answer {
        self.store.load().cache().invalidate(key);
        let request = conditional_headers(&parts.headers, &HeaderMap::new());
        let Ok(request) = upstream_request(
            Method::GET,
            request,
            target,
            client,
            empty(),
            &live.forwarded,
        ) else {
            return self.refuse(Refusal::BadTarget);
        };
        match self.get_upstream(&request, target, live).await {
            Ok(r) => self.replace(r, parts, target, leader, live).await,
            Err(e) => self.fetch_failed(e),
        }
    }

    /// A full response to a revalidation replaces the stored object (no admission: it was
    /// admitted; a body write), or, if it may not be stored, is passed on.
    async fn replace(
        self: &Arc<Self>,
        response: Response<OriginBody>,
        parts: &Parts,
        target: &Target,
        leader: Option<Leader>,
        live: &Arc<Live>,
    ) -> Answer {
        let code = response.status().as_u16();
        let exchange = Exchange {
            intent: Intent::Admitted,
            leader,
            request_headers: parts.headers.clone(),
            credentials: Credentials::of(&parts.headers).forwarded(|n| {
                super::check::Forwarding::new(&Method::GET, &live.forwarded).keeps(n)
            }),
            upstream_head: false,
            client_head: parts.method == Method::HEAD,
            sight: true,
            tiers: Tiers::Memory,
            budget: parts
                .extensions
                .get::<crate::body::ConnectionBudget>()
                .cloned(),
        };
        let mut answer = self.respond(response, target, exchange, live).await;
        answer.status.fwd = Some(Fwd::Stale);
        answer.status.fwd_status = Some(code);
        answer
    }

    /// Refreshes a stored object from a 304 (RFC 9111 §4.3.4): its headers updated, its
    /// freshness computed again from them, the same body; the second value says whether the
    /// refreshed object was stored (for everyone). `credentials`: what the conditional request
    /// carried: a 304 fetched with them may carry fields meant for that client alone, so it
    /// updates the stored object only if the updated headers may be shared under RFC 9111 §3.5
    /// and the cookie rule; otherwise the stored object stays as it was and the refreshed copy
    /// answers only this request. If the updated headers no longer allow storing it at all, it
    /// is dropped from the store and answers only this request.
    fn refresh(
        &self,
        key: &str,
        stored: &CachedObject,
        not_modified: &HeaderMap,
        credentials: Credentials,
        live: &Live,
    ) -> (Arc<CachedObject>, bool) {
        let mut headers = updated_headers(&stored.headers.to_map(), not_modified);
        let now = self.clock.now();
        let freshness = storability(
            stored.status,
            &headers,
            credentials,
            &live.rules,
            SystemTime::now(),
        );
        headers.remove(header::AGE);
        match freshness {
            Ok(f) => {
                let object = Arc::new(CachedObject::new(
                    stored.status,
                    headers,
                    stored.body.clone(),
                    now,
                    &f,
                    live.stale_keep,
                ));
                self.store
                    .load()
                    .insert(key.to_string(), Entry::Object(Arc::clone(&object)));
                self.metrics.refreshed();
                (object, true)
            }
            Err(reason) => {
                // Not shareable as updated for these credentials: the stored object is left
                // alone (it was stored for everyone); any other reason makes it unstorable.
                if !matches!(reason, NoStore::Authorization | NoStore::CookieRequest) {
                    self.store.load().cache().invalidate(key);
                }
                let mut once = stored.expired_at(now);
                once.headers = super::cached::StoredHeaders::new(&headers);
                (Arc::new(once), false)
            }
        }
    }

    /// Starts a background revalidation of a stale object served under
    /// `stale-while-revalidate`, unless one (or a fetch of the key) is already under way.
    pub(super) fn refresh_in_background(
        self: &Arc<Self>,
        request: &HeaderMap,
        target: &Target,
        client: IpAddr,
        key: &str,
        stored: &Arc<CachedObject>,
        live: &Arc<Live>,
    ) {
        let Role::Leader(leader) = self.inflight.join(key) else {
            return;
        };
        let proxy = Arc::clone(self);
        let live = Arc::clone(live);
        let (request, target, key, stored) = (
            request.clone(),
            target.clone(),
            key.to_string(),
            Arc::clone(stored),
        );
        tokio::spawn(async move {
            // On behalf of the entry, not of the client who happened to find it stale: its
            // credentials stay out, and the answer is judged as an anonymous request's.
            let request = on_behalf_of_entry(&request, &stored.headers.to_map());
            let credentials = Credentials::of(&request).forwarded(|n| {
                super::check::Forwarding::new(&Method::GET, &live.forwarded).keeps(n)
            });
            let headers = conditional_headers(&request, &stored.headers.to_map());
            let Ok(upstream) = upstream_request(
                Method::GET,
                headers,
                &target,
                client,
                empty(),
                &live.forwarded,
            ) else {
                return;
            };
            let Ok(response) = proxy.get_upstream(&upstream, &target, &live).await else {
                return; // counted by fetch; the stale object stays as it is
            };
            if response.status() == StatusCode::NOT_MODIFIED {
                let (mut rparts, _) = response.into_parts();
                strip_hop_by_hop(&mut rparts.headers);
                if validates(&stored.headers.to_map(), &rparts.headers) {
                    let (object, shared) =
                        proxy.refresh(&key, &stored, &rparts.headers, credentials, &live);
                    if shared {
                        leader.complete(Arc::new(Fetched {
                            object,
                            primary: target.key.clone(),
                            key,
                        }));
                    }
                }
                return;
            }
            // A full response: store it as a replacement; nobody reads this copy.
            let exchange = Exchange {
                intent: Intent::Admitted,
                leader: Some(leader),
                request_headers: request,
                credentials,
                upstream_head: false,
                client_head: true,
                sight: false,
                tiers: Tiers::Memory,
                budget: None,
            };
            drop(proxy.respond(response, &target, exchange, &live).await);
        });
    }

    /// Serves a stale object: while it is refreshed (`error: false`, RFC 5861 §3) or because the
    /// origin failed (`error: true`, §4).
    pub(super) fn stale(&self, stored: &CachedObject, parts: &Parts, error: bool) -> Answer {
        self.metrics.stale_served(error);
        let (response, mut cs) =
            hit::serve(stored, &parts.method, &parts.headers, self.clock.now());
        if error {
            cs.hit = false;
            cs.fwd = Some(Fwd::Stale);
            cs.detail = Some("stale-if-error");
        } else {
            cs.detail = Some("stale-while-revalidate");
        }
        Answer {
            response,
            outcome: Outcome::Stale,
            status: cs,
            sight: Sight::Now {
                size: stored.body.len() as u64,
                storable: true,
                kept: self.kept(stored, false),
            },
        }
    }

    /// RFC 9111 §4.4: a non-error response to an unsafe request invalidates the target URI and
    /// the same-origin `Location` and `Content-Location`.
    pub(super) fn invalidate_after_unsafe(&self, target: &Target, response: &HeaderMap) {
        let scheme = target.scheme;
        let mut n = self.remove_url(&target.key);
        for name in [header::LOCATION, header::CONTENT_LOCATION] {
            let path = response
                .get(&name)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| same_origin_path(l, &target.host, scheme, target.default_port));
            if let Some(path) = path {
                n += self.remove_url(&cache_key(scheme, target.host.as_str(), &path));
            }
        }
        self.metrics.invalidated(n);
    }

    /// Removes the objects stored under a primary key (all its variants, in both tiers);
    /// returns how many memory held. What an unsafe request calls: entries keyed on forwarded
    /// fields are not looked for (that would scan the store on the request path) but marked,
    /// so that lookups treat those stored before now as misses.
    fn remove_url(&self, primary: &str) -> u64 {
        if let Some(d) = self.disk() {
            d.tier.purge_url(primary, self.now());
        }
        if self.may_have_keyed_entries(primary) {
            self.keyed_invalidated
                .insert(crate::hash::object_id(primary.as_bytes()), self.clock.now());
        }
        self.purge_entries(primary, false, |k, _| is_key_or_variant(k, primary))
    }

    /// Removes (`soft`: marks stale, so the next request revalidates) the stored objects a purge
    /// names; returns how many.
    pub fn purge_target(&self, what: &PurgeTarget, soft: bool) -> Result<u64, PurgeError> {
        // The flash tier: what a URL (its variants), a prefix or a tag names cannot be listed
        // there, so a URL's objects stored before now stop being served, and for a prefix or a
        // tag every disk object stored before now does. A soft purge is a hard one there.
        if let Some(d) = self.disk() {
            match what {
                PurgeTarget::Url(url) => d.tier.purge_url(&self.key_of_url(url)?, self.now()),
                PurgeTarget::Prefix(url) => {
                    self.key_of_url(url)?;
                    d.purge_all_before(self.now());
                }
                PurgeTarget::Tag(_) => d.purge_all_before(self.now()),
            }
        }
        Ok(match what {
            PurgeTarget::Url(url) => {
                let primary = self.key_of_url(url)?;
                let exact = if self.may_have_keyed_entries(&primary) {
                    ""
                } else {
                    &primary
                };
                self.purge_entries(exact, soft, |k, _| is_key_or_variant(k, &primary))
            }
            PurgeTarget::Prefix(url) => {
                let prefix = self.key_of_url(url)?;
                self.purge_entries("", soft, |k, _| k.starts_with(&prefix))
            }
            PurgeTarget::Tag(tag) => self.purge_entries("", soft, |_, v| match v {
                Entry::Object(o) => o.has_tag(tag),
                Entry::Sliced(m) => m.head.has_tag(tag),
                Entry::Variants(_) => false,
            }),
        })
    }

    /// The primary key of `url` (`http://host/path?query` or `https://...`).
    pub(super) fn key_of_url(&self, url: &str) -> Result<String, PurgeError> {
        let uri: Uri = url.parse().map_err(|_| PurgeError::NotUrl(url.into()))?;
        let (scheme, default_port) = match uri.scheme_str() {
            Some("https") => ("https", 443),
            Some("http") => ("http", 80),
            _ => return Err(PurgeError::NotUrl(url.into())),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| PurgeError::NoHost(url.into()))?;
        let host = Host::parse(authority.as_str().as_bytes(), default_port).map_err(|error| {
            PurgeError::BadHost {
                url: url.into(),
                error,
            }
        })?;
        let pq = uri.path_and_query().map_or("/", |p| p.as_str());
        Ok(cache_key(scheme, host.as_str(), pq))
    }

    /// Removes or (`soft`) expires every object entry matching; `exact`, when not empty, is a
    /// key to try directly first (the common single-URL case needs no scan unless it varies).
    fn purge_entries(
        &self,
        exact: &str,
        soft: bool,
        matches: impl Fn(&str, &Entry) -> bool,
    ) -> u64 {
        let store = self.store.load();
        let cache = store.cache();
        let now = self.clock.now();
        let scan = match (exact.is_empty(), cache.get(exact)) {
            (false, Some(Entry::Object(o))) => {
                self.purge_one(exact, &o, soft, now);
                return 1;
            }
            (false, Some(Entry::Sliced(m))) => {
                self.purge_sliced(exact, &m, soft, now);
                return 1;
            }
            (false, None) => return 0,
            _ => true,
        };
        let mut n = 0;
        if scan {
            let found: Vec<(Arc<String>, Entry)> =
                cache.iter().filter(|(k, v)| matches(k, v)).collect();
            for (k, v) in found {
                match v {
                    Entry::Object(o) => {
                        self.purge_one(&k, &o, soft, now);
                        n += 1;
                    }
                    // The Vary record goes with a hard purge; a soft one keeps it (its variants
                    // are still there, stale).
                    Entry::Sliced(m) => {
                        self.purge_sliced(&k, &m, soft, now);
                        n += 1;
                    }
                    Entry::Variants(_) if !soft => cache.invalidate(&*k),
                    Entry::Variants(_) => {}
                }
            }
        }
        n
    }

    /// A hard purge removes a sliced object's head and every slice; a soft one expires its
    /// head, so the next request confirms the version with the origin before any slice is
    /// served (the slices stay: they are served again if the version is the same).
    fn purge_sliced(&self, key: &str, head: &Sliced, soft: bool, now: Duration) {
        if soft {
            let expired = Sliced {
                head: Arc::new(head.head.expired_at(now)),
                version: head.version.clone(),
                slice_size: head.slice_size,
            };
            self.store
                .load()
                .insert(key.to_string(), Entry::Sliced(Arc::new(expired)));
        } else {
            self.remove_sliced(key, head);
        }
    }

    fn purge_one(&self, key: &str, object: &CachedObject, soft: bool, now: Duration) {
        let store = self.store.load();
        let cache = store.cache();
        if soft {
            cache.insert(
                key.to_string(),
                Entry::Object(Arc::new(object.expired_at(now))),
            );
        } else {
            cache.invalidate(key);
        }
    }
}

/// Whether `key` is `primary` or one of its variants.
fn is_key_or_variant(key: &str, primary: &str) -> bool {
    key.strip_prefix(primary)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('\n'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn conditional_headers_replace_the_clients_own() {
        let mut req = HeaderMap::new();
        req.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"client\""),
        );
        req.insert(header::RANGE, HeaderValue::from_static("bytes=0-1"));
        req.insert(header::ACCEPT, HeaderValue::from_static("text/html"));
        let mut stored = HeaderMap::new();
        stored.insert(header::ETAG, HeaderValue::from_static("\"v1\""));
        stored.insert(
            header::LAST_MODIFIED,
            HeaderValue::from_static("Wed, 01 Jan 2025 00:00:00 GMT"),
        );
        let h = conditional_headers(&req, &stored);
        assert_eq!(h[header::IF_NONE_MATCH], "\"v1\"");
        assert_eq!(
            h[header::IF_MODIFIED_SINCE],
            "Wed, 01 Jan 2025 00:00:00 GMT"
        );
        assert!(!h.contains_key(header::RANGE));
        assert_eq!(h[header::ACCEPT], "text/html");
    }

    #[test]
    fn only_same_origin_locations_are_invalidated() {
        // RFC 9111 §4.4.
        let host = Host::parse(b"a.test", 80).unwrap();
        let p = |l: &str| same_origin_path(l, &host, "http", 80);
        assert_eq!(p("/x?y").as_deref(), Some("/x?y"));
        assert_eq!(p("http://A.test:80/z").as_deref(), Some("/z"));
        assert_eq!(p("http://b.test/z"), None);
        assert_eq!(p("https://a.test/z"), None);
        assert_eq!(p("//b.test/z"), None);
        assert_eq!(p("relative"), None);
    }

    #[test]
    fn variants_belong_to_their_primary_key() {
        assert!(is_key_or_variant("GET http://h/a", "GET http://h/a"));
        assert!(is_key_or_variant(
            "GET http://h/a\naccept!",
            "GET http://h/a"
        ));
        assert!(!is_key_or_variant("GET http://h/ab", "GET http://h/a"));
    }
}
