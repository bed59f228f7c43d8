//! # secondhit-proxy
//!
//! `secondhit serve`: a caching reverse proxy in front of configured origins that stores an
//! object only on its **second** request. A time-rotating pair of Bloom filters
//! ([`secondhit_admission`]) remembers "seen once"; the store is moka ([`store`]), optionally
//! above a flash tier ([`disk`]).
//!
//! This crate is what serves traffic and nothing else: it depends on no command-line, plotting,
//! progress-bar or trace-compression crate. The command line is the `secondhit` binary's; the
//! trace lab (simulator, replay, synthetic origin) is `secondhit-lab`, which builds on this crate.
//!
//! ```no_run
//! use secondhit_proxy::clock::SystemClock;
//! use secondhit_proxy::config::Config;
//! use secondhit_proxy::server;
//! use std::sync::Arc;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = Config::default();
//! config.origin = Some("http://127.0.0.1:8081".parse()?);
//! let running = server::start(config.validate()?, Arc::new(SystemClock::new())).await?;
//! println!("serving on {}", running.addr);
//! running.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## Layout
//!
//! The core, re-exported: [`admission`], [`bloom`], [`clock`] and [`hash`] from
//! `secondhit-admission` (the filter and policies any proxy can embed), and [`store`]
//! (`secondhit-store`: moka configured once, the exact eviction stores, the lane a shadow policy
//! steps).
//!
//! The request path:
//! - [`listener`]: the one accept loop (connection limits, first-byte timeout, HTTP/1.1 and h2c,
//!   graceful shutdown) every server here uses; [`listener::activity`], the idle and send
//!   timeouts' watchdog; [`listener::registry`], the live connections and which makes room when
//!   all slots are taken; [`listener::timer`], the coarse timer of hyper's header timeout.
//! - [`proxy`]: the request path as phases (check, scrub, plan, lookup, admit, fetch, classify,
//!   pump), each in its own file: [`proxy::authority`] (Host validation and normalisation),
//!   [`proxy::check`], [`proxy::hit`], [`proxy::coalesce`] (with [`proxy::growing`], the body a
//!   coalesced fetch streams to every waiter while it is stored), [`proxy::fetch`],
//!   [`proxy::classify`], [`proxy::cached`] (store entries and their weight) and
//!   [`proxy::outcome`] (`Outcome`, the typed `Cache-Status`, `Refusal`), [`proxy::slice`]
//!   (large objects in slices); privately, `revalidate.rs` (stale objects confirmed with the
//!   origin, background refreshes), `pump.rs` (the body streamed to the client and stored once
//!   complete), `upstream.rs` (an origin group's servers tried in turn) and `build.rs` (building
//!   and reloading).
//! - [`http_cache`]: RFC 9111 rules as pure functions: request plan, storability, freshness,
//!   age, keys, Vary variant keys, conditional requests, ranges, hop-by-hop and unkeyed headers.
//! - [`origin`]: routing to configured origins only, the pooled keep-alive client, origin
//!   failure kinds; [`origin::group`], groups of servers (balancing, passive health, the admin
//!   view and metrics); [`origin::health`], active probes; [`origin::h1`], the lean HTTP/1
//!   exchange (head parser, framing, chunked decoder) the pool uses for plain-HTTP origins.
//! - [`body`]: the one response body type, whole-body helpers, and the channel-fed body with a
//!   byte budget (backpressure).
//! - [`pages`]: large stored bodies in sealed memory files, sent to plain-TCP clients with
//!   `sendfile` instead of copied into the socket.
//! - [`disk`]: the flash tier under the memory store, on foyer's block engine: our encoding of a
//!   stored response, the write budget, recovery after a restart.
//!
//! Around it:
//! - [`config`]: `serve`'s configuration, parsed once into types, and the cross-field
//!   `validate()` that yields a [`ValidConfig`](config::ValidConfig).
//! - [`server`]: the public and admin listeners and the admin endpoints.
//! - [`metrics`]: the proxy's counters and lock-free latency histograms, and the one
//!   prometheus-client registry each scrape fills from the proxy, the live lab and the flash
//!   tier.
//! - [`access_log`]: one line per request (combined or JSON), written off the request path,
//!   reopened for rotation.
//! - [`tls`]: rustls both ways: certificates chosen by SNI with ALPN h2 for clients, verified
//!   `https://` origins.
//! - [`lab`]: the live lab, off the request path: shadow policies fed every lookup and the
//!   traffic recorded as an oracleGeneral trace.
//! - [`state`]: the admission filter's state on disk: atomic writes, tolerant loads.
//! - [`units`]: human-readable counts, byte sizes and durations, both ways.

#![warn(missing_docs)]

pub use secondhit_admission::{admission, bloom, clock, hash};
pub use secondhit_store as store;
pub mod access_log;
pub mod body;
pub mod config;
pub mod disk;
pub mod http_cache;
pub mod lab;
pub mod listener;
pub mod metrics;
pub mod origin;
pub mod pages;
pub mod proxy;
pub mod server;
pub mod state;
pub mod tls;
pub mod units;

pub use hash::KeyHash;
