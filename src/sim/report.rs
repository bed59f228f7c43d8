//! The simulation report as a table for people and as CSV for spreadsheets.

use super::{Report, RunResult};
use crate::units;
use std::fmt::Write as _;

impl Report {
    /// The `admit-all` result with the same capacity and eviction, the baseline of a row.
    fn baseline(&self, r: &RunResult) -> Option<&RunResult> {
        self.results.iter().find(|b| {
            b.policy == "admit-all"
                && b.capacity_bytes == r.capacity_bytes
                && b.eviction == r.eviction
        })
    }

    /// A table: one row per run; each policy's difference against `admit-all` in percentage
    /// points, and its cache writes against `admit-all`'s in percent.
    pub fn to_text(&self) -> String {
        let s = &self.summary;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "trace {} ({}): {} requests, {} objects, {:.2} % one-hit wonders, working set {}",
            self.trace,
            self.format,
            units::count(s.requests),
            units::count(s.objects),
            s.one_hit_wonder_ratio * 100.0,
            units::bytes(s.working_set_bytes)
        );
        let st = &self.settings;
        let _ = writeln!(
            out,
            "filter: window {}, {} keys per generation at {} % FPR, {} layout; store {}\n",
            st.window,
            units::count(st.expected_items),
            st.fpr * 100.0,
            st.layout,
            st.store
        );
        let _ = writeln!(
            out,
            "{:<18} {:<8} {:<18} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>13} {:>8}",
            "capacity",
            "eviction",
            "policy",
            "hit",
            "vs all",
            "byte hit",
            "vs all",
            "writes",
            "vs all",
            "bloom +/-",
            "Mreq/s"
        );
        // Traces without sizes count every request as 1 byte: their capacity is in objects.
        let sizeless = s.requested_bytes == s.requests;
        for r in &self.results {
            let size = if sizeless {
                format!("{} obj", units::count(r.capacity_bytes))
            } else {
                units::bytes(r.capacity_bytes)
            };
            let cap = match r.capacity_fraction {
                Some(f) => format!("{size} ({} %)", f * 100.0),
                None => size,
            };
            let (dh, db, dw) = match self.baseline(r) {
                Some(b) if b.policy != r.policy => (
                    format!("{:+.2} pp", (r.hit_ratio - b.hit_ratio) * 100.0),
                    format!("{:+.2} pp", (r.byte_hit_ratio - b.byte_hit_ratio) * 100.0),
                    if b.admissions > 0 {
                        format!(
                            "{:+.1} %",
                            (r.admissions as f64 / b.admissions as f64 - 1.0) * 100.0
                        )
                    } else {
                        String::new()
                    },
                ),
                _ => Default::default(),
            };
            let bloom = match (r.approx_extra_admissions, r.approx_missed_admissions) {
                (Some(a), Some(m)) => format!("+{a}/-{m}"),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "{:<18} {:<8} {:<18} {:>8.2}% {:>9} {:>8.2}% {:>9} {:>10} {:>8} {:>13} {:>8.1}",
                cap,
                r.eviction,
                r.policy,
                r.hit_ratio * 100.0,
                dh,
                r.byte_hit_ratio * 100.0,
                db,
                units::count(r.admissions),
                dw,
                bloom,
                r.requests_per_sec / 1e6
            );
        }
        let _ = writeln!(
            out,
            "\npp: percentage points against admit-all at the same size; writes: cache writes (admissions);\nbloom +/-: admissions the Bloom filter added / lost against the exact policy with the same windows.\nwall time {:.2} s",
            self.wall_secs
        );
        out
    }

    /// One CSV line per run, with a header.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "trace,policy,eviction,store,capacity_bytes,capacity_fraction,requests,hits,hit_bytes,hit_ratio,byte_hit_ratio,admissions,admitted_bytes,origin_bytes,store_rejections,rotations,approx_extra_admissions,approx_missed_admissions,requests_per_sec\n",
        );
        let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
        for r in &self.results {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.0}",
                csv_field(&self.trace),
                r.policy,
                r.eviction,
                r.store,
                r.capacity_bytes,
                r.capacity_fraction
                    .map(|f| f.to_string())
                    .unwrap_or_default(),
                r.requests,
                r.hits,
                r.hit_bytes,
                r.hit_ratio,
                r.byte_hit_ratio,
                r.admissions,
                r.admitted_bytes,
                r.origin_bytes,
                r.store_rejections,
                r.rotations,
                opt(r.approx_extra_admissions),
                opt(r.approx_missed_admissions),
                r.requests_per_sec
            );
        }
        out
    }
}

/// Quotes a CSV field when it needs it.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
