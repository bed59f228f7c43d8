//! Coalescing: one origin fetch per key at a time. The first admitted miss for a key becomes its
//! [`Leader`]; later misses become [`Follower`]s that wait for the leader's stored object.
//! Dropping a leader without [`Leader::complete`] (origin error, uncacheable or cut-off response)
//! wakes its followers with nothing, and they fetch for themselves.
//!
//! A follower only takes the leader's object if it is the variant the follower asked for: the
//! leader's request may have carried other values of the fields the response varies on.

use super::cached::CachedObject;
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

type Slot = watch::Receiver<Option<Arc<Fetched>>>;

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
    tx: watch::Sender<Option<Arc<Fetched>>>,
}

impl Leader {
    /// Hands the stored object to the followers.
    pub fn complete(self, fetched: Arc<Fetched>) {
        let _ = self.tx.send(Some(fetched));
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
    /// Waits up to `wait` for the leader's object; `None` if the leader failed, took too long, or
    /// stored another variant than the one `request` (the follower's headers, hop-by-hop fields removed) selects.
    pub async fn wait(mut self, wait: Duration, request: &HeaderMap) -> Option<Arc<Fetched>> {
        let fetched = tokio::time::timeout(wait, async {
            self.rx
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|v| v.clone())
        })
        .await
        .ok()
        .flatten()?;
        let fields = vary_fields(&fetched.object.headers.to_map());
        (variant_key(&fetched.primary, &fields, request) == fetched.key).then_some(fetched)
    }
}
