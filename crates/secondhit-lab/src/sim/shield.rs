//! A shield tier below the edge (`--shield-nodes`): every request an edge cache does not serve
//! (a miss, whatever its policy said) goes to one of the shield's caches, chosen by consistent
//! hash of the key (as `serve`'s `balance = "hash"` over a group of parent caches), and only
//! what the shield misses reaches the origin. Each tier has its own policy and capacity; the
//! edge tier is the run's (one cache, or `--nodes` of them). So the origin load of a two-tier
//! deployment is predicted: the shield's misses.

use super::{Ring, SimError};
use crate::admission::{Policy, Settings};
use crate::store::{Access, Eviction, StoreKind};
use secondhit_store::{Counts, Lane, Step};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The shield tier asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShieldOptions {
    /// Shield caches (at least 1).
    pub nodes: usize,
    /// Their capacity together, in bytes (each has its share).
    pub capacity: u64,
    /// Their admission policy.
    pub policy: Policy,
}

impl ShieldOptions {
    /// Checks the options, naming the flag.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.nodes == 0 {
            return Err(SimError::Shield("--shield-nodes must be at least 1".into()));
        }
        if self.capacity / self.nodes as u64 == 0 {
            return Err(SimError::Shield(format!(
                "--shield-capacity {} over {} shield nodes leaves each 0 bytes",
                self.capacity, self.nodes
            )));
        }
        Ok(())
    }
}

/// The shield tier of one run, as it steps.
pub(super) struct Shield {
    lanes: Vec<Lane>,
    ring: Option<Ring>,
    options: ShieldOptions,
}

impl Shield {
    /// An empty shield tier; its caches evict and weigh objects as the edge's (`eviction`,
    /// `store`, `object_cost`).
    pub(super) fn new(
        options: ShieldOptions,
        eviction: Eviction,
        store: StoreKind,
        object_cost: u64,
        settings: &Settings,
    ) -> Result<Shield, SimError> {
        let each = options.capacity / options.nodes as u64;
        let lanes = (0..options.nodes)
            .map(|_| {
                Lane::new(options.policy, eviction, store, each, settings, false)
                    .map(|l| l.with_object_cost(object_cost))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Shield {
            lanes,
            ring: (options.nodes > 1).then(|| Ring::new(options.nodes)),
            options,
        })
    }

    /// A request the edge did not serve.
    #[inline]
    pub(super) fn step(&mut self, access: &Access, time: Duration) -> Step {
        let node = self.ring.as_ref().map_or(0, |r| r.node_of(access.key));
        self.lanes[node].step(access, time)
    }

    /// Its figures.
    pub(super) fn result(&self) -> ShieldResult {
        let mut c = Counts::default();
        for l in &self.lanes {
            c.add(l.counts());
        }
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        ShieldResult {
            nodes: self.options.nodes,
            capacity_bytes: self.options.capacity,
            policy: self.options.policy.to_string(),
            requests: c.requests,
            hits: c.hits,
            hit_ratio: ratio(c.hits, c.requests),
            admissions: c.admissions,
            origin_requests: c.requests - c.hits,
            origin_bytes: c.requested_bytes - c.hit_bytes,
        }
    }
}

/// A shield tier's figures. `origin_requests` and `origin_bytes` are what the deployment asks
/// of the origin (the run's own `origin_bytes` are what its edges asked of the shield).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShieldResult {
    /// Shield caches.
    pub nodes: usize,
    /// Their capacity together.
    pub capacity_bytes: u64,
    /// Their policy.
    pub policy: String,
    /// Requests the edges sent them (every edge miss).
    pub requests: u64,
    /// Of those, served from a shield cache.
    pub hits: u64,
    /// `hits / requests`.
    pub hit_ratio: f64,
    /// Their cache writes.
    pub admissions: u64,
    /// Requests that reached the origin.
    pub origin_requests: u64,
    /// Bytes the origin sent.
    pub origin_bytes: u64,
}
