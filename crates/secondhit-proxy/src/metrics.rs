//! Counters and latency histograms of the live proxy, rendered as Prometheus text (prefix
//! `secondhit_`). Counters are cumulative since start; latencies are to response headers, in
//! microseconds, per outcome.

use crate::admission::Stats as AdmissionStats;
use crate::origin::OriginError;
use crate::proxy::outcome::Outcome;
use hdrhistogram::Histogram;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

const OUTCOMES: usize = Outcome::ALL.len();

/// The proxy's metrics. All methods take `&self` and are safe from many threads.
pub struct Metrics {
    requests: [AtomicU64; OUTCOMES],
    bytes: [AtomicU64; OUTCOMES],
    latency: [Mutex<Histogram<u64>>; OUTCOMES],
    origin_requests: AtomicU64,
    origin_bytes: AtomicU64,
    origin_errors: [AtomicU64; OriginError::ALL.len()],
    store_over_budget: AtomicU64,
    refreshes: AtomicU64,
    stale_served: [AtomicU64; 2],
    invalidations: AtomicU64,
    reloads: [AtomicU64; 2],
    access_log_dropped: AtomicU64,
    stores: AtomicU64,
    stored_bytes: AtomicU64,
    store_aborts: AtomicU64,
    coalesced: AtomicU64,
    refused: AtomicU64,
}

/// The one latency histogram shape, for the proxy's metrics and the replayer: microseconds
/// from 1 µs to 1 h at 3 significant digits (larger values saturate when recorded with
/// `saturating_record`).
pub fn latency_histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts; the fallback auto-resizes.
    Histogram::new_with_bounds(1, 3_600_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).expect("3 significant digits is valid"))
}

impl Default for Metrics {
    fn default() -> Self {
        let hist = || Mutex::new(latency_histogram());
        Metrics {
            requests: Default::default(),
            bytes: Default::default(),
            latency: std::array::from_fn(|_| hist()),
            origin_requests: AtomicU64::new(0),
            origin_bytes: AtomicU64::new(0),
            origin_errors: Default::default(),
            stores: AtomicU64::new(0),
            stored_bytes: AtomicU64::new(0),
            store_aborts: AtomicU64::new(0),
            store_over_budget: AtomicU64::new(0),
            refreshes: AtomicU64::new(0),
            stale_served: Default::default(),
            invalidations: AtomicU64::new(0),
            reloads: Default::default(),
            access_log_dropped: AtomicU64::new(0),
            coalesced: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// Counts a response: its outcome, the body bytes sent (as known when the headers went out)
    /// and the time to its headers.
    pub fn response(&self, outcome: Outcome, body_bytes: u64, latency: Duration) {
        let i = outcome.index();
        self.requests[i].fetch_add(1, Relaxed);
        self.bytes[i].fetch_add(body_bytes, Relaxed);
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        if let Ok(mut h) = self.latency[i].lock() {
            h.saturating_record(us);
        }
    }

    /// Counts a request sent to an origin.
    pub fn origin_request(&self) {
        self.origin_requests.fetch_add(1, Relaxed);
    }

    /// Counts body bytes received from an origin.
    pub fn origin_bytes(&self, n: u64) {
        self.origin_bytes.fetch_add(n, Relaxed);
    }

    /// Counts an origin failure.
    pub fn origin_error(&self, e: OriginError) {
        self.origin_errors[e as usize].fetch_add(1, Relaxed);
    }

    /// Counts an object written to the cache.
    pub fn stored(&self, bytes: u64) {
        self.stores.fetch_add(1, Relaxed);
        self.stored_bytes.fetch_add(bytes, Relaxed);
    }

    /// Counts an admitted object that was not stored because its body was cut, too long or
    /// too short.
    pub fn store_aborted(&self) {
        self.store_aborts.fetch_add(1, Relaxed);
    }

    /// Counts a response that was not stored because the bodies being stored at once already
    /// filled `limits.store_buffer_bytes`.
    pub fn store_over_budget(&self) {
        self.store_over_budget.fetch_add(1, Relaxed);
    }

    /// Counts a stored object refreshed by a 304 (its headers and freshness; not a body write).
    pub fn refreshed(&self) {
        self.refreshes.fetch_add(1, Relaxed);
    }

    /// Counts a stale object served: while it is refreshed (`error: false`), or because the
    /// origin failed (`error: true`).
    pub fn stale_served(&self, error: bool) {
        self.stale_served[usize::from(error)].fetch_add(1, Relaxed);
    }

    /// Counts stored objects removed by an unsafe request's response (RFC 9111 §4.4).
    pub fn invalidated(&self, n: u64) {
        self.invalidations.fetch_add(n, Relaxed);
    }

    /// Counts a configuration reload that took effect (`ok`) or was refused.
    pub fn reloaded(&self, ok: bool) {
        self.reloads[usize::from(ok)].fetch_add(1, Relaxed);
    }

    /// Refreshes so far.
    pub fn refreshes(&self) -> u64 {
        self.refreshes.load(Relaxed)
    }

    /// Counts an access log line dropped because its queue was full.
    pub fn access_log_dropped(&self) {
        self.access_log_dropped.fetch_add(1, Relaxed);
    }

    /// Counts a request served by another request's fetch.
    pub fn coalesced(&self) {
        self.coalesced.fetch_add(1, Relaxed);
    }

    /// Counts a request the proxy answered itself as the client's fault: refused before any
    /// origin contact (bad Host, unknown host, CONNECT, ...) or whose body broke off.
    pub fn refused(&self) {
        self.refused.fetch_add(1, Relaxed);
    }

    /// Requests so far with this outcome.
    pub fn requests(&self, outcome: Outcome) -> u64 {
        self.requests[outcome.index()].load(Relaxed)
    }

    /// Requests sent to origins so far.
    pub fn origin_requests(&self) -> u64 {
        self.origin_requests.load(Relaxed)
    }

    /// Origin failures of kind `e` so far.
    pub fn origin_errors(&self, e: OriginError) -> u64 {
        self.origin_errors[e as usize].load(Relaxed)
    }

    /// Objects written to the cache so far.
    pub fn stores(&self) -> u64 {
        self.stores.load(Relaxed)
    }

    /// The Prometheus text exposition of everything, plus the cache's and the admission
    /// policy's state.
    pub fn render(
        &self,
        cache_entries: u64,
        cache_bytes: u64,
        admission: &AdmissionStats,
    ) -> String {
        let mut s = String::with_capacity(4096);
        let mut counter = |name: &str, help: &str, rows: &[(String, u64)]| {
            let _ = writeln!(
                s,
                "# HELP secondhit_{name} {help}\n# TYPE secondhit_{name} counter"
            );
            for (labels, v) in rows {
                let _ = writeln!(s, "secondhit_{name}{labels} {v}");
            }
        };
        let per_outcome = |a: &[AtomicU64; OUTCOMES]| -> Vec<(String, u64)> {
            Outcome::ALL
                .iter()
                .map(|o| {
                    (
                        format!("{{outcome=\"{}\"}}", o.label()),
                        a[o.index()].load(Relaxed),
                    )
                })
                .collect()
        };
        counter(
            "requests_total",
            "Responses by outcome.",
            &per_outcome(&self.requests),
        );
        counter(
            "response_bytes_total",
            "Response body bytes by outcome.",
            &per_outcome(&self.bytes),
        );
        let one = |v: &AtomicU64| vec![(String::new(), v.load(Relaxed))];
        counter(
            "origin_requests_total",
            "Requests sent to origins.",
            &one(&self.origin_requests),
        );
        counter(
            "origin_bytes_total",
            "Body bytes received from origins.",
            &one(&self.origin_bytes),
        );
        let errors: Vec<(String, u64)> = OriginError::ALL
            .iter()
            .map(|e| {
                (
                    format!("{{kind=\"{}\"}}", e.as_str()),
                    self.origin_errors[*e as usize].load(Relaxed),
                )
            })
            .collect();
        counter("origin_errors_total", "Origin failures by kind.", &errors);
        counter(
            "cache_writes_total",
            "Objects written to the cache.",
            &one(&self.stores),
        );
        counter(
            "cache_written_bytes_total",
            "Bytes written to the cache.",
            &one(&self.stored_bytes),
        );
        counter(
            "cache_write_aborts_total",
            "Admitted objects not stored: body cut off, too long or too short.",
            &one(&self.store_aborts),
        );
        counter(
            "cache_write_over_budget_total",
            "Responses not stored because the bodies being stored at once filled limits.store_buffer_bytes.",
            &one(&self.store_over_budget),
        );
        counter(
            "cache_refreshes_total",
            "Stored objects refreshed by a 304 revalidation (headers and freshness; not body writes).",
            &one(&self.refreshes),
        );
        counter(
            "stale_served_total",
            "Stale objects served, by reason.",
            &[
                (
                    "{reason=\"while-revalidate\"}".into(),
                    self.stale_served[0].load(Relaxed),
                ),
                (
                    "{reason=\"if-error\"}".into(),
                    self.stale_served[1].load(Relaxed),
                ),
            ],
        );
        counter(
            "cache_invalidations_total",
            "Stored objects removed after an unsafe request (RFC 9111 4.4).",
            &one(&self.invalidations),
        );
        counter(
            "config_reloads_total",
            "Configuration reloads (SIGHUP, POST /reload), by result.",
            &[
                ("{result=\"ok\"}".into(), self.reloads[1].load(Relaxed)),
                ("{result=\"error\"}".into(), self.reloads[0].load(Relaxed)),
            ],
        );
        counter(
            "access_log_dropped_total",
            "Access log lines dropped because the writer fell behind.",
            &one(&self.access_log_dropped),
        );
        counter(
            "coalesced_total",
            "Requests served by another request's fetch.",
            &one(&self.coalesced),
        );
        counter(
            "refused_total",
            "Requests answered by the proxy as the client's fault (refused, or a broken request body).",
            &one(&self.refused),
        );
        counter(
            "admission_total",
            "Admission decisions on cache misses.",
            &[
                ("{decision=\"admit\"}".into(), admission.admitted),
                ("{decision=\"defer\"}".into(), admission.deferred),
            ],
        );
        counter(
            "filter_rotations_total",
            "Rotations of the admission filter's generations: on time (the window ended) or on count (a generation filled first: expected_items is too small).",
            &[
                (
                    "{trigger=\"time\"}".into(),
                    admission.rotations - admission.rotations_on_count,
                ),
                ("{trigger=\"count\"}".into(), admission.rotations_on_count),
            ],
        );
        let mut gauge = |name: &str, help: &str, v: f64| {
            let _ = writeln!(s, "# HELP secondhit_{name} {help}\n# TYPE secondhit_{name} gauge\nsecondhit_{name} {v}");
        };
        gauge(
            "cache_entries",
            "Objects in the cache.",
            cache_entries as f64,
        );
        gauge(
            "cache_bytes",
            "Weighted bytes in the cache.",
            cache_bytes as f64,
        );
        if let Some(f) = &admission.filter {
            gauge(
                "filter_current_fill",
                "Fraction of the current generation's bits set.",
                f.current_fill,
            );
            gauge(
                "filter_previous_fill",
                "Fraction of the previous generation's bits set.",
                f.previous_fill,
            );
            gauge(
                "filter_estimated_fpr",
                "Estimated false-positive rate of the filter pair.",
                f.estimated_fpr,
            );
            gauge(
                "filter_current_items",
                "Distinct keys in the current generation.",
                f.current_items as f64,
            );
            gauge(
                "filter_memory_bytes",
                "Memory of both generations.",
                f.memory_bytes as f64,
            );
            gauge(
                "filter_keys_per_window",
                "Distinct keys a window brings, estimated when a generation filled early (0: never did); expected_items should be above it.",
                admission.keys_per_window as f64,
            );
        }
        let _ = writeln!(
            s,
            "# HELP secondhit_latency_seconds Time to response headers by outcome.\n# TYPE secondhit_latency_seconds summary"
        );
        for o in Outcome::ALL {
            let Ok(h) = self.latency[o.index()].lock() else {
                continue;
            };
            for q in [0.5, 0.9, 0.99, 0.999] {
                let _ = writeln!(
                    s,
                    "secondhit_latency_seconds{{outcome=\"{}\",quantile=\"{q}\"}} {}",
                    o.label(),
                    h.value_at_quantile(q) as f64 / 1e6
                );
            }
            let _ = writeln!(
                s,
                "secondhit_latency_seconds_count{{outcome=\"{}\"}} {}",
                o.label(),
                h.len()
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.response(Outcome::Hit, 100, Duration::from_micros(250));
        m.response(Outcome::Hit, 50, Duration::from_millis(2));
        m.response(Outcome::Miss, 10, Duration::from_millis(20));
        m.origin_error(OriginError::Timeout);
        let text = m.render(3, 300, &AdmissionStats::default());
        assert!(
            text.contains("secondhit_requests_total{outcome=\"hit\"} 2"),
            "{text}"
        );
        assert!(text.contains("secondhit_response_bytes_total{outcome=\"hit\"} 150"));
        assert!(text.contains("secondhit_origin_errors_total{kind=\"timeout\"} 1"));
        assert!(text.contains("secondhit_cache_entries 3"));
        assert!(text.contains("secondhit_latency_seconds_count{outcome=\"hit\"} 2"));
        assert!(text.contains("secondhit_latency_seconds{outcome=\"miss\",quantile=\"0.5\"} 0.02"));
        assert_eq!(m.requests(Outcome::Hit), 2);
        // Every sample line is `name{labels} value` or `name value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
