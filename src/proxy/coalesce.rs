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
            return Role::Follower(Follower { rx: rx.clone() });
        }
        let (tx, rx) = watch::channel(None);
        map.insert(key.to_string(), rx);
        Role::Leader(Leader {
            inflight: Arc::clone(self),
            key: key.to_string(),
            tx,
        })
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
