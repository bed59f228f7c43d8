//! # secondhit-pingora
//!
//! Second-hit cache admission inside a [Cloudflare Pingora](https://github.com/cloudflare/pingora)
//! caching proxy. It is the second host of the `secondhit-admission` plugin (the first is the
//! `secondhit` server itself), and it shows that the plugin needs nothing from its host but a
//! key hash and a clock reading on each miss.
//!
//! [`SecondHitProxy`] implements Pingora's [`ProxyHttp`](pingora_proxy::ProxyHttp) for one origin.
//! GET and HEAD requests go through Pingora's HTTP cache (an in-memory
//! [`MemCache`](pingora_cache::MemCache) unless you pass your own storage). The admission policy
//! sits in the `response_cache_filter` hook: when the origin's response is cacheable by its own
//! headers and the lookup was a plain miss, the policy is asked with the key's hash. On
//! [`Decision::Defer`](secondhit_admission::admission::Decision::Defer) the hook answers
//! `Uncacheable(NoCacheReason::Deferred)`, so Pingora streams the response to the client without
//! storing it. Hits, stale entries and responses that are not cacheable anyway never reach the
//! policy. `response_filter` then adds `x-cache: HIT|MISS|DEFERRED|BYPASS` to every response
//! (see [`CacheStatus`]).
//!
//! No TLS: Pingora is built with its default (empty) feature set, and the origin is reached over
//! plain HTTP/1.1.
//!
//! ## Module map
//!
//! - [`proxy`]: [`SecondHitProxy`], the `ProxyHttp` implementation with its constructors and
//!   options, and [`RequestCtx`], what it remembers during one request.
//! - [`key`]: [`cache_key`], the Pingora [`CacheKey`](pingora_cache::CacheKey) of a request
//!   (host + path and query), and [`key_hash`], the
//!   [`KeyHash`](secondhit_admission::KeyHash) the policy sees.
//! - [`status`]: [`CacheStatus`], which turns Pingora's cache phase into the `x-cache` value, and
//!   [`CACHE_STATUS_HEADER`].
//!
//! ## Running it
//!
//! Build a policy, hand it to [`SecondHitProxy::new`], wrap the proxy with
//! [`pingora_proxy::http_proxy_service`] and add that service to a Pingora
//! [`Server`](pingora_core::server::Server); the example on [`SecondHitProxy`] does exactly
//! that. `tests/second_hit.rs` runs the same setup on loopback against a counting origin.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod key;
pub mod proxy;
pub mod status;

pub use key::{cache_key, key_hash};
pub use proxy::{RequestCtx, SecondHitProxy};
pub use status::{CacheStatus, CACHE_STATUS_HEADER};
