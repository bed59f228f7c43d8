//! `secondhit trace-stats`: what a trace holds, in one pass. Memory grows with the number of
//! distinct objects (one hash-map entry each), not with the number of requests.

use super::distance::{self, Distances, SecondRequestDistance};
use super::{Request, TraceError};
use crate::hash::BuildFold;
use crate::sim::Capacities;
use serde::Serialize;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

/// A trace's summary. Definitions follow `traces/README.md`: an object is a distinct key; a
/// one-hit wonder is an object requested exactly once; the working set is the sum of the
/// objects' sizes at their first request.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct TraceStats {
    /// Requests read.
    pub requests: u64,
    /// Distinct objects.
    pub objects: u64,
    /// Objects requested exactly once.
    pub one_hit_wonders: u64,
    /// `one_hit_wonders / objects`, in [0, 1].
    pub one_hit_wonder_ratio: f64,
    /// Sum of the objects' sizes at their first request, in bytes.
    pub working_set_bytes: u64,
    /// Sum of all requests' sizes (of a request with a range, the range's), in bytes.
    pub requested_bytes: u64,
    /// Last request's time minus the first's, in seconds.
    pub duration_secs: f64,
    /// Share of requests that go to the most requested 1 % of objects, in [0, 1].
    pub top_1_percent_share: f64,
    /// Share of requests that go to the most requested 10 % of objects, in [0, 1].
    pub top_10_percent_share: f64,
    /// How far second requests come after first ones (`trace-stats` only: [`collect_all`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_request_distance: Option<SecondRequestDistance>,
}

/// Shards of the per-object counts. A map grows by doubling, and while it moves its entries the
/// old and the new tables are both alive: one map of 17 million objects peaked at 1.26 GB. In
/// shards only one small map doubles at a time.
const SHARDS: usize = 256;

/// Accumulates a summary request by request.
///
/// An object is told apart by 104 of its key hash's 128 bits: 8 choose the shard, 64 are the
/// shard's key and 32 sit beside the count (so an entry is 16 bytes, not 24); two objects whose
/// 64 bits agree but not their 32 go to a small map of their own. Distinct objects among a
/// billion agree on all 104 with odds of about 1 in 10^13.
pub struct Collector {
    /// Per object, sharded by the key hash's top byte: the low 64 bits -> (32 more, requests).
    objects: Vec<HashMap<u64, (u32, u32), BuildFold>>,
    /// Objects whose low 64 bits another object already holds.
    collisions: HashMap<(u64, u32), u32, BuildFold>,
    requests: u64,
    working_set: u64,
    requested: u64,
    first: Option<Duration>,
    last: Duration,
}

impl Default for Collector {
    fn default() -> Self {
        Collector {
            objects: (0..SHARDS).map(|_| HashMap::default()).collect(),
            collisions: HashMap::default(),
            requests: 0,
            working_set: 0,
            requested: 0,
            first: None,
            last: Duration::ZERO,
        }
    }
}

impl Collector {
    /// Counts one request.
    pub fn add(&mut self, r: &Request) {
        self.requests += 1;
        // A range asks for its bytes, not the object's.
        self.requested += match r.range {
            Some((first, last)) if first < r.size => last.min(r.size - 1) - first + 1,
            Some(_) => 0,
            None => r.size,
        };
        self.first.get_or_insert(r.time);
        self.last = r.time;
        let raw = r.key.raw();
        let hi = (raw >> 64) as u64;
        let (lo, tag) = (raw as u64, hi as u32);
        let new = match self.objects[(hi >> 56) as usize].entry(lo) {
            Entry::Vacant(v) => {
                v.insert((tag, 1));
                true
            }
            Entry::Occupied(mut o) => match o.get_mut() {
                (t, count) if *t == tag => {
                    *count = count.saturating_add(1);
                    false
                }
                _ => {
                    let count = self.collisions.entry((lo, tag)).or_insert(0);
                    *count = count.saturating_add(1);
                    *count == 1
                }
            },
        };
        if new {
            self.working_set += r.size;
        }
    }

    /// The summary of everything added.
    pub fn finish(self) -> TraceStats {
        let objects =
            self.objects.iter().map(|m| m.len() as u64).sum::<u64>() + self.collisions.len() as u64;
        // Each shard is freed as its counts are taken.
        let mut counts: Vec<u32> = Vec::with_capacity(objects as usize);
        for shard in self.objects {
            counts.extend(shard.into_values().map(|(_, c)| c));
        }
        counts.extend(self.collisions.into_values());
        let one_hit_wonders = counts.iter().filter(|&&c| c == 1).count() as u64;
        let requests = self.requests;
        // The most requested fraction of objects: the largest counts, found without a full sort.
        let mut share = |fraction: f64| {
            let top = ((objects as f64 * fraction).ceil() as usize).min(counts.len());
            if top == 0 {
                return 0.0;
            }
            if top < counts.len() {
                counts.select_nth_unstable_by(top - 1, |a, b| b.cmp(a));
            }
            counts[..top].iter().map(|&c| u64::from(c)).sum::<u64>() as f64 / requests.max(1) as f64
        };
        let top_10 = share(0.10);
        let top_1 = share(0.01);
        TraceStats {
            requests: self.requests,
            objects,
            one_hit_wonders,
            one_hit_wonder_ratio: one_hit_wonders as f64 / objects.max(1) as f64,
            working_set_bytes: self.working_set,
            requested_bytes: self.requested,
            duration_secs: self
                .first
                .map_or(0.0, |f| self.last.saturating_sub(f).as_secs_f64()),
            top_1_percent_share: top_1,
            top_10_percent_share: top_10,
            second_request_distance: None,
        }
    }
}

/// Summarises a stream of requests; stops at the first error.
pub fn collect(
    requests: impl Iterator<Item = Result<Request, TraceError>>,
) -> Result<TraceStats, TraceError> {
    collect_with_progress(requests, |_| {}, |_| {})
}

/// [`collect`], calling `progress` with the number of requests in each batch counted, and
/// `each` with every request after it is counted.
pub fn collect_with_progress(
    requests: impl Iterator<Item = Result<Request, TraceError>>,
    mut progress: impl FnMut(u64),
    mut each: impl FnMut(&Request),
) -> Result<TraceStats, TraceError> {
    // Reading a batch, then counting it, lets the CPU overlap the hash map's cache misses,
    // which a request-by-request loop would wait on one after the other.
    const BATCH: usize = 1 << 14;
    let mut c = Collector::default();
    let mut batch = Vec::with_capacity(BATCH);
    let mut requests = requests.peekable();
    while requests.peek().is_some() {
        batch.clear();
        for r in requests.by_ref().take(BATCH) {
            batch.push(r?);
        }
        batch.iter().for_each(|r| c.add(r));
        batch.iter().for_each(&mut each);
        progress(batch.len() as u64);
    }
    Ok(c.finish())
}

/// [`collect_with_progress`] and the second-request distances in the same pass (the distances
/// cost about 100 bytes per object more).
pub fn collect_all(
    requests: impl Iterator<Item = Result<Request, TraceError>>,
    mut progress: impl FnMut(u64),
) -> Result<(TraceStats, Distances), TraceError> {
    let mut d = distance::Collector::default();
    let stats = collect_with_progress(requests, &mut progress, |r| d.add(r))?;
    Ok((stats, d.finish()))
}

impl TraceStats {
    /// Sets [`TraceStats::second_request_distance`] from `distances`: the share within each
    /// `(name, window)`, and the LRU bound at each of `capacities` (fractions of this trace's
    /// working set, or bytes).
    pub fn set_distances(
        &mut self,
        distances: &Distances,
        windows: &[(String, Duration)],
        capacities: &Capacities,
    ) {
        let capacities: Vec<(u64, Option<f64>)> = match capacities {
            Capacities::Bytes(v) => v.iter().map(|&b| (b, None)).collect(),
            Capacities::Fractions(v) => v
                .iter()
                .map(|&f| ((f * self.working_set_bytes as f64).floor() as u64, Some(f)))
                .collect(),
        };
        self.second_request_distance = Some(distances.summary(windows, &capacities));
    }

    /// A short human-readable report.
    pub fn to_text(&self) -> String {
        use secondhit_proxy::units::{bytes, count};
        let mut s = String::new();
        let pct = |x: f64| format!("{:.2} %", x * 100.0);
        let _ = writeln!(s, "requests            {}", count(self.requests));
        let _ = writeln!(s, "objects             {}", count(self.objects));
        let _ = writeln!(
            s,
            "one-hit wonders     {} ({} of objects)",
            count(self.one_hit_wonders),
            pct(self.one_hit_wonder_ratio)
        );
        let _ = writeln!(
            s,
            "working set         {} B ({})",
            count(self.working_set_bytes),
            bytes(self.working_set_bytes)
        );
        let _ = writeln!(
            s,
            "requested           {} B ({})",
            count(self.requested_bytes),
            bytes(self.requested_bytes)
        );
        let _ = writeln!(s, "duration            {:.0} s", self.duration_secs);
        let _ = writeln!(
            s,
            "top 1 % of objects  {} of requests",
            pct(self.top_1_percent_share)
        );
        let _ = writeln!(
            s,
            "top 10 % of objects {} of requests",
            pct(self.top_10_percent_share)
        );
        if let Some(d) = &self.second_request_distance {
            s += &d.to_text(self.requested_bytes == self.requests);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::KeyHash;

    #[test]
    fn objects_whose_low_bits_agree_are_still_told_apart() {
        let raw = |lo: u64, mid: u32, top: u8| {
            (u128::from(top) << 120) | (u128::from(mid) << 64) | u128::from(lo)
        };
        let at = |r: u128, size: u64| Request {
            range: None,
            recorded: None,
            time: Duration::ZERO,
            key: KeyHash::from_raw(r),
            size,
            id: r as u64,
        };
        let mut c = Collector::default();
        // Same shard and same low 64 bits; they differ only in the 32 bits kept beside the
        // count, or only in the shard.
        for (r, size) in [
            (raw(7, 1, 9), 10),
            (raw(7, 2, 9), 20),
            (raw(7, 2, 9), 20),
            (raw(7, 1, 9), 10),
            (raw(7, 1, 8), 40),
            (raw(7, 3, 9), 80),
        ] {
            c.add(&at(r, size));
        }
        assert_eq!(
            c.collisions.len(),
            2,
            "(7, 2) and (7, 3) share (7, 1)'s slot"
        );
        let s = c.finish();
        assert_eq!((s.objects, s.one_hit_wonders), (4, 2));
        assert_eq!(s.working_set_bytes, 10 + 20 + 40 + 80);
        assert_eq!(s.requests, 6);
    }

    fn req(t: u64, k: u64, size: u64) -> Request {
        Request {
            range: None,
            recorded: None,
            time: Duration::from_secs(t),
            key: KeyHash::of_u64(k),
            size,
            id: k,
        }
    }

    #[test]
    fn counts_objects_wonders_and_working_set() {
        let trace = [
            req(10, 1, 100),
            req(11, 2, 50),
            req(12, 1, 999),
            req(20, 3, 7),
        ];
        let s = collect(trace.into_iter().map(Ok)).unwrap();
        assert_eq!((s.requests, s.objects, s.one_hit_wonders), (4, 3, 2));
        assert_eq!(s.working_set_bytes, 157); // first sizes: 100 + 50 + 7
        assert_eq!(s.requested_bytes, 1156);
        assert_eq!(s.duration_secs, 10.0);
        // Top 1 % and 10 % of 3 objects round up to one object: key 1, 2 of 4 requests.
        assert_eq!(s.top_1_percent_share, 0.5);
        assert_eq!(s.top_10_percent_share, 0.5);
        assert!((s.one_hit_wonder_ratio - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn a_range_counts_its_own_bytes() {
        let ranged = |range| Request {
            range: Some(range),
            recorded: None,
            ..req(1, 1, 100)
        };
        let trace = [ranged((10, 19)), ranged((90, u64::MAX)), ranged((100, 120))];
        let s = collect(trace.into_iter().map(Ok)).unwrap();
        assert_eq!((s.requested_bytes, s.working_set_bytes), (10 + 10, 100));
    }

    #[test]
    fn empty_trace_is_all_zero() {
        let s = collect(std::iter::empty()).unwrap();
        assert_eq!((s.requests, s.objects, s.working_set_bytes), (0, 0, 0));
        assert_eq!(s.one_hit_wonder_ratio, 0.0);
        assert_eq!(s.duration_secs, 0.0);
    }
}
