//! What storing a large body costs: a heap copy (`cache.sendfile = false`) against a sealed
//! memory file (`pages::seal`, the default for bodies of 128 KiB or more), each dropped again
//! inside the timing, as an evicted body is. The hits they save are measured live by
//! `cargo xtask bench sendfile`.
//!
//! `cargo bench -p secondhit-proxy --bench pages`

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use secondhit_proxy::pages;

fn store(c: &mut Criterion) {
    let mut g = c.benchmark_group("store and drop a body");
    for size in [pages::MIN_BODY, 1024 * 1024] {
        let body = Bytes::from((0..size).map(|i| i as u8).collect::<Vec<_>>());
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("heap copy", size), &body, |b, body| {
            b.iter(|| Bytes::copy_from_slice(body))
        });
        g.bench_with_input(
            BenchmarkId::new("sealed memory file", size),
            &body,
            |b, body| b.iter(|| pages::seal(body).expect("sealed")),
        );
    }
    g.finish();
}

criterion_group!(benches, store);
criterion_main!(benches);
