//! What to simulate: policies, evictions, sizes and the shape of the cache, and the checks
//! that refuse nonsense before a pass over the trace begins.

use super::{tiers, DiskOptions, Nodes, SimError};
use crate::admission::{Policy, Settings};
use crate::store::{Eviction, StoreKind};

/// Cache sizes: absolute, or fractions of the trace's working set.
#[derive(Clone, Debug, PartialEq)]
pub enum Capacities {
    /// Bytes (objects, for traces without sizes).
    Bytes(Vec<u64>),
    /// Fractions of the working set: `floor(F x working set)`.
    Fractions(Vec<f64>),
}

/// What to simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Admission policies.
    pub policies: Vec<Policy>,
    /// Eviction policies (`tinylfu` needs the moka store).
    pub evictions: Vec<Eviction>,
    /// The store.
    pub store: StoreKind,
    /// Cache sizes.
    pub capacities: Capacities,
    /// Filter settings of the windowed policies.
    pub settings: Settings,
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// Replay only the first N requests of the trace.
    pub limit: Option<u64>,
    /// Keep the admission policy's state at the end (one run only), for `--save-state`: a filter
    /// warmed from a trace, in the format `serve --state-dir` loads.
    pub keep_state: bool,
    /// Size the filters from the trace (`--expected-items auto`): a pass first counts the
    /// distinct keys of each window, and `settings.expected_items` becomes what the busiest one
    /// needs ([`Settings::expected_items_for`]).
    pub auto_expected_items: bool,
    /// SHARDS-style spatial sampling (Waldspurger et al., FAST 2015): keep only the requests
    /// whose key hashes below this fraction of the hash space, and simulate caches that much
    /// smaller. Ratios estimate the full trace's; counts and sizes are the sample's.
    pub sample: Option<f64>,
    /// A cluster of nodes behind a consistent-hash balancer ([`Ring`](super::Ring)): each run is
    /// that many caches, each key on one of them. Default: one cache.
    pub nodes: Nodes,
    /// A flash tier below memory ([`TwoTier`](super::TwoTier)): each run is then every memory run
    /// above every flash size and policy. Default: memory only.
    pub disk: Option<DiskOptions>,
    /// Step admit-all in lockstep beside every memory-only run whose policy is not admit-all,
    /// and count the hits each lost and gained against it
    /// ([`RunResult::hits_lost`](super::RunResult::hits_lost)). Default: on.
    pub decompose: bool,
    /// A shield tier below the edge ([`ShieldOptions`](super::ShieldOptions)): every edge miss
    /// goes to it, and only its misses reach the origin. Default: none.
    pub shield: Option<super::ShieldOptions>,
    /// Predict `serve --slice-size`: each request becomes the slices of this many bytes it
    /// covers ([`Slices`](crate::trace::slices::Slices)); the trace's summary, the working
    /// set and every count are then in slices. `None`: whole objects.
    pub slice_size: Option<u64>,
    /// Bytes each stored object costs beside its body, as `serve`'s weigher charges its key,
    /// header fields and bookkeeping ([`OBJECT_COST_SERVE`](super::OBJECT_COST_SERVE) for what
    /// `serve` charges a typical object; `simulate --object-cost`): in memory, and in the
    /// memory tier above flash. Hits and byte counts stay body bytes. Default 0: libCacheSim's
    /// model, where an object weighs its size.
    pub object_cost: u64,
    /// On a recording that says how long objects stay fresh (`serve --record`): how long a
    /// stale object is kept for revalidation before it is dropped, as `serve`'s
    /// `cache.stale_keep` (default 4 hours, its default).
    pub stale_keep: std::time::Duration,
}

impl Default for Options {
    /// `serve`'s defaults for policy settings and eviction; admit-all, second-hit and
    /// second-hit-exact at 1 %, 5 % and 10 % of the working set on the exact store.
    fn default() -> Self {
        Options {
            policies: vec![Policy::AdmitAll, Policy::SecondHit, Policy::SecondHitExact],
            evictions: vec![Eviction::Lru],
            store: StoreKind::Exact,
            capacities: Capacities::Fractions(vec![0.01, 0.05, 0.10]),
            settings: Settings::default(),
            threads: 0,
            limit: None,
            keep_state: false,
            auto_expected_items: false,
            sample: None,
            nodes: Nodes::default(),
            disk: None,
            decompose: true,
            shield: None,
            slice_size: None,
            object_cost: 0,
            stale_keep: std::time::Duration::from_secs(4 * 3600),
        }
    }
}

impl Options {
    /// Checks the options, naming what is wrong.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.policies.is_empty() {
            return Err(SimError::NoPolicy);
        }
        if self.evictions.is_empty() {
            return Err(SimError::NoEviction);
        }
        for &e in &self.evictions {
            match self.store {
                StoreKind::Exact if !e.is_exact() => return Err(SimError::TinyLfuNeedsMoka),
                StoreKind::Moka if !e.is_moka() => return Err(SimError::NeedsExactStore(e)),
                _ => {}
            }
        }
        match &self.capacities {
            Capacities::Bytes(v) if v.is_empty() => return Err(SimError::NoCapacity),
            Capacities::Fractions(v) if v.is_empty() => return Err(SimError::NoCapacity),
            Capacities::Fractions(v) => {
                if let Some(f) = v.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
                    return Err(SimError::BadFraction(*f));
                }
            }
            Capacities::Bytes(_) => {}
        }
        if let Some(r) = self
            .sample
            .filter(|r| !(r.is_finite() && *r > 0.0 && *r <= 1.0))
        {
            return Err(SimError::BadSample(r));
        }
        for p in &self.policies {
            self.settings.build(*p)?;
        }
        let sizes = match &self.capacities {
            Capacities::Bytes(v) => v.len(),
            Capacities::Fractions(v) => v.len(),
        };
        let runs = self.policies.len() * self.evictions.len() * sizes;
        if self.keep_state && runs != 1 {
            return Err(SimError::SaveStateNeedsOneRun(runs));
        }
        if self.nodes.count == 0 {
            return Err(SimError::NoNodes);
        }
        if self.keep_state && self.nodes.count > 1 {
            return Err(SimError::SaveStateNeedsOneNode(self.nodes.count));
        }
        if let Some(s) = &self.shield {
            s.validate()?;
            if self.disk.is_some() {
                return Err(SimError::Shield(
                    "--shield-nodes and --disk-capacity cannot be combined: give one".into(),
                ));
            }
        }
        match &self.disk {
            Some(d) => self.validate_disk(d),
            None => Ok(()),
        }
    }

    /// Checks the flash tier, and the memory tier above it.
    fn validate_disk(&self, d: &DiskOptions) -> Result<(), SimError> {
        let refuse = |m: &str| Err(SimError::Disk(m.to_string()));
        if d.capacities.is_empty() || d.capacities.contains(&0) {
            return refuse("--disk-capacity: give the flash sizes, each more than 0 bytes");
        }
        if d.policies.is_empty() {
            return refuse("--disk-policy: give at least one");
        }
        if !tiers::FLASH_EVICTIONS.contains(&d.eviction) {
            return refuse(&format!(
                "--disk-eviction {}: flash evicts by {}",
                d.eviction,
                tiers::FLASH_EVICTIONS.map(|e| e.as_str()).join(", ")
            ));
        }
        if d.write_rate == Some(0) {
            return refuse("--disk-write-rate must be more than 0 bytes a second");
        }
        if self.nodes.count > 1 {
            return refuse("--disk-capacity: not with --nodes (one cache of two tiers)");
        }
        if self.keep_state {
            return refuse("--disk-capacity: not with --save-state");
        }
        if let Some(&e) = self.evictions.iter().find(|e| {
            self.store == StoreKind::Exact && !matches!(e, Eviction::Lru | Eviction::Fifo)
        }) {
            return Err(SimError::MemoryTierEviction(e));
        }
        for p in &d.policies {
            self.settings
                .build(*p)
                .map_err(|e| SimError::Disk(format!("--disk-policy {p}: {e}")))?;
        }
        Ok(())
    }
}
