//! Building the proxy from a configuration, and reloading it: the settings a reload swaps
//! ([`Live`]), the store and its shape, the shadows and the recording (`[lab]`), and the notes
//! a reload returns for what only a restart changes.

use super::{BodyLimits, PathTimeouts};
use super::{DiskPart, Live, Proxy, Store};
use crate::access_log::AccessLog;
use crate::clock::Clock;
use crate::config::ValidConfig;
use crate::disk::DiskTier;
use crate::lab::{Lab, RecordOptions, Recorder, Shadows};
use crate::metrics::Metrics;
use crate::origin::Origins;
use crate::proxy::cached::{Entry, FreshFor};
use crate::proxy::check::Rules;
use crate::store::{moka_builder, Maintained};
use arc_swap::ArcSwap;
use moka::sync::Cache;
use std::sync::{Arc, OnceLock};
use tokio::sync::Semaphore;

/// Why the proxy could not be built from a valid configuration.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The admission filter could not be built as sized.
    #[error("admission: {0}")]
    Admission(#[from] crate::admission::PolicyError),
    /// The trust for `https://` origins could not be set up (the CA file).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The access log file could not be opened.
    #[error("log.access_log_file: {0}")]
    AccessLog(#[from] std::io::Error),
    /// A shadow policy could not start.
    #[error(transparent)]
    Shadow(#[from] crate::lab::shadow::ShadowError),
    /// The recording could not start (the message names the file).
    #[error("{0}")]
    Record(std::io::Error),
}

/// URLs with keyed entries remembered before purges of URLs fall back to scanning the store:
/// about 1.2 MB of filter at a 1 % false-positive rate (a false positive costs one scan).
const KEYED_URLS: u64 = 1 << 20;

/// URLs whose keyed entries an unsafe request invalidated, remembered at once.
const KEYED_INVALIDATIONS: u64 = 1 << 16;

/// What the shadows take from the live cache when they start (policy, filter settings,
/// eviction, capacity).
pub(super) type LabBasis = (
    crate::admission::Policy,
    crate::admission::Settings,
    crate::store::Eviction,
    u64,
);

fn lab_basis(config: &ValidConfig) -> LabBasis {
    (
        config.admission.policy,
        config.admission.settings(),
        config.cache.eviction,
        config.cache.capacity,
    )
}

impl Live {
    /// The live settings of `config`; `previous`: those a reload replaces (its origin servers'
    /// health carries over).
    fn new(config: &ValidConfig, previous: Option<&Live>) -> Result<Live, BuildError> {
        let l = &config.limits;
        Ok(Live {
            origins: Origins::new(config, previous.map(|p| &p.origins))?,
            rules: config.store_rules(),
            forwarded: config.cache.forwarded_request_headers.clone(),
            keyed: crate::http_cache::keyed_fields(
                &config.cache.forwarded_request_headers,
                &config.cache.forwarded_unkeyed_headers,
            ),
            check_rules: Rules {
                scheme: "http",
                default_port: 80,
                max_uri: l.max_uri_bytes,
            },
            check_rules_tls: Rules {
                scheme: "https",
                default_port: 443,
                max_uri: l.max_uri_bytes,
            },
            limits: BodyLimits {
                max_object: config.cache.max_object_size(),
                stream_buffer: l.stream_buffer_bytes,
                request_ahead: l.request_body_buffer_bytes,
            },
            timeouts: PathTimeouts {
                first_byte: config.timeouts.first_byte,
                coalesce_wait: config.timeouts.coalesce_wait,
                client_body: config.timeouts.client_body,
            },
            store_budget: Arc::new(Semaphore::new(
                usize::try_from(l.store_buffer_bytes)
                    .unwrap_or(usize::MAX)
                    .min(Semaphore::MAX_PERMITS),
            )),
            bypass_cookies: config.cache.bypass_cookie_requests,
            accept_encoding: config.cache.accept_encoding.clone(),
            slice_size: config.cache.slice_size,
            access_log: config.log.access_log,
            stale_keep: config.cache.stale_keep,
            sendfile: config.cache.sendfile,
        })
    }
}

fn store_shape(config: &ValidConfig) -> (u64, crate::store::Eviction, bool, bool) {
    (
        config.cache.capacity,
        config.cache.eviction,
        config.cache.lab_mode,
        config.cache.exact_maintenance,
    )
}

/// The moka store for a configuration: byte capacity, eviction, weights, expiry.
fn build_store(config: &ValidConfig, disk: Option<(Arc<DiskTier>, Arc<dyn Clock>)>) -> Store {
    let lab = config.cache.lab_mode;
    let builder = moka_builder::<String, Entry>(config.cache.capacity, config.cache.eviction)
        .weigher(move |k: &String, v: &Entry| v.weight(k, lab))
        .expire_after(FreshFor)
        .support_invalidation_closures();
    let hasher = foldhash::quality::RandomState::default();
    let cache: Cache<String, Entry, _> = match disk {
        // What memory evicts for room, and the flash policy admitted, goes to disk once.
        Some((tier, clock)) => builder
            .eviction_listener(move |key: Arc<String>, entry: Entry, cause| {
                if cause != moka::notification::RemovalCause::Size {
                    return;
                }
                if let Entry::Object(obj) = entry {
                    if obj
                        .bound_for_disk
                        .swap(false, std::sync::atomic::Ordering::Relaxed)
                    {
                        tier.write(&key, &obj, clock.now());
                    }
                }
            })
            .build_with_hasher(hasher),
        None => builder.build_with_hasher(hasher),
    };
    Maintained::new(cache, lab || config.cache.exact_maintenance)
}

/// The shadows and the recording a configuration asks for.
fn build_lab(config: &ValidConfig) -> Result<Lab, BuildError> {
    let l = &config.lab;
    let shadows = if l.shadow.is_empty() {
        None
    } else {
        Some(Shadows::start(
            config.admission.policy,
            &l.shadow,
            &config.admission.settings(),
            config.cache.eviction,
            config.cache.capacity,
            l.shadow_queue,
        )?)
    };
    let recorder = match &l.record {
        Some(path) => Some(
            Recorder::start(RecordOptions {
                path: path.clone(),
                max_bytes: l.record_max_bytes,
                keep: l.record_keep,
                format: l.record_format,
                queue: l.record_queue,
            })
            .map_err(BuildError::Record)?,
        ),
        None => None,
    };
    Ok(Lab::new(shadows, recorder))
}

impl Proxy {
    /// Builds the proxy from a validated configuration. `clock` decides freshness and drives the
    /// admission windows: the system clock in production, a manual one in tests. Fails only if
    /// the admission filter cannot be allocated as sized.
    pub fn new(config: &ValidConfig, clock: Arc<dyn Clock>) -> Result<Proxy, BuildError> {
        Self::with_disk(config, clock, None)
    }

    /// As [`Proxy::new`], with a flash tier under the memory store (opened by the caller: it
    /// needs the runtime), its admission policy `admission.disk`.
    pub fn with_disk(
        config: &ValidConfig,
        clock: Arc<dyn Clock>,
        disk: Option<Arc<DiskTier>>,
    ) -> Result<Proxy, BuildError> {
        let admission = config.admission.settings().build(config.admission.policy)?;
        let disk = match disk {
            Some(tier) => Some(Arc::new(DiskPart {
                admission: config.admission.settings().build(config.admission.disk)?,
                purged_before: std::sync::atomic::AtomicU64::new(tier.purge_mark(clock.now())),
                tier,
            })),
            None => None,
        };
        let listener = disk
            .as_ref()
            .map(|d| (Arc::clone(&d.tier), Arc::clone(&clock)));
        let access_log = OnceLock::new();
        if let Some(target) = config.log.access_log_target() {
            let _ = access_log.set(AccessLog::start(target)?);
        }
        Ok(Proxy {
            live: ArcSwap::from_pointee(Live::new(config, None)?),
            store: ArcSwap::from_pointee(build_store(config, listener)),
            store_shape: std::sync::Mutex::new(store_shape(config)),
            lab_weights: config.cache.lab_mode.into(),
            admission,
            clock,
            inflight: Arc::default(),
            metrics: Metrics::default(),
            access_log,
            lab: build_lab(config)?,
            lab_config: config.lab.clone(),
            lab_basis: lab_basis(config),
            disk,
            keyed_urls: crate::bloom::Bloom::with_rate(KEYED_URLS, 0.01)
                .map_err(crate::admission::PolicyError::from)?,
            keyed_invalidated: Cache::builder().max_capacity(KEYED_INVALIDATIONS).build(),
        })
    }

    /// Swaps in a new configuration, keeping the cache and the admission filter: routes and
    /// origins, rules, limits and timeouts for every request from now on (requests in flight
    /// finish on the settings they started with); the admission window now and its new sizing
    /// from the next rotation; a new capacity or eviction by moving every stored object into a
    /// new store. A different admission policy needs a restart: the current one stays, and the
    /// returned notes say so. On error nothing has changed.
    pub fn reload(&self, config: &ValidConfig) -> Result<Vec<String>, BuildError> {
        let live = Live::new(config, Some(&self.live.load()))?;
        if let Some(target) = config.log.access_log_target() {
            match self.access_log.get() {
                Some(log) => log.retarget(target)?,
                None => {
                    let _ = self.access_log.set(AccessLog::start(target)?);
                }
            }
        }
        let mut notes = Vec::new();
        let wanted = config.admission.policy.to_string();
        if wanted == self.admission.name() {
            self.admission.reconfigure(&config.admission.settings())?;
        } else {
            notes.push(format!(
                "admission.policy {wanted}: another policy needs a restart; {} stays",
                self.admission.name()
            ));
        }
        if config.lab != self.lab_config {
            notes.push(
                "lab: shadows and recording change on a restart; they go on as started".into(),
            );
        } else if self.lab.shadows().is_some() && lab_basis(config) != self.lab_basis {
            notes.push(
                "lab.shadow: the shadows (and the live policy's row) keep the admission settings, eviction and capacity they started with until a restart".into(),
            );
        }
        let shape = store_shape(config);
        let mut current = self.store_shape.lock().unwrap_or_else(|p| p.into_inner());
        if *current != shape {
            let fresh = build_store(
                config,
                self.disk
                    .as_ref()
                    .map(|d| (Arc::clone(&d.tier), Arc::clone(&self.clock))),
            );
            let old = self.store.load_full();
            for (k, v) in old.cache().iter() {
                fresh.cache().insert(String::clone(&k), v);
            }
            fresh.cache().run_pending_tasks();
            self.store.store(Arc::new(fresh));
            self.lab_weights
                .store(config.cache.lab_mode, std::sync::atomic::Ordering::Relaxed);
            *current = shape;
        }
        self.live.store(Arc::new(live));
        // The new groups' probes (the old ones end with the old groups).
        self.live.load().origins.start_probes();
        Ok(notes)
    }
}
