//! `secondhit bloom`: a sizing calculator and self-test for people planning a filter.
//!
//! [`Plan::new`] computes the shape of one generation for `items` keys at a false-positive rate;
//! [`Plan::measure`] builds that filter, inserts `items` distinct keys, probes as many keys never
//! inserted, and records the measured rate and the time per operation.

use crate::bloom::{Bloom, Layout, ParamError, Params};
use crate::hash::KeyHash;
use secondhit_proxy::units;
use serde::Serialize;
use std::fmt::Write as _;
use std::time::Instant;

/// A filter plan and, once measured, what the filter really did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Distinct keys one generation is sized for.
    pub items: u64,
    /// Target false-positive rate.
    pub fpr: f64,
    /// The layout the figures are for.
    pub layout: Layout,
    /// Bits in one generation.
    pub bits: u64,
    /// Bits per expected item.
    pub bits_per_item: f64,
    /// Hash positions per key.
    pub hashes: u32,
    /// Bytes of one generation.
    pub memory_bytes: u64,
    /// Bytes of the rotating pair (two generations).
    pub pair_memory_bytes: u64,
    /// The rate predicted at `items` keys.
    pub predicted_fpr: f64,
    /// Measured rate over `items` probes of keys never inserted (with `measure`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_fpr: Option<f64>,
    /// Mean nanoseconds per insert, hashing included (with `measure`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insert_ns: Option<f64>,
    /// Mean nanoseconds per lookup of a key never inserted, hashing included (with `measure`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookup_ns: Option<f64>,
}

impl Plan {
    /// The plan for `items` keys at `fpr` in `layout`.
    pub fn new(items: u64, fpr: f64, layout: Layout) -> Result<Plan, ParamError> {
        let p = Params::for_rate(items, fpr, layout)?;
        Ok(Plan {
            items,
            fpr,
            layout,
            bits: p.bits,
            bits_per_item: p.bits_per_item(items),
            hashes: p.hashes,
            memory_bytes: p.memory_bytes(),
            pair_memory_bytes: 2 * p.memory_bytes(),
            predicted_fpr: p.expected_fpr(items),
            measured_fpr: None,
            insert_ns: None,
            lookup_ns: None,
        })
    }

    /// The filter's parameters.
    pub fn params(&self) -> Params {
        Params {
            bits: self.bits,
            hashes: self.hashes,
            layout: self.layout,
        }
    }

    /// Builds the filter, inserts keys `0..items`, probes keys `items..2 * items` (never
    /// inserted), and fills in the measured fields. `progress` is called with the operations done
    /// so far out of `2 * items`, every million operations.
    pub fn measure(&mut self, mut progress: impl FnMut(u64)) {
        let filter = Bloom::new(self.params());
        const CHUNK: u64 = 1 << 20;
        let n = self.items;
        let start = Instant::now();
        let mut i = 0;
        while i < n {
            let end = (i + CHUNK).min(n);
            for key in i..end {
                filter.insert(KeyHash::of_u64(key));
            }
            i = end;
            progress(i);
        }
        let insert = start.elapsed();
        let start = Instant::now();
        let mut false_positives = 0u64;
        let mut i = n;
        while i < 2 * n {
            let end = (i + CHUNK).min(2 * n);
            for key in i..end {
                false_positives += u64::from(filter.contains(KeyHash::of_u64(key)));
            }
            i = end;
            progress(i);
        }
        let lookup = start.elapsed();
        self.measured_fpr = Some(false_positives as f64 / n as f64);
        self.insert_ns = Some(insert.as_nanos() as f64 / n as f64);
        self.lookup_ns = Some(lookup.as_nanos() as f64 / n as f64);
    }

    /// The plan as a short human-readable report.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let pct = |x: f64| format!("{:.4} %", x * 100.0);
        let _ = writeln!(
            s,
            "Bloom filter for {} items at {} ({} layout)",
            units::count(self.items),
            pct(self.fpr),
            self.layout
        );
        let _ = writeln!(s, "  bits            {}", units::count(self.bits));
        let _ = writeln!(s, "  bits per item   {:.2}", self.bits_per_item);
        let _ = writeln!(s, "  hashes (k)      {}", self.hashes);
        let _ = writeln!(
            s,
            "  memory          {} per generation, {} for the rotating pair",
            units::bytes(self.memory_bytes),
            units::bytes(self.pair_memory_bytes)
        );
        let _ = writeln!(s, "  predicted FPR   {}", pct(self.predicted_fpr));
        if let (Some(fpr), Some(ins), Some(look)) =
            (self.measured_fpr, self.insert_ns, self.lookup_ns)
        {
            let _ = writeln!(
                s,
                "measured ({} inserts, {} lookups of keys never inserted, one thread)",
                units::count(self.items),
                units::count(self.items)
            );
            let _ = writeln!(s, "  measured FPR    {}", pct(fpr));
            let _ = writeln!(s, "  insert          {ins:.1} ns/op");
            let _ = writeln!(s, "  lookup          {look:.1} ns/op");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hundred_million_at_one_percent() {
        let p = Plan::new(100_000_000, 0.01, Layout::Standard).unwrap();
        assert_eq!(p.hashes, 7);
        assert!((p.bits_per_item - 9.585).abs() < 0.001);
        let text = p.to_text();
        assert!(
            text.contains("114.3 MiB per generation, 228.5 MiB for the rotating pair"),
            "{text}"
        );
        assert!(text.contains("958,505,838"), "{text}");
    }

    #[test]
    fn measuring_fills_in_the_rate_and_times() {
        let mut p = Plan::new(50_000, 0.01, Layout::Blocked).unwrap();
        let mut calls = 0;
        p.measure(|_| calls += 1);
        assert_eq!(calls, 2);
        let fpr = p.measured_fpr.unwrap();
        assert!(fpr > 0.005 && fpr < 0.0115, "{fpr}");
        assert!(p.insert_ns.unwrap() > 0.0 && p.lookup_ns.unwrap() > 0.0);
        let json = serde_json::to_value(&p).unwrap();
        for field in [
            "bits",
            "bits_per_item",
            "hashes",
            "memory_bytes",
            "measured_fpr",
            "insert_ns",
            "lookup_ns",
        ] {
            assert!(json.get(field).is_some(), "{field} missing from {json}");
        }
    }
}
