//! A cumulative counter that many threads can bump without fighting over one cache line.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

const STRIPES: usize = 16;

/// One stripe alone on its cache line.
#[derive(Default)]
#[repr(align(64))]
struct Cell(AtomicU64);

/// A counter striped over 16 cache lines; each thread bumps the stripe it was assigned on its
/// first use. Reading sums the stripes, so a read concurrent with bumps may miss the newest ones.
#[derive(Default)]
pub(crate) struct Counter {
    cells: [Cell; STRIPES],
}

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, Relaxed) % STRIPES;
}

impl Counter {
    #[inline]
    pub(crate) fn incr(&self) {
        let i = STRIPE.with(|s| *s);
        self.cells[i].0.fetch_add(1, Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.cells.iter().map(|c| c.0.load(Relaxed)).sum()
    }
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sums_over_threads() {
        let c = Arc::new(Counter::default());
        let threads: Vec<_> = (0..20)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| c.incr()))
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(c.get(), 20_000);
    }
}
