//! The simulation report as a table for people and as CSV for spreadsheets.

use super::{Report, RunResult};
use secondhit_proxy::units;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The answers a sweep gives at one cache size: which admission x eviction pair is best by
/// each measure, and the offline bound. Belady's policies are bounds, not candidates: they are
/// left out of the picks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The cache size.
    pub capacity_bytes: u64,
    /// The highest request hit ratio.
    pub best_hit_ratio: Pick,
    /// The highest byte hit ratio.
    pub best_byte_hit_ratio: Pick,
    /// The most hits per cache write (what each write buys; a pair that writes nothing is left
    /// out).
    pub most_hits_per_write: Option<Pick>,
    /// `belady`'s hit ratio with admit-all at this size, when the sweep ran it: the offline
    /// optimum for objects of one size (a bound, for sized objects).
    pub belady_hit_ratio: Option<f64>,
}

/// One pair and its value by the measure it was picked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pick {
    /// Admission policy.
    pub policy: String,
    /// Eviction policy.
    pub eviction: String,
    /// The measure: a fraction for ratios, hits per write for writes.
    pub value: f64,
}

impl Pick {
    fn of(r: &RunResult, value: f64) -> Pick {
        Pick {
            policy: r.policy.clone(),
            eviction: r.eviction.clone(),
            value,
        }
    }
}

/// Whether a result is of an offline bound (Belady's policies).
fn is_bound(r: &RunResult) -> bool {
    r.eviction.starts_with("belady")
}

impl Report {
    /// The answers per cache size, in the order sizes first appear.
    pub fn answers(&self) -> Vec<Answer> {
        let mut sizes: Vec<u64> = Vec::new();
        // Two-tier runs are not memory pairs: their table says what they are.
        for r in self.results.iter().filter(|r| r.disk.is_none()) {
            if !sizes.contains(&r.capacity_bytes) {
                sizes.push(r.capacity_bytes);
            }
        }
        sizes
            .into_iter()
            .filter_map(|c| {
                let at: Vec<&RunResult> = self
                    .results
                    .iter()
                    .filter(|r| r.disk.is_none())
                    .filter(|r| r.capacity_bytes == c && !is_bound(r))
                    .collect();
                let best = |f: &dyn Fn(&RunResult) -> f64| {
                    at.iter()
                        .copied()
                        .max_by(|a, b| f(a).total_cmp(&f(b)))
                        .map(|r| Pick::of(r, f(r)))
                };
                let per_write = |r: &RunResult| r.hits as f64 / r.admissions as f64;
                Some(Answer {
                    capacity_bytes: c,
                    best_hit_ratio: best(&|r| r.hit_ratio)?,
                    best_byte_hit_ratio: best(&|r| r.byte_hit_ratio)?,
                    most_hits_per_write: at
                        .iter()
                        .copied()
                        .filter(|r| r.admissions > 0)
                        .max_by(|a, b| per_write(a).total_cmp(&per_write(b)))
                        .map(|r| Pick::of(r, per_write(r))),
                    belady_hit_ratio: self.belady(c).map(|b| b.hit_ratio),
                })
            })
            .collect()
    }

    /// The `belady` run with admit-all at `capacity`, if the sweep has one.
    fn belady(&self, capacity: u64) -> Option<&RunResult> {
        self.results.iter().find(|b| {
            b.eviction == "belady"
                && b.policy == "admit-all"
                && b.capacity_bytes == capacity
                && b.disk.is_none()
        })
    }

    /// The `admit-all` result with the same capacity and eviction (and the same flash, if
    /// any), the baseline of a row.
    fn baseline(&self, r: &RunResult) -> Option<&RunResult> {
        let flash = |x: &RunResult| {
            x.disk
                .as_ref()
                .map(|d| (d.capacity_bytes, d.eviction.clone()))
        };
        self.results.iter().find(|b| {
            b.policy == "admit-all"
                && b.capacity_bytes == r.capacity_bytes
                && b.eviction == r.eviction
                && flash(b) == flash(r)
        })
    }

    /// A table: one row per run; each policy's difference against `admit-all` in percentage
    /// points, and its cache writes against `admit-all`'s in percent.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        self.heading(&mut out);
        let _ = writeln!(out);
        if self.results.iter().any(|r| r.disk.is_some()) {
            self.tiers_table(&mut out);
            let _ = writeln!(
                out,
                "\nhit: both tiers; memory, flash: the share of requests each served; flash writes: objects\nwritten to flash (what the flash policy admitted, when memory evicted it or, if memory did not\ntake it, at once); per byte: flash bytes written per byte sent to clients; refused: writes over\n--disk-write-rate."
            );
            // Memory-only runs merged with two-tier ones (`--merge`) follow in their own table.
            if self.results.iter().all(|r| r.disk.is_some()) {
                let _ = writeln!(out, "wall time {:.2} s", self.wall_secs);
                return out;
            }
            let _ = writeln!(out, "\nmemory only:");
        }
        self.memory_table(&mut out);
        self.shield_table(&mut out);
        self.decomposition(&mut out);
        self.best_pairs(&mut out);
        let _ = writeln!(
            out,
            "\npp: percentage points against admit-all at the same size; to opt: against belady (admit-all) at the\nsame size; writes: cache writes (admissions); bloom +/-: admissions the Bloom filter added / lost\nagainst the exact policy with the same windows.\nwall time {:.2} s",
            self.wall_secs
        );
        out
    }

    /// The lines above the tables: the trace, the filter settings, and the sampling and cluster
    /// if any.
    fn heading(&self, out: &mut String) {
        let s = &self.summary;
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
            "filter: window {}, {} keys per generation at {} % FPR, {} layout; store {}",
            st.window,
            units::count(st.expected_items),
            st.fpr * 100.0,
            st.layout,
            st.store
        );
        if st.object_cost > 0 {
            let _ = writeln!(
                out,
                "objects weigh their size and {} bytes each (--object-cost: key, header fields and bookkeeping, as serve charges them); hits and bytes are bodies",
                units::count(st.object_cost)
            );
        }
        if self.format == "secondhit-recording" {
            let _ = writeln!(
                out,
                "a recording of serve: objects weigh what it charged, unstorable responses are never written, a stored copy is a hit only while fresh"
            );
        }
        if let Some(rate) = st.sample {
            let _ = writeln!(
                out,
                "sampled: {} % of the keys (SHARDS); sizes and counts are the sample's, ratios estimate the whole trace's",
                rate * 100.0
            );
        }
        if let Some(n) = st.nodes {
            let split = st.node_capacity.unwrap_or_default() == super::NodeCapacity::Split;
            let _ = writeln!(
                out,
                "cluster: {n} nodes on a consistent-hash ring, each with {}; figures are the cluster's (--json per_node has each node's)",
                if split { "capacity / N (the same total memory)" } else { "the whole capacity" }
            );
        }
    }

    /// A cache size as the tables show it: bytes, or objects for traces without sizes (which
    /// count every request as 1 byte).
    pub(super) fn size_label(&self, bytes: u64) -> String {
        if self.summary.requested_bytes == self.summary.requests {
            format!("{} obj", units::count(bytes))
        } else {
            units::bytes(bytes)
        }
    }

    /// The table of memory-only runs.
    fn memory_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "{:<18} {:<11} {:<18} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>13} {:>8}",
            "capacity",
            "eviction",
            "policy",
            "hit",
            "vs all",
            "to opt",
            "byte hit",
            "vs all",
            "writes",
            "vs all",
            "bloom +/-",
            "Mreq/s"
        );
        for r in self.results.iter().filter(|r| r.disk.is_none()) {
            let size = self.size_label(r.capacity_bytes);
            let cap = match r.capacity_fraction {
                Some(f) => format!("{size} ({} %)", f * 100.0),
                None => size,
            };
            let (dh, db, dw) = self.against_baseline(r);
            let to_opt = match self.belady(r.capacity_bytes) {
                Some(b) => format!("{:+.2} pp", (r.hit_ratio - b.hit_ratio) * 100.0),
                None => String::new(),
            };
            let bloom = match (r.approx_extra_admissions, r.approx_missed_admissions) {
                (Some(a), Some(m)) => format!("+{a}/-{m}"),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "{:<18} {:<11} {:<18} {:>8.2}% {:>9} {:>9} {:>8.2}% {:>9} {:>10} {:>8} {:>13} {:>8.1}",
                cap,
                r.eviction,
                r.policy,
                r.hit_ratio * 100.0,
                dh,
                to_opt,
                r.byte_hit_ratio * 100.0,
                db,
                units::count(r.admissions),
                dw,
                bloom,
                r.requests_per_sec / 1e6
            );
        }
    }

    /// Each run's hits against admit-all stepped beside it: lost (of those, deferred) and
    /// gained; nothing when no run has them.
    fn decomposition(&self, out: &mut String) {
        let rows: Vec<&RunResult> = self
            .results
            .iter()
            .filter(|r| r.hits_lost.is_some())
            .collect();
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nhits against admit-all (stepped beside each run at the same size and eviction):"
        );
        let _ = writeln!(
            out,
            "{:<18} {:<11} {:<18} {:>10} {:>10} {:>10} {:>10}",
            "capacity", "eviction", "policy", "lost", "deferred", "gained", "net"
        );
        for r in rows {
            let (lost, deferred, gained) = (
                r.hits_lost.unwrap_or(0),
                r.hits_lost_deferred.unwrap_or(0),
                r.hits_gained.unwrap_or(0),
            );
            let net = gained as i128 - lost as i128;
            let _ = writeln!(
                out,
                "{:<18} {:<11} {:<18} {:>10} {:>10} {:>10} {:>10}",
                self.size_label(r.capacity_bytes),
                r.eviction,
                r.policy,
                units::count(lost),
                units::count(deferred),
                units::count(gained),
                format!(
                    "{}{}",
                    if net < 0 { "-" } else { "+" },
                    units::count(net.unsigned_abs() as u64)
                )
            );
        }
        let _ = writeln!(
            out,
            "lost: requests admit-all served that the run missed; deferred: of those, objects its policy had\ndeferred at their last miss (the rest it stored and evicted); gained: requests the run served that\nadmit-all missed, in the room the deferred objects left; net = gained - lost = hits - admit-all's."
        );
    }

    /// A row's hit ratio and byte hit ratio against its baseline's in percentage points, and its
    /// writes against the baseline's in percent; empty for the baseline itself, or without one.
    fn against_baseline(&self, r: &RunResult) -> (String, String, String) {
        match self.baseline(r) {
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
        }
    }

    /// The best pairs per size ([`Report::answers`]), when the sweep has more than one run.
    fn best_pairs(&self, out: &mut String) {
        let answers = self.answers();
        if self.results.len() <= 1 || answers.is_empty() {
            return;
        }
        let _ = writeln!(out, "\nbest pairs (admission x eviction) per size:");
        for a in &answers {
            let size = self.size_label(a.capacity_bytes);
            let pair = |p: &Pick| format!("{} x {}", p.policy, p.eviction);
            let _ = write!(
                out,
                "  {size}: hit ratio {} ({:.2} %), byte hit ratio {} ({:.2} %)",
                pair(&a.best_hit_ratio),
                a.best_hit_ratio.value * 100.0,
                pair(&a.best_byte_hit_ratio),
                a.best_byte_hit_ratio.value * 100.0
            );
            if let Some(w) = &a.most_hits_per_write {
                let _ = write!(out, ", hits per write {} ({:.2})", pair(w), w.value);
            }
            if let Some(b) = a.belady_hit_ratio {
                let _ = write!(
                    out,
                    "; belady {:.2} % ({:+.2} pp from the best)",
                    b * 100.0,
                    (a.best_hit_ratio.value - b) * 100.0
                );
            }
            let _ = writeln!(out);
        }
    }

    /// With a shield tier: each run's edge and shield, and what reaches the origin.
    fn shield_table(&self, out: &mut String) {
        if self.results.iter().all(|r| r.shield.is_none()) {
            return;
        }
        let _ = writeln!(
            out,
            "\nedge tier over a shield tier (every edge miss goes to the shield; its misses reach the origin):"
        );
        let _ = writeln!(
            out,
            "{:<12} {:<13} {:>8} {:<6} {:<12} {:<13} {:>10} {:>16} {:>12} {:>10}",
            "edge",
            "policy",
            "edge hit",
            "shield",
            "capacity",
            "policy",
            "shield hit",
            "origin requests",
            "origin bytes",
            "of requests"
        );
        for r in &self.results {
            let Some(s) = &r.shield else { continue };
            let _ = writeln!(
                out,
                "{:<12} {:<13} {:>7.2}% {:<6} {:<12} {:<13} {:>9.2}% {:>16} {:>12} {:>9.2}%",
                units::bytes(r.capacity_bytes),
                r.policy,
                r.hit_ratio * 100.0,
                s.nodes,
                units::bytes(s.capacity_bytes),
                s.policy,
                s.hit_ratio * 100.0,
                units::count(s.origin_requests),
                units::bytes(s.origin_bytes),
                100.0 * s.origin_requests as f64 / r.requests.max(1) as f64
            );
        }
    }

    /// The table of two-tier runs: memory above flash.
    fn tiers_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "{:<11} {:<7} {:<13} {:<11} {:<13} {:>8} {:>8} {:>8} {:>9} {:>12} {:>12} {:>9} {:>9}",
            "memory",
            "evict",
            "policy",
            "flash",
            "flash policy",
            "hit",
            "memory",
            "flash",
            "byte hit",
            "flash writes",
            "flash bytes",
            "per byte",
            "refused"
        );
        for r in &self.results {
            let Some(d) = &r.disk else { continue };
            let _ = writeln!(
                out,
                "{:<11} {:<7} {:<13} {:<11} {:<13} {:>7.2}% {:>7.2}% {:>7.2}% {:>8.2}% {:>12} {:>12} {:>9.3} {:>9}",
                units::bytes(r.capacity_bytes),
                r.eviction,
                r.policy,
                units::bytes(d.capacity_bytes),
                d.policy,
                r.hit_ratio * 100.0,
                d.memory_hit_ratio * 100.0,
                d.disk_hit_ratio * 100.0,
                r.byte_hit_ratio * 100.0,
                units::count(d.disk_writes),
                units::bytes(d.disk_write_bytes),
                d.disk_write_bytes_per_served_byte,
                units::count(d.disk_refusals)
            );
        }
    }

    /// One CSV line per run, with a header.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "trace,policy,eviction,store,capacity_bytes,capacity_fraction,requests,hits,hit_bytes,hit_ratio,byte_hit_ratio,admissions,admitted_bytes,origin_bytes,store_rejections,rotations,approx_extra_admissions,approx_missed_admissions,requests_per_sec,disk_policy,disk_eviction,disk_capacity_bytes,disk_hits,disk_writes,disk_write_bytes,disk_refusals,hits_lost,hits_lost_deferred,hits_gained\n",
        );
        let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
        for r in &self.results {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.0},{},{},{},{}",
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
                r.requests_per_sec,
                match &r.disk {
                    Some(d) => format!(
                        "{},{},{},{},{},{},{}",
                        d.policy,
                        d.eviction,
                        d.capacity_bytes,
                        d.disk_hits,
                        d.disk_writes,
                        d.disk_write_bytes,
                        d.disk_refusals
                    ),
                    None => ",,,,,,".to_string(),
                },
                opt(r.hits_lost),
                opt(r.hits_lost_deferred),
                opt(r.hits_gained),
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
