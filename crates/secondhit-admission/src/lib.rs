//! # secondhit-admission
//!
//! Cache admission that keeps one-hit wonders out of a cache: an object is stored only on its
//! **second** request. "Seen before" is a time-rotating pair of concurrent Bloom filters
//! (`current` takes inserts, `previous` is read-only, swapped atomically with `arc-swap`), so the
//! memory is fixed (about ten bits a key at a 1 % false-positive rate) and old sightings age out.
//!
//! The crate is a plugin: it does no I/O, owns no cache and reads no clock. A host (a proxy, a
//! simulator) asks [`Admission::on_miss`](admission::Admission::on_miss) on each cache miss,
//! passing the key's hash and its own `now`, and stores the fetched object only on
//! [`Decision::Admit`](admission::Decision::Admit). Its only dependencies are `arc-swap` and
//! `xxhash-rust` (and `serde`, behind the `serde` feature).
//!
//! ```
//! use secondhit_admission::admission::{Admission, Decision, Policy, Settings};
//! use secondhit_admission::KeyHash;
//! use std::time::Duration;
//!
//! let policy = Settings::default().build(Policy::SecondHit)?; // 1 h windows, 10^6 keys, 1 %
//! let key = KeyHash::of(b"GET https://cdn.example/img/1.jpg");
//! assert_eq!(policy.on_miss(key, Duration::ZERO), Decision::Defer); // first sighting
//! assert_eq!(policy.on_miss(key, Duration::from_secs(1)), Decision::Admit); // second
//! # Ok::<(), secondhit_admission::admission::PolicyError>(())
//! ```
//!
//! ## Layout
//!
//! - [`hash`]: one fixed-seed 128-bit hash per key ([`KeyHash`]), shared by every filter.
//! - [`bloom`]: the concurrent Bloom filter (standard and cache-line-blocked layouts, sizing
//!   from items and false-positive rate) and its counting variant (4-bit saturating counters).
//! - [`admission`]: the [`Admission`](admission::Admission) trait and its policies: admit-all,
//!   second-hit (a rotating Bloom pair), second-hit-exact, nth-hit:N, nth-hit-exact:N; the
//!   [`Settings`](admission::Settings) that build any of them from a name.
//! - [`clock`]: injected time: the [`Clock`](clock::Clock) trait, the system's monotonic clock
//!   and a manual clock for tests.
//!
//! ## Features
//!
//! - `serde`: `Serialize` on decisions, statistics and filter parameters.

#![warn(missing_docs)]

pub mod admission;
pub mod bloom;
pub mod clock;
pub mod hash;

pub use hash::KeyHash;

/// The README's example, compiled and run as a doctest so that it stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
