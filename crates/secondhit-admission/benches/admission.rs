//! Admission policies: `on_miss` throughput from 1 and 2 threads, and how many admissions the
//! approximate policies add against their exact counterparts (nth-hit's over-admission).
//!
//! `cargo bench --bench admission` prints two tables. Every loop is bounded by a fixed count.

use secondhit_admission::admission::{Admission, Policy, Settings};
use secondhit_admission::bloom::Layout;
use secondhit_admission::KeyHash;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const OPS_PER_THREAD: u64 = 4_000_000;

/// A deterministic skewed key stream: 64-bit LCG, squared uniform over `universe` keys, so low
/// ids are requested far more often than high ones.
struct Keys {
    x: u64,
    universe: u64,
}

impl Keys {
    fn new(seed: u64, universe: u64) -> Self {
        Keys {
            x: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            universe,
        }
    }
    fn next(&mut self) -> u64 {
        self.x = self
            .x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let u = (self.x >> 11) as f64 / (1u64 << 53) as f64;
        (u * u * self.universe as f64) as u64
    }
}

/// Total `on_miss` calls per second from `threads` threads, each `OPS_PER_THREAD` calls with
/// its own key stream; time advances 1 us per call, so a 1 s window rotates every million calls.
/// The median of three runs, each on a fresh policy.
fn throughput(build: impl Fn() -> Arc<dyn Admission>, threads: u64) -> f64 {
    let mut runs: Vec<f64> = (0..3).map(|_| throughput_once(build(), threads)).collect();
    runs.sort_by(f64::total_cmp);
    runs[1]
}

fn throughput_once(policy: Arc<dyn Admission>, threads: u64) -> f64 {
    let barrier = Arc::new(Barrier::new(threads as usize + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (policy, barrier) = (policy.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut keys = Keys::new(t + 1, 2_000_000);
                let hashes: Vec<KeyHash> = (0..OPS_PER_THREAD)
                    .map(|_| KeyHash::of_u64(keys.next()))
                    .collect();
                barrier.wait();
                for (i, h) in hashes.into_iter().enumerate() {
                    std::hint::black_box(policy.on_miss(h, Duration::from_micros(i as u64)));
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().expect("bench thread panicked");
    }
    (threads * OPS_PER_THREAD) as f64 / start.elapsed().as_secs_f64()
}

fn throughput_table() {
    println!("on_miss throughput (key hashed beforehand; 1 s window, 1 us per call per thread)");
    println!(
        "| policy | filter | 1 thread (M/s) | 2 threads (M/s) | ns/call, 1 thread |\n|---|---|---:|---:|---:|"
    );
    let rows: [(Policy, Layout, u64); 6] = [
        (Policy::AdmitAll, Layout::Blocked, 1_000_000),
        (Policy::SecondHit, Layout::Blocked, 1_000_000),
        (Policy::SecondHit, Layout::Standard, 1_000_000),
        (Policy::SecondHit, Layout::Blocked, 100_000_000),
        (Policy::NthHit(3), Layout::Blocked, 1_000_000),
        (Policy::SecondHitExact, Layout::Blocked, 1_000_000),
    ];
    for (policy, layout, items) in rows {
        let settings = Settings {
            window: Some(Duration::from_secs(1)),
            expected_items: items,
            fpr: 0.01,
            layout,
        };
        let build =
            || -> Arc<dyn Admission> { Arc::from(settings.build(policy).expect("valid settings")) };
        let one = throughput(build, 1);
        let two = throughput(build, 2);
        let filter = match policy {
            Policy::AdmitAll => "-".to_string(),
            Policy::SecondHitExact => "hash map".to_string(),
            _ => format!("{layout}, {items} items/gen"),
        };
        println!(
            "| {policy} | {filter} | {:.1} | {:.1} | {:.1} |",
            one / 1e6,
            two / 1e6,
            1e9 / one
        );
    }
}

/// Decisions of an approximate policy against its exact counterpart on the same stream:
/// admissions added (over) and lost (under).
fn over_admission_table() {
    println!("\nover-admission against the exact policy (skewed stream, no time rotation)");
    println!("| policy | distinct keys / sized items | requests | exact admissions | approximate admissions | over-admitted | under-admitted |\n|---|---:|---:|---:|---:|---:|---:|");
    let items = 100_000u64;
    for policy in [
        Policy::SecondHit,
        Policy::NthHit(2),
        Policy::NthHit(3),
        Policy::NthHit(4),
        Policy::NthHit(8),
    ] {
        for load in [0.5, 1.0] {
            let settings = Settings {
                window: None,
                expected_items: items,
                fpr: 0.01,
                layout: Layout::Blocked,
            };
            let approx = settings.build(policy).expect("valid settings");
            let exact = settings
                .build(policy.exact_counterpart().expect("approximate policy"))
                .expect("valid settings");
            let universe = (items as f64 * load) as u64;
            // Stop before the approximate pair rotates on count: this table is about the
            // filters' accuracy, not about when they rotate.
            let requests = universe * 3;
            let mut keys = Keys::new(42, universe);
            let (mut over, mut under) = (0u64, 0u64);
            for _ in 0..requests {
                let h = KeyHash::of_u64(keys.next());
                let a = approx.on_miss(h, Duration::ZERO).is_admit();
                let e = exact.on_miss(h, Duration::ZERO).is_admit();
                over += u64::from(a && !e);
                under += u64::from(!a && e);
            }
            let (sa, se) = (approx.stats(), exact.stats());
            assert_eq!(sa.rotations, 0, "the stream must not trigger a rotation");
            println!(
                "| {policy} | {load:.1} | {requests} | {} | {} | {over} ({:.3} %) | {under} |",
                se.admitted,
                sa.admitted,
                over as f64 * 100.0 / se.admitted.max(1) as f64
            );
        }
    }
}

fn main() {
    // `cargo test --benches` runs bench binaries with `--bench` absent: keep that quick.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    throughput_table();
    over_admission_table();
}
