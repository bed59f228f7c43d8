//! The second-hit policy in front of a plain moka cache: the smallest embedding of the library.
//!
//! On a miss the object is fetched from the "origin" and stored only if the admission policy
//! says so. One-hit wonders never take a cache write.
//!
//! `cargo run --example moka_second_hit`

use moka::sync::Cache;
use secondhit::admission::{Admission, Decision, Policy, Settings};
use secondhit::clock::{Clock, SystemClock};
use secondhit::KeyHash;
use std::sync::atomic::{AtomicU64, Ordering};

/// An edge cache: moka for storage, a second-hit policy for admission.
struct Edge<C: Clock> {
    store: Cache<String, Vec<u8>>,
    admission: Box<dyn Admission>,
    clock: C,
    origin_fetches: AtomicU64,
}

impl<C: Clock> Edge<C> {
    fn get(&self, url: &str) -> (Vec<u8>, &'static str) {
        if let Some(body) = self.store.get(url) {
            return (body, "HIT");
        }
        // Decide before fetching: the decision is pure, and the fetch is the slow part.
        let decision = self
            .admission
            .on_miss(KeyHash::of(url.as_bytes()), self.clock.now());
        let body = self.fetch(url);
        match decision {
            Decision::Admit => {
                self.store.insert(url.to_string(), body.clone());
                (body, "MISS")
            }
            Decision::Defer => (body, "DEFERRED"),
        }
    }

    fn fetch(&self, url: &str) -> Vec<u8> {
        self.origin_fetches.fetch_add(1, Ordering::Relaxed);
        format!("body of {url}").into_bytes()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let edge = Edge {
        store: Cache::builder()
            .max_capacity(64 * 1024 * 1024)
            .weigher(|k: &String, v: &Vec<u8>| (k.len() + v.len()).try_into().unwrap_or(u32::MAX))
            .build(),
        admission: Settings::default().build(Policy::SecondHit)?,
        clock: SystemClock::new(),
        origin_fetches: AtomicU64::new(0),
    };

    // A popular page requested three times, and ten one-hit wonders.
    let mut requests = vec!["/index.html"; 3];
    let wonders: Vec<String> = (0..10).map(|i| format!("/once/{i}.jpg")).collect();
    requests.extend(wonders.iter().map(String::as_str));

    for url in &requests {
        let (body, outcome) = edge.get(url);
        println!("{outcome:<8} {url} ({} bytes)", body.len());
    }
    edge.store.run_pending_tasks();
    let stats = edge.admission.stats();
    println!(
        "\norigin fetches: {}, cache writes: {}, deferred: {}, entries stored: {}",
        edge.origin_fetches.load(Ordering::Relaxed),
        stats.admitted,
        stats.deferred,
        edge.store.entry_count()
    );
    Ok(())
}
