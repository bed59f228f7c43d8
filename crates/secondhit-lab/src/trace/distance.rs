//! The second-request distance: for every object requested twice or more, how far its second
//! request comes after its first, in requests, in bytes (the LRU stack distance) and in trace
//! time. Second-hit turns every second request into a miss that an admit-all cache would have
//! served when the distance fits in it, so these figures bound what the rule can lose.
//!
//! The byte distance is the smallest admit-all LRU cache that serves the second request: the
//! sizes of the distinct objects requested from the first request to the second, the object
//! itself included (each at its latest size, the object at its first). It is counted exactly in
//! one pass by Bennett and Kruskal's method: a Fenwick tree over request positions holds each
//! object's size at the position of its latest request, and the distance is a prefix sum.
//! Positions are renumbered whenever the tree fills, so memory stays proportional to the
//! objects (about 100 bytes each), not to the requests.

use super::Request;
use crate::hash::BuildFold;
use serde::{Deserialize, Serialize};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::time::Duration;

/// Quantiles of a distribution, by nearest rank: `pNN` is the smallest value at least `NN` % of
/// the values are at or below.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles<T> {
    /// 10th percentile.
    pub p10: T,
    /// 25th percentile.
    pub p25: T,
    /// Median.
    pub p50: T,
    /// 75th percentile.
    pub p75: T,
    /// 90th percentile.
    pub p90: T,
}

impl<T: Copy + Default> Quantiles<T> {
    /// The quantiles of `sorted` (ascending); all default when it is empty.
    pub fn of_sorted(sorted: &[T]) -> Self {
        let at = |q: u64| -> T {
            if sorted.is_empty() {
                return T::default();
            }
            // Nearest rank: the ceil(q x n)-th value, 1-based.
            let rank = (q * sorted.len() as u64).div_ceil(100).max(1);
            sorted[(rank - 1) as usize]
        };
        Quantiles {
            p10: at(10),
            p25: at(25),
            p50: at(50),
            p75: at(75),
            p90: at(90),
        }
    }
}

/// The share of second requests that came within one admission window of the first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowShare {
    /// The window as given (`10m`, `1h`).
    pub window: String,
    /// The window in seconds of trace time.
    pub window_secs: f64,
    /// Second requests at most this long after the first, as a share of all second requests.
    pub share: f64,
}

/// At one cache size: the second requests an admit-all LRU cache of that size serves, which
/// second-hit (deferring every first request) turns into misses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheBound {
    /// The cache size in bytes (objects for traces without sizes).
    pub capacity_bytes: u64,
    /// The working-set fraction it came from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_fraction: Option<f64>,
    /// Second requests whose byte distance fits in the cache.
    pub second_requests_served: u64,
    /// The same as a share of all requests: the most hit ratio second-hit can lose at this size.
    pub share_of_requests: f64,
}

/// How far second requests come after first ones (`trace-stats`, `second_request_distance` in
/// its JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SecondRequestDistance {
    /// Objects requested twice or more (each has one second request).
    pub second_requests: u64,
    /// From the first request to the second, in requests (the next request is 1).
    pub requests: Quantiles<u64>,
    /// The LRU stack distance in bytes: the smallest admit-all LRU cache that serves the second
    /// request (objects, for traces without sizes).
    pub bytes: Quantiles<u64>,
    /// From the first request to the second, in seconds of trace time.
    pub seconds: Quantiles<f64>,
    /// The share of second requests within each admission window asked.
    pub within_window: Vec<WindowShare>,
    /// Per cache size asked: the second requests an admit-all LRU of that size serves.
    pub lru_bound: Vec<CacheBound>,
}

impl SecondRequestDistance {
    /// The text report's section (`sizeless`: the trace has no sizes, bytes are objects).
    pub fn to_text(&self, sizeless: bool) -> String {
        use secondhit_proxy::units::{bytes, count};
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "second requests     {} (objects requested twice or more)",
            count(self.second_requests)
        );
        let _ = writeln!(
            s,
            "  first to second   {:>12} {:>12} {:>12} {:>12} {:>12}",
            "p10", "p25", "p50", "p75", "p90"
        );
        let row = |name: &str, q: [String; 5]| {
            format!(
                "  {name:<17} {:>12} {:>12} {:>12} {:>12} {:>12}\n",
                q[0], q[1], q[2], q[3], q[4]
            )
        };
        let ints = |q: &Quantiles<u64>, f: &dyn Fn(u64) -> String| {
            [q.p10, q.p25, q.p50, q.p75, q.p90].map(f)
        };
        s += &row("requests", ints(&self.requests, &count));
        let size = |b: u64| {
            if sizeless {
                format!("{} obj", count(b))
            } else {
                bytes(b)
            }
        };
        let objects = |b: u64| if sizeless { count(b) } else { bytes(b) };
        s += &row(
            if sizeless {
                "objects (LRU)"
            } else {
                "bytes (LRU)"
            },
            ints(&self.bytes, &objects),
        );
        let q = &self.seconds;
        s += &row(
            "seconds",
            [q.p10, q.p25, q.p50, q.p75, q.p90].map(|v| format!("{v:.1}")),
        );
        if !self.within_window.is_empty() {
            let shares: Vec<String> = self
                .within_window
                .iter()
                .map(|w| format!("{} {:.1} %", w.window, w.share * 100.0))
                .collect();
            let _ = writeln!(s, "  within window     {}", shares.join(", "));
        }
        if !self.lru_bound.is_empty() {
            let _ = writeln!(
                s,
                "  second-hit can lose at most the second requests an admit-all LRU serves:"
            );
        }
        for b in &self.lru_bound {
            let at = match b.capacity_fraction {
                Some(f) => format!("{} % ({})", f * 100.0, size(b.capacity_bytes)),
                None => size(b.capacity_bytes),
            };
            let _ = writeln!(
                s,
                "    at {at:<20} {:>12} ({:.2} % of requests)",
                count(b.second_requests_served),
                b.share_of_requests * 100.0
            );
        }
        s
    }
}

/// The distances themselves, one per object requested twice or more, each list ascending.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Distances {
    /// Requests from the first to the second request.
    pub requests: Vec<u64>,
    /// LRU stack distances in bytes.
    pub bytes: Vec<u64>,
    /// Trace time from the first to the second request.
    pub times: Vec<Duration>,
    /// Requests read in all.
    pub total_requests: u64,
}

impl Distances {
    /// The summary: quantiles, the share within each `(name, window)`, and per
    /// `(capacity, fraction)` the second requests an admit-all LRU of that size serves.
    ///
    /// The LRU bound is exact when no object is larger than the cache (an object larger than
    /// it, which the cache never stores, counts here as though it passed through it).
    pub fn summary(
        &self,
        windows: &[(String, Duration)],
        capacities: &[(u64, Option<f64>)],
    ) -> SecondRequestDistance {
        let n = self.requests.len();
        let seconds: Vec<f64> = self.times.iter().map(Duration::as_secs_f64).collect();
        let share = |count: usize| {
            if n == 0 {
                0.0
            } else {
                count as f64 / n as f64
            }
        };
        SecondRequestDistance {
            second_requests: n as u64,
            requests: Quantiles::of_sorted(&self.requests),
            bytes: Quantiles::of_sorted(&self.bytes),
            seconds: Quantiles::of_sorted(&seconds),
            within_window: windows
                .iter()
                .map(|(name, w)| WindowShare {
                    window: name.clone(),
                    window_secs: w.as_secs_f64(),
                    share: share(self.times.partition_point(|t| t <= w)),
                })
                .collect(),
            lru_bound: capacities
                .iter()
                .map(|&(capacity, fraction)| {
                    let served = self.bytes.partition_point(|&b| b <= capacity) as u64;
                    CacheBound {
                        capacity_bytes: capacity,
                        capacity_fraction: fraction,
                        second_requests_served: served,
                        share_of_requests: served as f64 / self.total_requests.max(1) as f64,
                    }
                })
                .collect(),
        }
    }
}

/// One object's place in the pass (24 bytes).
struct Object {
    /// Its latest request's position in the tree (1-based).
    slot: usize,
    /// Its first request's number, or `u64::MAX` once its second request is counted.
    first: u64,
    /// Its first request's time, in nanoseconds of trace time.
    first_ns: u64,
}

/// Shards of the objects' map: as in [`super::stats`], one map of millions of objects doubling
/// at once holds both tables and faults in every page of the new one; in shards only one small
/// map doubles at a time.
const SHARDS: usize = 256;

/// The fewest positions the tree holds.
const MIN_SLOTS: usize = 1 << 12;

/// Measures second-request distances request by request ([`Collector::add`]), in memory
/// proportional to the distinct objects.
pub struct Collector {
    /// Per object, sharded by the key hash's top byte.
    objects: Vec<HashMap<u128, Object, BuildFold>>,
    /// Fenwick tree (1-based) over positions: each object's size sits at its latest request.
    tree: Vec<u64>,
    /// The next free position.
    next: usize,
    requests: u64,
    found: Distances,
}

impl Default for Collector {
    fn default() -> Self {
        Collector {
            objects: (0..SHARDS).map(|_| HashMap::default()).collect(),
            tree: vec![0; MIN_SLOTS + 1],
            next: 1,
            requests: 0,
            found: Distances::default(),
        }
    }
}

impl Collector {
    /// Counts one request.
    pub fn add(&mut self, r: &Request) {
        let index = self.requests;
        self.requests += 1;
        if self.next == self.tree.len() {
            self.renumber();
        }
        let slot = self.next;
        self.next += 1;
        let key = r.key.raw();
        let now = u64::try_from(r.time.as_nanos()).unwrap_or(u64::MAX);
        match self.objects[(key >> 120) as usize].entry(key) {
            Entry::Vacant(v) => {
                v.insert(Object {
                    slot,
                    first: index,
                    first_ns: now,
                });
            }
            Entry::Occupied(mut o) => {
                let o = o.get_mut();
                let old = o.slot;
                if o.first != u64::MAX {
                    // The object at its first size and every distinct object since, each once.
                    let bytes = prefix(&self.tree, slot - 1) - prefix(&self.tree, old - 1);
                    self.found.requests.push(index - o.first);
                    self.found.bytes.push(bytes);
                    self.found
                        .times
                        .push(Duration::from_nanos(now.saturating_sub(o.first_ns)));
                    o.first = u64::MAX;
                }
                let size = point(&self.tree, old);
                add(&mut self.tree, old, size.wrapping_neg());
                o.slot = slot;
            }
        }
        add(&mut self.tree, slot, r.size);
    }

    /// Moves the live positions (one per object) to the front in their order, in a tree of
    /// twice as many positions as objects.
    fn renumber(&mut self) {
        let len = self.tree.len() - 1;
        let mut live = vec![0u64; len.div_ceil(64) + 1];
        for o in self.objects.iter().flat_map(HashMap::values) {
            let i = o.slot - 1;
            live[i / 64] |= 1 << (i % 64);
        }
        // Live positions before each block of 64.
        let mut before = Vec::with_capacity(live.len());
        let mut sum = 0usize;
        for w in &live {
            before.push(sum);
            sum += w.count_ones() as usize;
        }
        let objects: usize = self.objects.iter().map(HashMap::len).sum();
        let slots = (2 * objects).max(MIN_SLOTS);
        let mut values = vec![0u64; slots + 1];
        for o in self.objects.iter_mut().flat_map(HashMap::values_mut) {
            let i = o.slot - 1;
            let rank =
                before[i / 64] + (live[i / 64] & ((1u64 << (i % 64)) - 1)).count_ones() as usize;
            values[rank + 1] = point(&self.tree, o.slot);
            o.slot = rank + 1;
        }
        // A Fenwick tree from its values in one sweep: each node passes its sum to its parent.
        for i in 1..=slots {
            let parent = i + (i & i.wrapping_neg());
            if parent <= slots {
                values[parent] = values[parent].wrapping_add(values[i]);
            }
        }
        self.tree = values;
        self.next = sum + 1;
    }

    /// The distances found, sorted.
    pub fn finish(mut self) -> Distances {
        self.found.requests.sort_unstable();
        self.found.bytes.sort_unstable();
        self.found.times.sort_unstable();
        self.found.total_requests = self.requests;
        self.found
    }
}

/// The sum of positions `1..=i`. Sums wrap: a removal adds the size's two's complement, and
/// every true sum fits in a `u64`.
fn prefix(tree: &[u64], mut i: usize) -> u64 {
    let mut s = 0u64;
    while i > 0 {
        s = s.wrapping_add(tree[i]);
        i &= i - 1;
    }
    s
}

/// Adds `delta` (wrapping) at position `i`.
fn add(tree: &mut [u64], mut i: usize, delta: u64) {
    while i < tree.len() {
        tree[i] = tree[i].wrapping_add(delta);
        i += i & i.wrapping_neg();
    }
}

/// The value at position `i` alone.
fn point(tree: &[u64], i: usize) -> u64 {
    let mut v = tree[i];
    let stop = i & (i - 1);
    let mut j = i - 1;
    while j > stop {
        v = v.wrapping_sub(tree[j]);
        j &= j - 1;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::KeyHash;

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

    fn distances(trace: &[Request]) -> Distances {
        let mut c = Collector::default();
        trace.iter().for_each(|r| c.add(r));
        c.finish()
    }

    #[test]
    fn distances_by_hand() {
        // 1 (10 B) at t=0, 2 (20 B), 3 (5 B), 2 again, 1 again at t=9, 3 again, 4 once.
        let trace = [
            req(0, 1, 10),
            req(1, 2, 20),
            req(2, 3, 5),
            req(4, 2, 20),
            req(9, 1, 10),
            req(9, 3, 5),
            req(10, 4, 7),
            req(12, 1, 10),
        ];
        let d = distances(&trace);
        // Second requests: 2 after 2 requests (2, 3: 25 B), 1 after 4 (1, 2, 3: 35 B), 3 after
        // 3 (3, 2, 1: 35 B). The third request of 1 is not counted.
        assert_eq!(d.requests, vec![2, 3, 4]);
        assert_eq!(d.bytes, vec![25, 35, 35]);
        assert_eq!(
            d.times,
            vec![3, 7, 9]
                .into_iter()
                .map(Duration::from_secs)
                .collect::<Vec<_>>()
        );
        let s = d.summary(
            &[
                ("5s".into(), Duration::from_secs(5)),
                ("1m".into(), Duration::from_secs(60)),
            ],
            &[(24, None), (25, Some(0.5)), (35, None)],
        );
        assert_eq!(s.second_requests, 3);
        assert_eq!((s.requests.p10, s.requests.p50, s.requests.p90), (2, 3, 4));
        assert_eq!((s.bytes.p25, s.bytes.p75), (25, 35));
        assert_eq!(s.seconds.p50, 7.0);
        let shares: Vec<f64> = s.within_window.iter().map(|w| w.share).collect();
        assert_eq!(shares, vec![1.0 / 3.0, 1.0]);
        let served: Vec<u64> = s
            .lru_bound
            .iter()
            .map(|b| b.second_requests_served)
            .collect();
        assert_eq!(served, vec![0, 1, 3]);
        assert_eq!(s.lru_bound[2].share_of_requests, 3.0 / 8.0);
    }

    #[test]
    fn an_immediate_repeat_needs_only_the_object() {
        let d = distances(&[req(0, 1, 100), req(0, 1, 100), req(0, 1, 100)]);
        assert_eq!((d.requests, d.bytes), (vec![1], vec![100]));
    }

    #[test]
    fn quantiles_are_by_nearest_rank() {
        let v: Vec<u64> = (1..=10).collect();
        let q = Quantiles::of_sorted(&v);
        assert_eq!((q.p10, q.p25, q.p50, q.p75, q.p90), (1, 3, 5, 8, 9));
        assert_eq!(Quantiles::<u64>::of_sorted(&[]), Quantiles::default());
        assert_eq!(Quantiles::of_sorted(&[7u64]).p90, 7);
    }

    /// A brute-force count of what [`Collector`] finds, and an admit-all LRU cache (the exact
    /// store's) serving exactly the second requests whose byte distance fits, over renumbering.
    #[test]
    fn matches_brute_force_and_the_exact_lru_across_renumbering() {
        use crate::store::{exact, Access, Eviction};
        use rand::rngs::Xoshiro256PlusPlus;
        use rand::{RngExt, SeedableRng};
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let size_of = |k: u64| 1 + (k * 7919) % 50;
        // Enough requests to renumber the tree several times (it starts at 4,096 positions).
        let trace: Vec<Request> = (0..20_000u64)
            .map(|i| {
                let k = if rng.random_bool(0.5) {
                    rng.random_range(0..200)
                } else {
                    rng.random_range(0..5_000)
                };
                req(i / 10, k, size_of(k))
            })
            .collect();
        let d = distances(&trace);
        // Brute force: for each second request, the distinct objects since the first.
        let mut expect = Vec::new();
        let mut seen: HashMap<u64, (usize, bool)> = HashMap::new();
        for (i, r) in trace.iter().enumerate() {
            match seen.get_mut(&r.id) {
                None => {
                    seen.insert(r.id, (i, false));
                }
                Some((first, counted)) if !*counted => {
                    let mut distinct: Vec<u64> = trace[*first..i].iter().map(|r| r.id).collect();
                    distinct.sort_unstable();
                    distinct.dedup();
                    expect.push(distinct.iter().map(|&k| size_of(k)).sum::<u64>());
                    *counted = true;
                }
                Some(_) => {}
            }
        }
        expect.sort_unstable();
        assert_eq!(d.bytes, expect);
        // Every object fits in these caches: an admit-all LRU hits a second request exactly when
        // its distance fits.
        for capacity in [60u64, 500, 3_000, 20_000] {
            let mut lru = exact(Eviction::Lru, capacity).unwrap();
            let mut count: HashMap<u64, u32> = HashMap::new();
            let mut served = 0u64;
            for (i, r) in trace.iter().enumerate() {
                let a = Access {
                    key: r.key,
                    id: r.id,
                    size: r.size,
                    vtime: i as u64,
                    next: u64::MAX,
                };
                let n = count.entry(r.id).or_insert(0);
                *n += 1;
                if lru.get(&a) {
                    served += u64::from(*n == 2);
                } else {
                    lru.put(&a);
                }
            }
            let s = d.summary(&[], &[(capacity, None)]);
            assert_eq!(s.lru_bound[0].second_requests_served, served, "{capacity}");
        }
    }
}
