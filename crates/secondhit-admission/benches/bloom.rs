//! Insert and lookup cost of our Bloom filter (both layouts) against the `fastbloom` and
//! `bloomfilter` crates, for a filter that fits in cache and one far larger than the last-level
//! cache, all at the bits per item of a standard filter at 1 % (our blocked layout gets the
//! few extra bits it needs to meet 1 % too). Before the timings it prints each filter's measured
//! false-positive rate.
//!
//! `cargo bench --bench bloom`; `SECONDHIT_BENCH_LARGE=N` changes the large size (default 10^8).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use foldhash::fast::FixedState;
use secondhit_admission::bloom::{Bloom, Layout, Params};
use secondhit_admission::KeyHash;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The operations every contender offers.
trait Filter {
    fn insert(&mut self, key: u64);
    fn contains(&self, key: u64) -> bool;
    fn clear(&mut self);
}

struct Ours(Bloom);
impl Filter for Ours {
    fn insert(&mut self, key: u64) {
        self.0.insert(KeyHash::of_u64(key));
    }
    fn contains(&self, key: u64) -> bool {
        self.0.contains(KeyHash::of_u64(key))
    }
    fn clear(&mut self) {
        self.0.clear()
    }
}

struct Fast(fastbloom::BloomFilter<FixedState>);
impl Filter for Fast {
    fn insert(&mut self, key: u64) {
        self.0.insert(&key);
    }
    fn contains(&self, key: u64) -> bool {
        self.0.contains(&key)
    }
    fn clear(&mut self) {
        self.0.clear()
    }
}

struct FastAtomic(fastbloom::AtomicBloomFilter<FixedState>);
impl Filter for FastAtomic {
    fn insert(&mut self, key: u64) {
        self.0.insert(&key);
    }
    fn contains(&self, key: u64) -> bool {
        self.0.contains(&key)
    }
    fn clear(&mut self) {
        self.0.clear()
    }
}

struct Classic(bloomfilter::Bloom<u64>);
impl Filter for Classic {
    fn insert(&mut self, key: u64) {
        self.0.set(&key);
    }
    fn contains(&self, key: u64) -> bool {
        self.0.check(&key)
    }
    fn clear(&mut self) {
        self.0.clear()
    }
}

fn contenders(n: u64) -> Vec<(&'static str, Box<dyn Filter>)> {
    let standard = Params::for_rate(n, 0.01, Layout::Standard).unwrap();
    let blocked = Params::for_rate(n, 0.01, Layout::Blocked).unwrap();
    let bits = standard.bits as usize;
    // fastbloom with foldhash, the hasher of its own benchmarks: its fastest configuration.
    let hasher = FixedState::with_seed(7);
    vec![
        ("secondhit-standard", Box::new(Ours(Bloom::new(standard)))),
        ("secondhit-blocked", Box::new(Ours(Bloom::new(blocked)))),
        (
            "fastbloom",
            Box::new(Fast(
                fastbloom::BloomFilter::with_num_bits(bits)
                    .hasher(hasher.clone())
                    .expected_items(n as usize),
            )),
        ),
        (
            "fastbloom-atomic",
            Box::new(FastAtomic(
                fastbloom::AtomicBloomFilter::with_num_bits(bits)
                    .hasher(hasher)
                    .expected_items(n as usize),
            )),
        ),
        (
            "bloomfilter",
            Box::new(Classic(
                bloomfilter::Bloom::new(bits.div_ceil(8), n as usize).unwrap(),
            )),
        ),
    ]
}

fn bench_size(c: &mut Criterion, label: &str, n: u64) {
    let mut filters = contenders(n);
    // Fill each to its design load; report the false-positive rate it really has there.
    eprintln!("\n{label}: {n} keys, measured false-positive rate over 1,000,000 probes:");
    for (name, f) in filters.iter_mut() {
        let start = Instant::now();
        for k in 0..n {
            f.insert(k);
        }
        let fp = (0..1_000_000u64)
            .filter(|i| f.contains(u64::MAX - i))
            .count();
        eprintln!(
            "  {name:<20} {:.3} %  (filled in {:.1} s)",
            fp as f64 / 1e4,
            start.elapsed().as_secs_f64()
        );
    }

    let mut group = c.benchmark_group(format!("bloom-{label}"));
    group.throughput(Throughput::Elements(1));
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    group.sample_size(20);
    for (name, f) in filters.iter() {
        let mut next = 0u64;
        group.bench_function(BenchmarkId::new("lookup-member", name), |b| {
            b.iter(|| {
                next = (next + 1) % n;
                black_box(f.contains(black_box(next)))
            })
        });
        let mut next = 0u64;
        group.bench_function(BenchmarkId::new("lookup-absent", name), |b| {
            b.iter(|| {
                next += 1;
                black_box(f.contains(black_box(u64::MAX - next)))
            })
        });
    }
    // Inserts run into a filter kept between empty and its design load: it is cleared (outside
    // the timed part) whenever it has taken `n` keys.
    for (name, f) in filters.iter_mut() {
        f.clear();
        let mut filled = 0u64;
        group.bench_function(BenchmarkId::new("insert", name), |b| {
            b.iter_custom(|iters| {
                let mut left = iters;
                let mut spent = Duration::ZERO;
                while left > 0 {
                    if filled == n {
                        f.clear();
                        filled = 0;
                    }
                    let batch = left.min(n - filled);
                    let start = Instant::now();
                    for k in filled..filled + batch {
                        f.insert(black_box(k));
                    }
                    spent += start.elapsed();
                    filled += batch;
                    left -= batch;
                }
                spent
            })
        });
    }
    group.finish();
}

fn bloom(c: &mut Criterion) {
    bench_size(c, "in-cache-1e5", 100_000);
    let large = std::env::var("SECONDHIT_BENCH_LARGE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000_000u64);
    bench_size(c, "beyond-llc", large);
}

criterion_group!(benches, bloom);
criterion_main!(benches);
