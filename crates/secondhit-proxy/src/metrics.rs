//! The live proxy's metrics and their exposition. The request path counts with relaxed atomics
//! and records latencies in lock-free histograms ([`LatencyHistogram`]); a scrape gathers every
//! component's families ([`Families`]: the proxy's here, the live lab's, the flash tier's) and
//! prometheus-client encodes them as Prometheus text, prefix `secondhit_`. Counters are
//! cumulative since start; latencies are to response headers, per outcome. Names and meanings:
//! `docs/operating.md`, "Metrics".

use crate::admission::Stats as AdmissionStats;
use crate::origin::OriginError;
use crate::proxy::outcome::Outcome;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

const OUTCOMES: usize = Outcome::ALL.len();

/// The proxy's metrics. All methods take `&self` and are safe from many threads.
pub struct Metrics {
    requests: [AtomicU64; OUTCOMES],
    bytes: [AtomicU64; OUTCOMES],
    latency: [LatencyHistogram; OUTCOMES],
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
    origin_retries: AtomicU64,
    slices: [AtomicU64; SliceSource::ALL.len()],
    slice_bytes: [AtomicU64; SliceSource::ALL.len()],
    slice_versions_changed: AtomicU64,
}

/// Where a slice of a sliced object came from (a label of `secondhit_slices_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SliceSource {
    /// The memory store.
    Memory,
    /// The flash tier.
    Disk,
    /// Another request's fetch of the same slice.
    Collapsed,
    /// The origin, by a `Range` request.
    Origin,
}

impl SliceSource {
    /// Every source, for metrics.
    pub const ALL: [SliceSource; 4] = [
        SliceSource::Memory,
        SliceSource::Disk,
        SliceSource::Collapsed,
        SliceSource::Origin,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            SliceSource::Memory => "memory",
            SliceSource::Disk => "disk",
            SliceSource::Collapsed => "collapsed",
            SliceSource::Origin => "origin",
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Default::default(),
            bytes: Default::default(),
            latency: Default::default(),
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
            origin_retries: AtomicU64::new(0),
            slices: Default::default(),
            slice_bytes: Default::default(),
            slice_versions_changed: AtomicU64::new(0),
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
        self.latency[i].observe(latency);
    }

    /// Counts a request sent to an origin.
    pub fn origin_request(&self) {
        self.origin_requests.fetch_add(1, Relaxed);
    }

    /// Counts body bytes received from an origin.
    pub fn origin_bytes(&self, n: u64) {
        self.origin_bytes.fetch_add(n, Relaxed);
    }

    /// Counts an attempt made on another origin server after one failed.
    pub fn origin_retry(&self) {
        self.origin_retries.fetch_add(1, Relaxed);
    }

    /// Attempts made on another origin server after one failed, so far.
    pub fn origin_retries(&self) -> u64 {
        self.origin_retries.load(Relaxed)
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

    /// Counts one slice of a sliced object looked up for a request, `bytes` long, and where
    /// it came from.
    pub fn slice(&self, source: SliceSource, bytes: u64) {
        self.slices[source as usize].fetch_add(1, Relaxed);
        self.slice_bytes[source as usize].fetch_add(bytes, Relaxed);
    }

    /// Counts a sliced object dropped because a slice came back of another version.
    pub fn slice_version_changed(&self) {
        self.slice_versions_changed.fetch_add(1, Relaxed);
    }

    /// Slices so far from `source`.
    pub fn slices(&self, source: SliceSource) -> u64 {
        self.slices[source as usize].load(Relaxed)
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

    /// Adds the proxy's families to `out`, with the cache's and the admission policy's state.
    pub fn collect(
        &self,
        out: &mut Families,
        cache_entries: u64,
        cache_bytes: u64,
        admission: &AdmissionStats,
    ) {
        self.collect_traffic(out);
        self.collect_writes(out);
        self.collect_operations(out);
        collect_admission(out, cache_entries, cache_bytes, admission);
        out.histograms(
            "latency_seconds",
            "Time to response headers by outcome",
            Outcome::ALL.iter().map(|o| {
                (
                    labels([("outcome", o.label())]),
                    self.latency[o.index()].snapshot(),
                )
            }),
        );
    }

    /// Responses and origin traffic.
    fn collect_traffic(&self, out: &mut Families) {
        let per_outcome = |a: &[AtomicU64; OUTCOMES]| {
            Outcome::ALL
                .iter()
                .map(|o| (labels([("outcome", o.label())]), a[o.index()].load(Relaxed)))
                .collect::<Vec<_>>()
        };
        out.counters(
            "requests",
            "Responses by outcome",
            per_outcome(&self.requests),
        );
        out.counters(
            "response_bytes",
            "Response body bytes by outcome",
            per_outcome(&self.bytes),
        );
        out.counter(
            "origin_requests",
            "Requests sent to origins",
            self.origin_requests.load(Relaxed),
        );
        out.counter(
            "origin_bytes",
            "Body bytes received from origins",
            self.origin_bytes.load(Relaxed),
        );
        out.counter(
            "origin_retries",
            "Attempts made on another origin server after one failed",
            self.origin_retries.load(Relaxed),
        );
        out.counters(
            "origin_errors",
            "Origin failures by kind",
            OriginError::ALL.iter().map(|e| {
                (
                    labels([("kind", e.as_str())]),
                    self.origin_errors[*e as usize].load(Relaxed),
                )
            }),
        );
    }

    /// What was written to the cache, refreshed, served stale or removed.
    fn collect_writes(&self, out: &mut Families) {
        out.counter(
            "cache_writes",
            "Objects written to the cache",
            self.stores.load(Relaxed),
        );
        out.counter(
            "cache_written_bytes",
            "Bytes written to the cache",
            self.stored_bytes.load(Relaxed),
        );
        out.counter(
            "cache_write_aborts",
            "Admitted objects not stored: body cut off, too long or too short",
            self.store_aborts.load(Relaxed),
        );
        out.counter(
            "cache_write_over_budget",
            "Responses not stored because the bodies being stored at once filled limits.store_buffer_bytes",
            self.store_over_budget.load(Relaxed),
        );
        out.counter(
            "cache_refreshes",
            "Stored objects refreshed by a 304 revalidation (headers and freshness; not body writes)",
            self.refreshes.load(Relaxed),
        );
        out.counters(
            "stale_served",
            "Stale objects served, by reason",
            [
                (
                    labels([("reason", "while-revalidate")]),
                    self.stale_served[0].load(Relaxed),
                ),
                (
                    labels([("reason", "if-error")]),
                    self.stale_served[1].load(Relaxed),
                ),
            ],
        );
        let per_source = |a: &[AtomicU64; SliceSource::ALL.len()]| {
            SliceSource::ALL
                .iter()
                .map(|s| {
                    (
                        labels([("source", s.as_str())]),
                        a[*s as usize].load(Relaxed),
                    )
                })
                .collect::<Vec<_>>()
        };
        out.counters(
            "slices",
            "Slices of sliced objects looked up for requests, by where they came from",
            per_source(&self.slices),
        );
        out.counters(
            "slice_bytes",
            "Bytes of the slices looked up for requests, by where they came from",
            per_source(&self.slice_bytes),
        );
        out.counter(
            "slice_versions_changed",
            "Sliced objects dropped because a slice came back of another version",
            self.slice_versions_changed.load(Relaxed),
        );
        out.counter(
            "cache_invalidations",
            "Stored objects removed after an unsafe request (RFC 9111 4.4)",
            self.invalidations.load(Relaxed),
        );
    }

    /// Reloads, the access log, coalescing and refusals.
    fn collect_operations(&self, out: &mut Families) {
        out.counters(
            "config_reloads",
            "Configuration reloads (SIGHUP, POST /reload), by result",
            [
                (labels([("result", "ok")]), self.reloads[1].load(Relaxed)),
                (labels([("result", "error")]), self.reloads[0].load(Relaxed)),
            ],
        );
        out.counter(
            "access_log_dropped",
            "Access log lines dropped because the writer fell behind",
            self.access_log_dropped.load(Relaxed),
        );
        out.counter(
            "coalesced",
            "Requests served by another request's fetch",
            self.coalesced.load(Relaxed),
        );
        out.counter(
            "refused",
            "Requests answered by the proxy as the client's fault (refused, or a broken request body)",
            self.refused.load(Relaxed),
        );
    }
}

/// The admission policy's decisions and filter, and what the cache holds.
fn collect_admission(
    out: &mut Families,
    cache_entries: u64,
    cache_bytes: u64,
    admission: &AdmissionStats,
) {
    out.counters(
        "admission",
        "Admission decisions on cache misses",
        [
            (labels([("decision", "admit")]), admission.admitted),
            (labels([("decision", "defer")]), admission.deferred),
        ],
    );
    out.counters(
            "filter_rotations",
            "Rotations of the admission filter's generations: on time (the window ended) or on count (a generation filled first: expected_items is too small)",
            [
                (
                    labels([("trigger", "time")]),
                    admission.rotations - admission.rotations_on_count,
                ),
                (labels([("trigger", "count")]), admission.rotations_on_count),
            ],
        );
    out.gauge("cache_entries", "Objects in the cache", cache_entries);
    out.gauge("cache_bytes", "Weighted bytes in the cache", cache_bytes);
    let (files, file_bytes) = crate::pages::live();
    out.gauge(
        "sendfile_bodies",
        "Stored bodies in sealed memory files, sent with sendfile (cache.sendfile)",
        files as u64,
    );
    out.gauge(
        "sendfile_bytes",
        "Bytes of the stored bodies in sealed memory files",
        file_bytes as u64,
    );
    out.counter(
        "sendfile_writes",
        "Writes that sent a stored body's pages with sendfile",
        crate::pages::sends(),
    );
    if let Some(f) = &admission.filter {
        out.gauge(
            "filter_current_fill",
            "Fraction of the current generation's bits set",
            f.current_fill,
        );
        out.gauge(
            "filter_previous_fill",
            "Fraction of the previous generation's bits set",
            f.previous_fill,
        );
        out.gauge(
            "filter_estimated_fpr",
            "Estimated false-positive rate of the filter pair",
            f.estimated_fpr,
        );
        out.gauge(
            "filter_current_items",
            "Distinct keys in the current generation",
            f.current_items,
        );
        out.gauge(
            "filter_memory_bytes",
            "Memory of both generations",
            f.memory_bytes,
        );
        out.gauge(
                "filter_keys_per_window",
                "Distinct keys a window brings, estimated when a generation filled early (0: never did); expected_items should be above it",
                admission.keys_per_window,
            );
    }
}

/// Label pairs of one sample.
pub type Labels = Vec<(&'static str, String)>;

/// Label pairs from names and values.
pub fn labels<const N: usize>(pairs: [(&'static str, &str); N]) -> Labels {
    pairs.iter().map(|&(k, v)| (k, v.to_string())).collect()
}

/// The upper bounds of the latency histograms' buckets, in microseconds: from 10 µs (a hit
/// over loopback takes tens of µs) to a minute (a slow origin's large object), about three per
/// decade.
pub const LATENCY_BUCKETS_MICROS: [u64; 21] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// The largest latency recorded, in microseconds (an hour): larger ones count as an hour, so
/// that the sum cannot wrap.
const LATENCY_MAX_MICROS: u64 = 3_600_000_000;

/// A latency histogram with fixed buckets ([`LATENCY_BUCKETS_MICROS`]) that takes no lock: an
/// observation is two relaxed atomic additions (its bucket and the sum), so responses on many
/// threads never wait for each other. The count is the sum of the buckets. A scrape reads the
/// sum apart from the buckets, so the two may differ by the observations made in between.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// One count per bucket, and last the observations above every bound.
    buckets: [AtomicU64; LATENCY_BUCKETS_MICROS.len() + 1],
    /// The sum of every observation, in microseconds.
    sum_micros: AtomicU64,
}

impl LatencyHistogram {
    /// Records one latency.
    pub fn observe(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .min(LATENCY_MAX_MICROS);
        let i = LATENCY_BUCKETS_MICROS.partition_point(|&b| b < us);
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(us, Relaxed);
    }

    /// What it holds now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        HistogramSnapshot {
            sum: self.sum_micros.load(Relaxed) as f64 / 1e6,
            count: counts.iter().sum(),
            buckets: LATENCY_BUCKETS_MICROS
                .iter()
                .zip(&counts)
                .map(|(&b, &n)| (b as f64 / 1e6, n))
                .collect(),
        }
    }
}

/// A histogram as one scrape saw it, in seconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// The sum of the observations.
    pub sum: f64,
    /// How many there were (above every bound included).
    pub count: u64,
    /// (upper bound, observations in that bucket alone), the finite bounds only.
    pub buckets: Vec<(f64, u64)>,
}

/// A gauge's value: a count (written as an integer) or a fraction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Gauge {
    /// A count: objects, bytes.
    Count(u64),
    /// A fraction or an estimate.
    Real(f64),
}

impl From<u64> for Gauge {
    fn from(v: u64) -> Gauge {
        Gauge::Count(v)
    }
}

impl From<f64> for Gauge {
    fn from(v: f64) -> Gauge {
        Gauge::Real(v)
    }
}

/// One sample's value.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Counter(u64),
    Gauge(Gauge),
    Histogram(HistogramSnapshot),
}

/// One metric family: a name, its help, its type and its samples.
#[derive(Debug)]
struct Family {
    name: String,
    help: String,
    kind: MetricType,
    samples: Vec<(Labels, Value)>,
}

/// What one scrape of `/metrics` gathers from the proxy, the live lab and the flash tier, each
/// adding its families; [`Families::encode`] then writes them through prometheus-client's
/// Prometheus text encoder, under the prefix `secondhit_` (counters get their `_total` there).
///
/// ```
/// use secondhit_proxy::metrics::{labels, Families};
///
/// let mut f = Families::default();
/// f.counters("requests", "Responses by outcome", [(labels([("outcome", "hit")]), 2)]);
/// f.gauge("cache_entries", "Objects in the cache", 3u64);
/// let text = f.encode();
/// assert!(text.contains("secondhit_requests_total{outcome=\"hit\"} 2\n"));
/// assert!(text.contains("# TYPE secondhit_cache_entries gauge\nsecondhit_cache_entries 3\n"));
/// ```
#[derive(Debug, Default)]
pub struct Families(Vec<Family>);

impl Families {
    fn push(&mut self, name: &str, help: &str, kind: MetricType, samples: Vec<(Labels, Value)>) {
        self.0.push(Family {
            name: name.to_string(),
            // Sentences, as the registry's own metrics have them.
            help: format!("{}.", help.trim_end_matches('.')),
            kind,
            samples,
        });
    }

    /// A counter without labels (`name` without `_total`: the encoder adds it).
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.counters(name, help, [(Labels::new(), value)]);
    }

    /// A counter family, one sample per label set.
    pub fn counters(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (Labels, u64)>,
    ) {
        let samples = rows
            .into_iter()
            .map(|(l, v)| (l, Value::Counter(v)))
            .collect();
        self.push(name, help, MetricType::Counter, samples);
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: impl Into<Gauge>) {
        self.gauges(name, help, [(Labels::new(), value.into())]);
    }

    /// A gauge family, one sample per label set.
    pub fn gauges(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (Labels, Gauge)>,
    ) {
        let samples = rows
            .into_iter()
            .map(|(l, v)| (l, Value::Gauge(v)))
            .collect();
        self.push(name, help, MetricType::Gauge, samples);
    }

    /// A histogram family, one histogram per label set.
    pub fn histograms(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (Labels, HistogramSnapshot)>,
    ) {
        let samples = rows
            .into_iter()
            .map(|(l, h)| (l, Value::Histogram(h)))
            .collect();
        self.push(name, help, MetricType::Histogram, samples);
    }

    /// The Prometheus text exposition (version 0.0.4) of every family.
    pub fn encode(self) -> String {
        let mut registry = Registry::with_prefix("secondhit");
        registry.register_collector(Box::new(self));
        let mut text = String::with_capacity(8192);
        // Writing into a String cannot fail, and our collector returns only the encoder's errors.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
        text
    }
}

/// The `Content-Type` of [`Families::encode`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let mut metric = encoder.encode_descriptor(&f.name, &f.help, None, f.kind)?;
            for (labels, value) in &f.samples {
                let mut sample = metric.encode_family(labels)?;
                match value {
                    Value::Counter(v) => sample.encode_counter::<NoLabelSet, _, u64>(v, None)?,
                    Value::Gauge(Gauge::Count(v)) => sample.encode_gauge(v)?,
                    Value::Gauge(Gauge::Real(v)) => sample.encode_gauge(v)?,
                    Value::Histogram(h) => {
                        sample.encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets, None)?
                    }
                }
            }
        }
        Ok(())
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
        let mut f = Families::default();
        m.collect(&mut f, 3, 300, &AdmissionStats::default());
        let text = f.encode();
        assert!(
            text.contains("secondhit_requests_total{outcome=\"hit\"} 2"),
            "{text}"
        );
        assert!(text.contains("secondhit_response_bytes_total{outcome=\"hit\"} 150"));
        assert!(text.contains("secondhit_origin_errors_total{kind=\"timeout\"} 1"));
        assert!(text.contains("secondhit_cache_entries 3"));
        assert!(text.contains("secondhit_latency_seconds_count{outcome=\"hit\"} 2"));
        assert!(text.contains("# TYPE secondhit_latency_seconds histogram"));
        assert!(text.contains("# HELP secondhit_requests_total Responses by outcome.\n"));
        // 250 µs falls in the bucket of 250 µs (bounds are inclusive), 2 ms in that of 2.5 ms.
        for (le, n) in [
            ("0.0001", 0),
            ("0.00025", 1),
            ("0.001", 1),
            ("0.0025", 2),
            ("+Inf", 2),
        ] {
            let line =
                format!("secondhit_latency_seconds_bucket{{outcome=\"hit\",le=\"{le}\"}} {n}\n");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        assert!(
            text.contains("secondhit_latency_seconds_sum{outcome=\"miss\"} 0.02\n"),
            "{text}"
        );
        assert!(
            text.contains("secondhit_latency_seconds_sum{outcome=\"hit\"} 0.00225\n"),
            "{text}"
        );
        assert_eq!(m.requests(Outcome::Hit), 2);
        // Every sample line is `name{labels} value` or `name value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn a_latency_lands_in_the_first_bucket_at_or_above_it() {
        let h = LatencyHistogram::default();
        for us in [0, 10, 11, 60_000_000, 60_000_001] {
            h.observe(Duration::from_micros(us));
        }
        h.observe(Duration::MAX);
        let s = h.snapshot();
        assert_eq!(s.count, 6);
        assert_eq!(s.buckets[0], (0.00001, 2)); // 0 and 10 µs
        assert_eq!(s.buckets[1], (0.000025, 1)); // 11 µs
        assert_eq!(s.buckets.last(), Some(&(60.0, 1))); // a minute exactly
                                                        // The two above every bound count only toward +Inf (the count).
        assert_eq!(s.buckets.iter().map(|b| b.1).sum::<u64>(), 4);
        // Duration::MAX counts as an hour: the sum does not wrap (21 µs, two minutes, an hour).
        assert_eq!(s.sum, 3_720_000_022.0 / 1e6);
    }
}
