//! Coalescing: one origin fetch per key at a time. The first admitted miss for a key becomes its
//! [`Leader`]; later misses become [`Follower`]s. While a body of known length is being stored
//! the leader publishes it as [`Streaming`] ([`Leader::streaming`]): a follower streams from it
//! at once, from the first byte, at its own pace ([`Follower::join`]); once stored, followers
//! get the [`Fetched`] object ([`Leader::complete`]). Dropping a leader without completing
//! (origin error, uncacheable or cut-off response) wakes its followers with nothing, and they
//! fetch for themselves (a follower already streaming sees its body cut).
//!
//! A follower only takes the leader's object if it is the variant the follower asked for: the
//! leader's request may have carried other values of the fields the response varies on.

use super::cached::CachedObject;
use super::growing::Growing;
use crate::http_cache::{variant_key, vary_fields};
use http::HeaderMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// What a leader's fetch stored, for its followers.
#[derive(Debug)]
pub struct Fetched {
    /// The stored object.
    pub object: Arc<CachedObject>,
    /// The primary key.
    pub primary: String,
    /// The key it was stored under (the primary key, or its variant key).
    pub key: String,
}

/// A body being stored, for followers to stream from while it arrives.
pub struct Streaming {
    /// The response as it will be stored: status, headers, freshness; an empty body.
    pub head: Arc<CachedObject>,
    /// The primary key.
    pub primary: String,
    /// The key it is being stored under.
    pub key: String,
    /// The body, as it arrives.
    pub body: Arc<Growing>,
}

/// How far the leader's fetch has come.
#[derive(Clone)]
pub enum Progress {
    /// The body is arriving and being stored.
    Streaming(Arc<Streaming>),
    /// Stored.
    Stored(Arc<Fetched>),
}

impl Progress {
    fn head_and_keys(&self) -> (&CachedObject, &str, &str) {
        match self {
            Progress::Streaming(s) => (&s.head, &s.primary, &s.key),
            Progress::Stored(f) => (&f.object, &f.primary, &f.key),
        }
    }
}

/// What a follower joined: the stored object, or the body still arriving.
pub enum Joined {
    /// The leader's stored object.
    Stored(Arc<Fetched>),
    /// The leader's body, still arriving.
    Streaming(Arc<Streaming>),
}

type Slot = watch::Receiver<Option<Progress>>;

/// The fetches in flight, by key.
#[derive(Default)]
pub struct Inflight {
    map: Mutex<HashMap<String, Slot>>,
    /// Followers waiting now, on any key.
    waiting: Arc<AtomicU64>,
}

/// A miss's place in a coalesced fetch.
pub enum Role {
    /// Fetch from the origin; others wait for this fetch.
    Leader(Leader),
    /// Wait for the leader's fetch.
    Follower(Follower),
}

impl Inflight {
    /// Joins the fetch for `key`: leads it if none is in flight, else follows it.
    pub fn join(self: &Arc<Self>, key: &str) -> Role {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rx) = map.get(key) {
            self.waiting.fetch_add(1, Relaxed);
            return Role::Follower(Follower {
                rx: rx.clone(),
                waiting: Arc::clone(&self.waiting),
            });
        }
        let (tx, rx) = watch::channel(None);
        map.insert(key.to_string(), rx);
        Role::Leader(Leader {
            inflight: Arc::clone(self),
            key: key.to_string(),
            tx,
        })
    }

    /// Requests waiting now on another request's fetch (followers not yet answered).
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Relaxed)
    }
}

/// The fetch a key's first admitted miss leads.
pub struct Leader {
    inflight: Arc<Inflight>,
    key: String,
    tx: watch::Sender<Option<Progress>>,
}

impl Leader {
    /// Hands the stored object to the followers.
    pub fn complete(self, fetched: Arc<Fetched>) {
        let _ = self.tx.send(Some(Progress::Stored(fetched)));
    }

    /// Lets followers stream the body while it arrives and is stored.
    pub fn streaming(&self, streaming: Arc<Streaming>) {
        let _ = self.tx.send(Some(Progress::Streaming(streaming)));
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        let mut map = self.inflight.map.lock().unwrap_or_else(|p| p.into_inner());
        if map
            .get(&self.key)
            .is_some_and(|rx| rx.same_channel(&self.tx.subscribe()))
        {
            map.remove(&self.key);
        }
    }
}

/// A miss waiting for a leader's fetch.
pub struct Follower {
    rx: Slot,
    /// [`Inflight::waiting`], which this follower counts in until it is dropped.
    waiting: Arc<AtomicU64>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Relaxed);
    }
}

impl Follower {
    /// Waits up to `wait` for the leader's stored object; `None` if the leader failed, took too
    /// long, or stored another variant than the one `request` (the follower's headers,
    /// hop-by-hop fields removed) selects.
    pub async fn wait(self, wait: Duration, request: &HeaderMap) -> Option<Arc<Fetched>> {
        match self.until(wait, request, false).await? {
            Joined::Stored(f) => Some(f),
            Joined::Streaming(_) => None,
        }
    }

    /// As [`Follower::wait`], but takes the leader's body as soon as it is arriving, to stream
    /// from it.
    pub async fn join(self, wait: Duration, request: &HeaderMap) -> Option<Joined> {
        self.until(wait, request, true).await
    }

    async fn until(mut self, wait: Duration, request: &HeaderMap, stream: bool) -> Option<Joined> {
        let progress = tokio::time::timeout(wait, async {
            self.rx
                .wait_for(|p| match p {
                    Some(Progress::Stored(_)) => true,
                    Some(Progress::Streaming(_)) => stream,
                    None => false,
                })
                .await
                .ok()
                .and_then(|v| v.clone())
        })
        .await
        .ok()
        .flatten()?;
        let (object, primary, key) = progress.head_and_keys();
        let fields = vary_fields(&object.headers.to_map());
        if variant_key(primary, &fields, request) != key {
            return None;
        }
        Some(match progress {
            Progress::Stored(f) => Joined::Stored(f),
            Progress::Streaming(s) => Joined::Streaming(s),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_cache::Freshness;
    use bytes::Bytes;
    use http::header::{HeaderValue, VARY};
    use http::StatusCode;

    fn object(vary: Option<&str>) -> Arc<CachedObject> {
        let mut h = HeaderMap::new();
        if let Some(v) = vary {
            h.insert(VARY, HeaderValue::from_str(v).unwrap());
        }
        let fresh = Freshness {
            lifetime: Duration::from_secs(60),
            initial_age: Duration::ZERO,
            no_cache: false,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
        };
        Arc::new(CachedObject::new(
            StatusCode::OK,
            h,
            Bytes::from_static(b"body"),
            Duration::ZERO,
            &fresh,
            Duration::ZERO,
        ))
    }

    fn fetched(key: &str, object: Arc<CachedObject>) -> Arc<Fetched> {
        Arc::new(Fetched {
            object,
            primary: "k".into(),
            key: key.into(),
        })
    }

    fn follow(inflight: &Arc<Inflight>, key: &str) -> Follower {
        match inflight.join(key) {
            Role::Follower(f) => f,
            Role::Leader(_) => panic!("{key}: led, expected to follow"),
        }
    }

    fn lead(inflight: &Arc<Inflight>, key: &str) -> Leader {
        match inflight.join(key) {
            Role::Leader(l) => l,
            Role::Follower(_) => panic!("{key}: followed, expected to lead"),
        }
    }

    const WAIT: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn one_leader_per_key_and_its_followers_get_what_it_stored() {
        let inflight = Arc::new(Inflight::default());
        let leader = lead(&inflight, "k");
        let _other = lead(&inflight, "other");
        let followers = [follow(&inflight, "k"), follow(&inflight, "k")];
        assert_eq!(inflight.waiting(), 2);
        let waiting: Vec<_> = followers
            .into_iter()
            .map(|f| tokio::spawn(async move { f.wait(WAIT, &HeaderMap::new()).await }))
            .collect();
        let object = object(None);
        leader.complete(fetched("k", Arc::clone(&object)));
        for w in waiting {
            let got = w.await.unwrap().expect("the leader's object");
            assert!(Arc::ptr_eq(&got.object, &object));
        }
        assert_eq!(inflight.waiting(), 0, "answered followers wait no more");
        // Completed and dropped: the next miss leads a fetch of its own.
        drop(lead(&inflight, "k"));
    }

    #[tokio::test]
    async fn a_leader_that_fails_releases_its_followers_with_nothing() {
        let inflight = Arc::new(Inflight::default());
        let leader = lead(&inflight, "k");
        let f = follow(&inflight, "k");
        let waiting = tokio::spawn(async move { f.wait(WAIT, &HeaderMap::new()).await });
        drop(leader);
        assert!(waiting.await.unwrap().is_none());
        drop(lead(&inflight, "k"));
    }

    #[tokio::test]
    async fn a_follower_waits_no_longer_than_its_bound() {
        let inflight = Arc::new(Inflight::default());
        let _leader = lead(&inflight, "k");
        let f = follow(&inflight, "k");
        assert!(f
            .wait(Duration::from_millis(100), &HeaderMap::new())
            .await
            .is_none());
    }

    #[tokio::test]
    async fn another_variant_is_not_taken() {
        let inflight = Arc::new(Inflight::default());
        let leader = lead(&inflight, "k");
        let mut mine = HeaderMap::new();
        mine.insert("x-v", HeaderValue::from_static("good"));
        let f = follow(&inflight, "k");
        let waiting = tokio::spawn(async move { f.wait(WAIT, &mine).await });
        // The leader's request selected x-v: evil.
        let key = {
            let mut theirs = HeaderMap::new();
            theirs.insert("x-v", HeaderValue::from_static("evil"));
            variant_key("k", &[http::HeaderName::from_static("x-v")], &theirs)
        };
        leader.complete(fetched(&key, object(Some("X-V"))));
        assert!(waiting.await.unwrap().is_none());
    }

    #[tokio::test]
    async fn join_takes_the_body_while_it_arrives_and_wait_the_stored_object() {
        let inflight = Arc::new(Inflight::default());
        let leader = lead(&inflight, "k");
        let streaming_follower = follow(&inflight, "k");
        let stored_follower = follow(&inflight, "k");
        let head = object(None);
        let body = Growing::new(4);
        leader.streaming(Arc::new(Streaming {
            head: Arc::clone(&head),
            primary: "k".into(),
            key: "k".into(),
            body: Arc::clone(&body),
        }));
        match streaming_follower.join(WAIT, &HeaderMap::new()).await {
            Some(Joined::Streaming(s)) => assert!(Arc::ptr_eq(&s.body, &body)),
            _ => panic!("a plain follower streams the body as it arrives"),
        }
        // `wait` does not take a body that is still arriving.
        let waiting =
            tokio::spawn(async move { stored_follower.wait(WAIT, &HeaderMap::new()).await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        leader.complete(fetched("k", Arc::clone(&head)));
        assert!(waiting.await.unwrap().is_some());
    }
}
