//! Loading a filter snapshot from arbitrary bytes: never panics, and a refused snapshot changes
//! nothing (the policy still defers a key it never saw).
#![no_main]
use libfuzzer_sys::fuzz_target;
use secondhit::admission::{Decision, Policy, Settings};
use secondhit::KeyHash;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let settings = Settings { expected_items: 1_000, ..Settings::default() };
    for policy in [Policy::SecondHit, Policy::NthHit(3), Policy::SecondHitExact] {
        let p = settings.build(policy).unwrap();
        let now = Duration::from_secs(1_000);
        if p.restore(data, now, now).is_err() {
            assert_eq!(p.on_miss(KeyHash::of(b"never seen"), now), Decision::Defer);
        }
    }
});
