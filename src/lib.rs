//! # secondhit
//!
//! A CDN edge cache that stores an object only on its **second** request, and the trace lab that
//! measures that choice. Most objects on a CDN edge are requested once; storing them costs a write
//! and evicts something useful. A time-rotating pair of Bloom filters remembers "seen once" in
//! about ten bits a key, so a miss is stored only when the key was seen before.
//!
//! This package is the `secondhit` binary (its command line is `src/cli/`) and this library,
//! which only re-exports the crates it is built from, so that one dependency reaches all of them
//! under one name:
//!
//! - `secondhit-admission` ([`admission`], [`bloom`], [`clock`], [`hash`]): the Bloom filter and
//!   the admission policies, the small crate any proxy embeds (arc-swap and xxhash only).
//! - `secondhit-store` ([`store`]): the cache stores `serve` and `simulate` share: moka
//!   configured once, the exact eviction stores equal to libCacheSim's, the lane (a policy in
//!   front of a store), the oracleGeneral record.
//! - `secondhit-proxy` ([`config`], [`proxy`], [`server`], [`listener`], [`origin`],
//!   [`http_cache`], [`disk`], [`metrics`], [`lab`] and the rest): `serve`, depending on no
//!   command-line, plotting, progress-bar or trace-compression crate.
//! - `secondhit-lab` ([`trace`], [`sim`], [`replay`], [`origin_server`], [`demo`], [`plan`]):
//!   the trace lab.
//!
//! ```
//! use secondhit::admission::{Admission, Decision, Policy, Settings};
//! use secondhit::KeyHash;
//! use std::time::Duration;
//!
//! let policy = Settings::default().build(Policy::SecondHit)?;
//! let key = KeyHash::of(b"https://cdn.example/img/1.jpg");
//! assert_eq!(policy.on_miss(key, Duration::ZERO), Decision::Defer);
//! assert_eq!(policy.on_miss(key, Duration::from_secs(1)), Decision::Admit);
//! # Ok::<(), secondhit::admission::PolicyError>(())
//! ```

#![warn(missing_docs)]

pub use secondhit_admission::{admission, bloom, clock, hash};
pub use secondhit_lab::{demo, origin_server, plan, replay, sim, trace};
pub use secondhit_proxy::{
    access_log, body, config, disk, http_cache, lab, listener, metrics, origin, pages, proxy,
    server, state, tls, units,
};
pub use secondhit_store as store;

pub use hash::KeyHash;
