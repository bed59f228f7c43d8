//! # secondhit-lab
//!
//! The trace lab that measures second-hit admission: real access traces read in every common
//! format, replayed offline through the same admission code and stores the proxy runs
//! (`simulate`), or live as HTTP load against any cache (`replay`), beside a synthetic origin
//! whose every byte can be verified.
//!
//! ```
//! use secondhit_lab::admission::Policy;
//! use secondhit_lab::sim::{self, Capacities, Options, Quiet};
//! use secondhit_lab::trace::Source;
//!
//! // The bundled web trace at 5 % of its working set: admit-all against second-hit.
//! let options = Options {
//!     policies: vec![Policy::AdmitAll, Policy::SecondHit],
//!     capacities: Capacities::Fractions(vec![0.05]),
//!     limit: Some(20_000),
//!     ..Options::default()
//! };
//! let report = sim::run(&Source::bundled(None), &options, &Quiet)?;
//! let writes = |p: &str| report.results.iter().find(|r| r.policy == p).unwrap().admissions;
//! assert!(writes("second-hit") < writes("admit-all")); // one-hit wonders were never written
//! # Ok::<(), secondhit_lab::sim::SimError>(())
//! ```
//!
//! ## Layout
//!
//! The core, re-exported: [`admission`], [`bloom`], [`clock`] and [`hash`] from
//! `secondhit-admission`, and [`store`] (`secondhit-store`: the stores and the lane).
//!
//! - [`trace`]: access traces: one streaming reader per format, transparent decompression,
//!   synthetic traces (`gen-trace`), summaries (`trace-stats`), next-access times and
//!   oracleGeneral output (`trace-convert`).
//! - [`sim`]: offline replay: trace x policies x evictions x sizes -> report (table, JSON, CSV,
//!   SVG plot, the best pair per size), in parallel, deterministic, optionally sampled (SHARDS),
//!   optionally as a cluster of nodes on a consistent-hash ring (`--nodes`) or as memory above
//!   a flash tier (`--disk-capacity`).
//! - [`replay`]: live replay of a trace as HTTP load against any cache, with latency histograms
//!   and byte-for-byte verification.
//! - [`origin_server`]: `secondhit origin`, a synthetic origin with verifiable content, counters
//!   and injected faults.
//! - [`demo`]: `secondhit demo`: origin + proxy on loopback, a replay per policy, live figures
//!   beside the simulator's prediction.
//! - [`plan`]: the sizing calculator and self-test behind `secondhit bloom`.

#![warn(missing_docs)]

pub use secondhit_admission::{admission, bloom, clock, hash};
pub use secondhit_store as store;
pub mod demo;
pub mod origin_server;
pub mod plan;
pub mod replay;
pub mod sim;
pub mod trace;

pub use hash::KeyHash;
