//! Properties of the Bloom filter and the rotating policies: no false negatives (also under
//! concurrent inserts), measured false-positive rates, and the second-hit window guarantee.
//! Every run uses the same seeds, so a failure reproduces.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use secondhit_admission::admission::{Decision, Policy, Settings};
use secondhit_admission::bloom::{Bloom, Layout, Params};
use secondhit_admission::KeyHash;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

fn config(cases: u32) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(0x5ec0_4d41),
        failure_persistence: None,
        ..Config::default()
    }
}

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![Just(Layout::Standard), Just(Layout::Blocked)]
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn no_false_negatives(
        keys in prop::collection::vec(any::<u64>(), 1..2_000),
        bits in 64u64..50_000,
        hashes in 1u32..16,
        layout in layout(),
    ) {
        let f = Bloom::new(Params::new(bits, hashes, layout).unwrap());
        for &k in &keys {
            f.insert(KeyHash::of_u64(k));
        }
        for &k in &keys {
            prop_assert!(f.contains(KeyHash::of_u64(k)));
            prop_assert!(f.insert(KeyHash::of_u64(k)), "re-insert must report seen");
        }
    }

    #[test]
    fn no_false_negatives_with_concurrent_inserts(
        keys in prop::collection::vec(any::<u64>(), 100..4_000),
        layout in layout(),
    ) {
        // A small filter, so threads keep writing the same words at once.
        let f = Arc::new(Bloom::new(Params::new(2_048, 5, layout).unwrap()));
        let keys = Arc::new(keys);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (f, keys) = (f.clone(), keys.clone());
                std::thread::spawn(move || {
                    for k in keys.iter().skip(t).step_by(4) {
                        f.insert(KeyHash::of_u64(*k));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for &k in keys.iter() {
            prop_assert!(f.contains(KeyHash::of_u64(k)));
        }
    }

    /// A key seen at time t is admitted on any later miss before t + window (while the filter is
    /// under its sized item count); exact second-hit forgets anything not seen for two windows.
    #[test]
    fn second_hit_window_guarantee(
        steps in prop::collection::vec((0u64..40, 0u64..50), 1..400),
        window in 1u64..100,
        exact in any::<bool>(),
    ) {
        let settings = Settings {
            window: Some(Duration::from_secs(window)),
            expected_items: 10_000,
            fpr: 0.01,
            layout: Layout::Blocked,
        };
        let policy = settings
            .build(if exact { Policy::SecondHitExact } else { Policy::SecondHit })
            .unwrap();
        let mut last_seen: HashMap<u64, u64> = HashMap::new();
        let mut now = 0u64;
        for (key, dt) in steps {
            now += dt;
            let d = policy.on_miss(KeyHash::of_u64(key), Duration::from_secs(now));
            match last_seen.get(&key) {
                Some(&t) if now < t + window => prop_assert_eq!(d, Decision::Admit),
                Some(&t) if exact && now >= t + 2 * window => prop_assert_eq!(d, Decision::Defer),
                None if exact => prop_assert_eq!(d, Decision::Defer),
                _ => {}
            }
            last_seen.insert(key, now);
        }
    }
}

/// Inserts `n` distinct keys, probes `probes` keys never inserted, returns the measured rate.
fn measured_fpr(params: Params, n: u64, probes: u64) -> f64 {
    let f = Bloom::new(params);
    for i in 0..n {
        f.insert(KeyHash::of_u64(i));
    }
    let fp = (n..n + probes)
        .filter(|&i| f.contains(KeyHash::of_u64(i)))
        .count();
    fp as f64 / probes as f64
}

#[test]
fn measured_false_positive_rate_is_within_15_percent_of_target() {
    let n = 100_000;
    for (fpr, probes) in [(0.1, 200_000), (0.01, 1_000_000), (0.001, 4_000_000)] {
        for layout in [Layout::Standard, Layout::Blocked] {
            let params = Params::for_rate(n, fpr, layout).unwrap();
            let got = measured_fpr(params, n, probes);
            let rel = (got - fpr).abs() / fpr;
            eprintln!(
                "{layout} p={fpr}: measured {got:.6} ({:+.1} %)",
                (got / fpr - 1.0) * 100.0
            );
            assert!(rel <= 0.15, "{layout} at p = {fpr}: measured {got}");
        }
    }
}
