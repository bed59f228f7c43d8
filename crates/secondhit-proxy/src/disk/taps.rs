//! What the flash tier learns from foyer's own metrics: foyer reports through a metrics
//! registry ([`mixtrics`]), and [`Taps`] is one that keeps the few figures `/metrics` shows
//! (device write latencies, writes foyer dropped) and discards the rest.

use crate::metrics::LatencyHistogram;
use mixtrics::metrics::{
    BoxedCounter, BoxedCounterVec, BoxedGauge, BoxedGaugeVec, BoxedHistogram, BoxedHistogramVec,
    CounterOps, CounterVecOps, GaugeOps, GaugeVecOps, HistogramOps, HistogramVecOps, RegistryOps,
};
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// The figures kept.
#[derive(Debug)]
pub struct Tapped {
    /// Device writes (one each time a buffer of entries goes to disk).
    pub write_latency: LatencyHistogram,
    /// Entries foyer dropped instead of writing: its queue or its buffer was full, or the
    /// entry was skipped.
    pub dropped: AtomicU64,
}

impl Default for Tapped {
    fn default() -> Self {
        Tapped {
            write_latency: LatencyHistogram::default(),
            dropped: AtomicU64::new(0),
        }
    }
}

/// A metrics registry for foyer that feeds [`Tapped`].
#[derive(Debug, Clone)]
pub struct Taps(pub Arc<Tapped>);

/// What a metric of foyer's is, to us.
#[derive(Debug, Clone)]
enum Tap {
    /// Not kept.
    Ignored,
    /// A vector whose members with one of these operations (the last label) feed `to`.
    Vec {
        ops: &'static [&'static str],
        to: Sink,
    },
    /// A member that feeds this.
    One(Sink),
}

#[derive(Debug, Clone, Copy)]
enum Sink {
    WriteLatency,
    Dropped,
}

#[derive(Debug)]
struct Metric {
    tap: Tap,
    tapped: Arc<Tapped>,
}

impl Metric {
    fn boxed(tapped: &Arc<Tapped>, tap: Tap) -> Box<Metric> {
        Box::new(Metric {
            tap,
            tapped: Arc::clone(tapped),
        })
    }

    fn member(&self, labels: &[Cow<'static, str>]) -> Box<Metric> {
        let tap = match &self.tap {
            // foyer labels its members (cache name, operation).
            Tap::Vec { ops, to } if labels.last().is_some_and(|l| ops.contains(&l.as_ref())) => {
                Tap::One(*to)
            }
            _ => Tap::Ignored,
        };
        Metric::boxed(&self.tapped, tap)
    }
}

impl CounterOps for Metric {
    fn increase(&self, val: u64) {
        if let Tap::One(Sink::Dropped) = self.tap {
            self.tapped.dropped.fetch_add(val, Relaxed);
        }
    }
}

impl GaugeOps for Metric {
    fn increase(&self, _: u64) {}
    fn decrease(&self, _: u64) {}
    fn absolute(&self, _: u64) {}
}

impl HistogramOps for Metric {
    fn record(&self, seconds: f64) {
        if let Tap::One(Sink::WriteLatency) = self.tap {
            // Negative or not a number: recorded as no time at all; too long: as the longest.
            let seconds = if seconds.is_nan() {
                0.0
            } else {
                seconds.max(0.0)
            };
            self.tapped
                .write_latency
                .observe(Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX));
        }
    }
}

impl CounterVecOps for Metric {
    fn counter(&self, labels: &[Cow<'static, str>]) -> BoxedCounter {
        self.member(labels)
    }
}

impl GaugeVecOps for Metric {
    fn gauge(&self, labels: &[Cow<'static, str>]) -> BoxedGauge {
        self.member(labels)
    }
}

impl HistogramVecOps for Metric {
    fn histogram(&self, labels: &[Cow<'static, str>]) -> BoxedHistogram {
        self.member(labels)
    }
}

impl RegistryOps for Taps {
    fn register_counter_vec(
        &self,
        name: Cow<'static, str>,
        _: Cow<'static, str>,
        _: &'static [&'static str],
    ) -> BoxedCounterVec {
        let tap = match name.as_ref() {
            "foyer_storage_inner_op_total" => Tap::Vec {
                ops: &["buffer_overflow", "channel_overflow"],
                to: Sink::Dropped,
            },
            "foyer_storage_block_engine_op_total" => Tap::Vec {
                ops: &["enqueue_skip"],
                to: Sink::Dropped,
            },
            _ => Tap::Ignored,
        };
        Metric::boxed(&self.0, tap)
    }

    fn register_gauge_vec(
        &self,
        _: Cow<'static, str>,
        _: Cow<'static, str>,
        _: &'static [&'static str],
    ) -> BoxedGaugeVec {
        Metric::boxed(&self.0, Tap::Ignored)
    }

    fn register_histogram_vec(
        &self,
        name: Cow<'static, str>,
        _: Cow<'static, str>,
        _: &'static [&'static str],
    ) -> BoxedHistogramVec {
        Metric::boxed(&self.0, histogram_tap(&name))
    }

    fn register_histogram_vec_with_buckets(
        &self,
        name: Cow<'static, str>,
        _: Cow<'static, str>,
        _: &'static [&'static str],
        _: Vec<f64>,
    ) -> BoxedHistogramVec {
        Metric::boxed(&self.0, histogram_tap(&name))
    }
}

fn histogram_tap(name: &str) -> Tap {
    if name == "foyer_storage_disk_io_duration" {
        Tap::Vec {
            ops: &["write"],
            to: Sink::WriteLatency,
        }
    } else {
        Tap::Ignored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_tapped_members_count() {
        let taps = Taps(Arc::default());
        let io = taps.register_histogram_vec_with_buckets(
            "foyer_storage_disk_io_duration".into(),
            "".into(),
            &["name", "op"],
            vec![],
        );
        io.histogram(&["c".into(), "write".into()]).record(0.002);
        io.histogram(&["c".into(), "read".into()]).record(0.5);
        let ops = taps.register_counter_vec("foyer_storage_inner_op_total".into(), "".into(), &[]);
        ops.counter(&["c".into(), "buffer_overflow".into()])
            .increase(2);
        ops.counter(&["c".into(), "queue_rotate".into()])
            .increase(7);
        let engine =
            taps.register_counter_vec("foyer_storage_block_engine_op_total".into(), "".into(), &[]);
        engine
            .counter(&["c".into(), "enqueue_skip".into()])
            .increase(1);
        let other = taps.register_counter_vec("foyer_memory_op_total".into(), "".into(), &[]);
        other
            .counter(&["c".into(), "buffer_overflow".into()])
            .increase(5);
        let t = &taps.0;
        assert_eq!(t.dropped.load(Relaxed), 3);
        let h = t.write_latency.snapshot();
        assert_eq!(h.count, 1);
        assert!((h.sum - 0.002).abs() < 1e-6, "{h:?}");
        // 2 ms: in the bucket of 2.5 ms.
        assert_eq!(
            h.buckets.iter().find(|b| b.1 == 1).map(|b| b.0),
            Some(0.0025)
        );
    }
}
