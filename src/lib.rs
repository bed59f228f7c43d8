//! # secondhit
//!
//! A CDN edge cache that stores an object only on its **second** request, and the trace lab that
//! measures that choice. Most objects on a CDN edge are requested once; storing them costs a write
//! and evicts something useful. A time-rotating pair of Bloom filters remembers "seen once" in
//! about ten bits a key, so a miss is stored only when the key was seen before.
//!
//! The admission filter and policies are their own small crate, `secondhit-admission`
//! (`crates/secondhit-admission`, dependencies: arc-swap and xxhash only), which any proxy can
//! embed; this crate re-exports it as [`admission`], [`bloom`], [`clock`] and [`hash`] and builds
//! the proxy and the trace lab on it (see `examples/moka_second_hit.rs`).
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
//!
//! ## Layout
//!
//! The core, re-exported from `secondhit-admission` (what another proxy embeds):
//! - [`hash`]: one fixed-seed 128-bit hash per key ([`KeyHash`]), shared by every filter.
//! - [`bloom`]: the concurrent Bloom filter (standard and cache-line-blocked layouts, sizing) and
//!   its counting variant.
//! - [`admission`]: the [`Admission`](admission::Admission) trait and its policies: admit-all,
//!   second-hit (rotating Bloom pair), second-hit-exact, nth-hit:N, nth-hit-exact:N.
//! - [`clock`]: injected time: system clock for the server, manual clock for tests.
//!
//! The store:
//! - [`store`]: the cache stores: moka (configured once for proxy and simulator) and the exact
//!   simulator stores, one file per eviction policy (lru, fifo, clock, sieve, s3fifo, arc,
//!   wtinylfu, lfu, belady, belady-size), each libCacheSim 0.3.5's, on one arena of slots.
//!
//! The trace lab:
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
//!
//! The proxy:
//! - [`config`]: `serve`'s configuration, parsed once into types; flag overrides; the
//!   cross-field `validate()` that yields a [`ValidConfig`](config::ValidConfig).
//! - [`http_cache`]: RFC 9111 rules as pure functions: request plan, storability, freshness,
//!   age, keys, Vary variant keys, conditional requests, ranges, hop-by-hop and unkeyed headers.
//! - [`proxy`]: the request path as phases (check, scrub, plan, lookup, admit, fetch, classify,
//!   pump), each in its own file: [`proxy::authority`] (Host validation and normalisation),
//!   [`proxy::check`], [`proxy::hit`], [`proxy::coalesce`] (with [`proxy::growing`], the body a
//!   coalesced fetch streams to every waiter while it is stored), [`proxy::fetch`],
//!   [`proxy::classify`], [`proxy::cached`] (store entries and their weight) and
//!   [`proxy::outcome`] (`Outcome`, the typed `Cache-Status`, `Refusal`).
//! - [`origin`]: routing to configured origins only, the pooled keep-alive client, origin
//!   failure kinds.
//! - [`server`]: the public and admin listeners and the admin endpoints.
//! - [`listener`]: the one accept loop (connection limits, first-byte timeout, HTTP/1.1 and h2c,
//!   graceful shutdown) every server here uses, on the caller's runtime or on worker threads of
//!   their own; [`listener::activity`], the idle and send timeouts' watchdog;
//!   [`listener::registry`], the live connections and which makes room when all slots are
//!   taken; [`listener::timer`], the coarse timer of hyper's per-request header timeout.
//! - [`disk`]: the flash tier under the memory store, on foyer's block engine: our encoding of a
//!   stored response, the write budget, recovery after a restart.
//! - [`body`]: the one response body type, whole-body helpers, and the channel-fed body with a
//!   byte budget (backpressure).
//! - [`access_log`]: one line per request (combined or JSON) to stderr or a file, written off
//!   the request path, reopened for rotation.
//! - [`metrics`]: the proxy's counters and hdrhistogram latencies, as Prometheus text.
//! - [`tls`]: rustls both ways: certificates chosen by SNI with ALPN h2 for clients, verified
//!   `https://` origins.
//! - [`lab`]: the live lab, off the request path: shadow policies fed every lookup (`--shadow`)
//!   and the traffic recorded as an oracleGeneral trace (`--record`).
//! - [`state`]: the admission filter's state on disk (`--state-dir`): atomic writes, tolerant
//!   loads.
//!
//! - [`units`]: human-readable counts, byte sizes and durations, both ways.
//! - [`alloc`]: the binary's global allocator, mimalloc called on its fast paths.

#![warn(missing_docs)]

pub use secondhit_admission::{admission, bloom, clock, hash};
pub mod access_log;
pub mod alloc;
pub mod body;
pub mod config;
pub mod demo;
pub mod disk;
pub mod http_cache;
pub mod lab;
pub mod listener;
pub mod metrics;
pub mod origin;
pub mod origin_server;
pub mod plan;
pub mod proxy;
pub mod replay;
pub mod server;
pub mod sim;
pub mod state;
pub mod store;
pub mod tls;
pub mod trace;
pub mod units;

pub use hash::KeyHash;
