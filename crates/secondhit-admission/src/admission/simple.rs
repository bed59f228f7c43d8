//! The memoryless baselines researchers compare a filter against: admit with a fixed
//! probability ([`Probabilistic`], `prob:P`) and admit objects up to a size ([`SizeLimit`],
//! `size:BYTES`).

use super::counter::Counter;

/// What a memoryless policy counts: its admissions and deferrals.
#[derive(Debug, Default)]
struct Tally {
    admitted: Counter,
    deferred: Counter,
}

impl Tally {
    /// Counts `admit` and returns it as a decision.
    fn decide(&self, admit: bool) -> Decision {
        if admit {
            self.admitted.incr();
            Decision::Admit
        } else {
            self.deferred.incr();
            Decision::Defer
        }
    }

    fn stats(&self) -> Stats {
        Stats {
            admitted: self.admitted.get(),
            deferred: self.deferred.get(),
            ..Stats::default()
        }
    }
}
use super::{Admission, Decision, Policy, Stats};
use crate::hash::KeyHash;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Admits each miss with probability `p`, drawn from a seeded generator (SplitMix64): the same
/// decisions, miss for miss, on every run with the same seed. Thread-safe: concurrent misses
/// each take their own draw.
#[derive(Debug)]
pub struct Probabilistic {
    /// Admit when a draw is below this (`p x 2^64`, saturating).
    threshold: u64,
    /// `p` in parts per ten million, for the name.
    per_ten_million: u32,
    state: AtomicU64,
    tally: Tally,
}

/// The generator's seed when none is given.
pub const DEFAULT_SEED: u64 = 0x5ec0_4d41_7b10_0f17;

impl Probabilistic {
    /// Admits with probability `per_ten_million / 10^7`, drawing from `seed`.
    pub fn new(per_ten_million: u32, seed: u64) -> Self {
        let p = f64::from(per_ten_million.min(10_000_000)) / 1e7;
        let threshold = if p >= 1.0 {
            u64::MAX
        } else {
            (p * 18_446_744_073_709_551_616.0) as u64
        };
        Probabilistic {
            threshold,
            per_ten_million,
            state: AtomicU64::new(seed),
            tally: Tally::default(),
        }
    }

    fn draw(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(0x9e37_79b9_7f4a_7c15, Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Admission for Probabilistic {
    fn on_miss(&self, _key: KeyHash, _now: Duration) -> Decision {
        self.tally
            .decide(self.threshold == u64::MAX || self.draw() < self.threshold)
    }

    fn stats(&self) -> Stats {
        self.tally.stats()
    }

    fn name(&self) -> String {
        Policy::Prob(self.per_ten_million).to_string()
    }
}

/// Admits objects of at most `limit` bytes. It needs the object's size: a host that knows it
/// calls [`Admission::on_miss_sized`]; [`Admission::on_miss`] (size unknown) admits.
#[derive(Debug)]
pub struct SizeLimit {
    limit: u64,
    tally: Tally,
}

impl SizeLimit {
    /// Admits objects up to `limit` bytes.
    pub fn new(limit: u64) -> Self {
        SizeLimit {
            limit,
            tally: Tally::default(),
        }
    }
}

impl Admission for SizeLimit {
    fn on_miss(&self, _key: KeyHash, _now: Duration) -> Decision {
        self.tally.decide(true)
    }

    fn on_miss_sized(&self, _key: KeyHash, size: u64, _now: Duration) -> Decision {
        self.tally.decide(size <= self.limit)
    }

    fn stats(&self) -> Stats {
        self.tally.stats()
    }

    fn name(&self) -> String {
        Policy::Size(self.limit).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_about_p_and_the_same_misses_on_every_run() {
        let run = || {
            let p = Probabilistic::new(2_500_000, DEFAULT_SEED);
            (0..100_000u64)
                .map(|i| p.on_miss(KeyHash::of_u64(i), Duration::ZERO).is_admit())
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        let admitted = a.iter().filter(|x| **x).count();
        assert!((24_000..26_000).contains(&admitted), "{admitted}");
        let all = Probabilistic::new(10_000_000, 1);
        assert!((0..1000).all(|i| all.on_miss(KeyHash::of_u64(i), Duration::ZERO).is_admit()));
        let none = Probabilistic::new(0, 1);
        assert!((0..1000).all(|i| !none.on_miss(KeyHash::of_u64(i), Duration::ZERO).is_admit()));
        assert_eq!(none.stats().deferred, 1000);
        assert_eq!(Probabilistic::new(2_500_000, 1).name(), "prob:0.25");
    }

    #[test]
    fn size_limit_admits_up_to_the_limit_when_told_the_size() {
        let s = SizeLimit::new(1000);
        let k = KeyHash::of_u64(1);
        assert!(s.on_miss_sized(k, 1000, Duration::ZERO).is_admit());
        assert!(!s.on_miss_sized(k, 1001, Duration::ZERO).is_admit());
        assert!(
            s.on_miss(k, Duration::ZERO).is_admit(),
            "size unknown: admitted"
        );
        assert_eq!((s.stats().admitted, s.stats().deferred), (2, 1));
        assert_eq!(s.name(), "size:1000");
    }
}
