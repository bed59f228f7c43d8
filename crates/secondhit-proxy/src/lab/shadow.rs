//! Shadow policies: what other admission policies would have done on the live traffic.
//!
//! Each shadow is a simulator [`Lane`]: an admission policy in front of the simulator's store
//! of keys and sizes (no bodies), of the live cache's capacity unless the spec gives one, fed
//! every [`Sighting`] in arrival order by one thread. Beside them runs the live policy itself,
//! computed the same way (`live="true"`), so the figures compare like with like: the live
//! cache's own counters also weigh headers and keys, which a shadow does not.
//!
//! The store is the simulator's exact one for its evictions (`lru`, `s3fifo`, `sieve`, ...) and
//! the simulator's moka store for `tinylfu`; Belady's policies need the future and are refused.
//!
//! Memory per shadow: the policy's filter (the live sizing: `expected_items` and `fpr`, or the
//! spec's: 1.2 MB a generation at the defaults), plus per object its store tracks about 110
//! bytes for `lru` (an arena slot of key, size and links, and an index entry, each with the
//! spare room of a table that grows by doubling) up to 330 for moka's `tinylfu`
//! ([`bytes_per_object`], measured by `cargo run --release --example shadow_memory`). A shadow of
//! capacity C tracks at most C / (smallest object) objects (a sighting of size 0 weighs 1 byte): with the live cache's 256 MiB and
//! 1 KiB objects, 262,144 objects, about 28 MB for `lru`. `secondhit_shadow_bytes_per_object`
//! says each shadow's figure.

use super::{Figure, Shared, Sighting, Sink, Tap};
use crate::admission::{Policy, Settings};
use crate::metrics::{Families, Labels};
use crate::store::{Access, Eviction, StoreKind};
use crate::store::{Lane, Step};
use crate::units;
use std::fmt;
use std::io;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Memory per object a shadow's store tracks with `eviction`, in bytes: what
/// `cargo run --release --example shadow_memory` measured (resident memory grown per object
/// over a million objects, each eviction in its own process), rounded up. It includes the
/// index's and the arena's spare capacity (both grow by doubling), so it is an upper figure.
pub fn bytes_per_object(eviction: Eviction) -> u64 {
    match eviction {
        Eviction::Lru | Eviction::Fifo => 110,
        Eviction::Clock | Eviction::Sieve | Eviction::S3Fifo | Eviction::Arc | Eviction::Lfu => 130,
        Eviction::WTinyLfu => 310,
        Eviction::TinyLfu | Eviction::Belady | Eviction::BeladySize => 330,
    }
}

/// One shadow, as configured: `POLICY[:OPTION=VALUE]...`, e.g. `admit-all`, `nth-hit:3`,
/// `second-hit:window=10m`, `admit-all:eviction=s3fifo:capacity=1GiB`. Options: `window`,
/// `expected_items`, `fpr` (the filter's), `eviction`, `capacity`; each defaults to the live
/// cache's.
#[derive(Clone, Debug, PartialEq)]
pub struct ShadowSpec {
    /// The spec as written: the `policy` label of its metrics.
    pub text: String,
    /// The admission policy.
    pub policy: Policy,
    /// `window=`: the generation window (`inf`: none).
    pub window: Option<Option<Duration>>,
    /// `expected_items=`.
    pub expected_items: Option<u64>,
    /// `fpr=`.
    pub fpr: Option<f64>,
    /// `eviction=`.
    pub eviction: Option<Eviction>,
    /// `capacity=`.
    pub capacity: Option<u64>,
}

impl ShadowSpec {
    /// The live policy as a shadow: its settings, eviction and capacity.
    pub fn live(policy: Policy) -> ShadowSpec {
        ShadowSpec {
            text: policy.to_string(),
            policy,
            window: None,
            expected_items: None,
            fpr: None,
            eviction: None,
            capacity: None,
        }
    }

    /// The filter settings: the spec's options over `base` (the live ones).
    pub fn settings(&self, base: &Settings) -> Settings {
        Settings {
            window: self.window.unwrap_or(base.window),
            expected_items: self.expected_items.unwrap_or(base.expected_items),
            fpr: self.fpr.unwrap_or(base.fpr),
            layout: base.layout,
        }
    }
}

impl fmt::Display for ShadowSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Policies that take an argument after their name (`nth-hit:3`).
const WITH_ARGUMENT: [&str; 4] = ["nth-hit", "nth-hit-exact", "prob", "size"];

impl FromStr for ShadowSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let mut parts = text.split(':').peekable();
        let name = parts.next().unwrap_or("");
        let policy_text = match parts.peek() {
            Some(arg) if WITH_ARGUMENT.contains(&name) && !arg.contains('=') => {
                let arg = parts.next().unwrap_or("");
                format!("{name}:{arg}")
            }
            _ => name.to_string(),
        };
        let policy: Policy = policy_text
            .parse()
            .map_err(|e| format!("shadow {text:?}: {e}"))?;
        let mut spec = ShadowSpec::live(policy);
        spec.text = text.to_string();
        for option in parts {
            let (key, value) = option.split_once('=').ok_or_else(|| {
                format!("shadow {text:?}: {option:?} is not OPTION=VALUE (window, expected_items, fpr, eviction, capacity)")
            })?;
            let bad = |e: String| format!("shadow {text:?}: {key}={value}: {e}");
            match key.trim() {
                "window" => spec.window = Some(units::parse_duration(value).map_err(bad)?),
                "expected_items" => {
                    spec.expected_items =
                        Some(value.trim().parse().map_err(|_| bad("not a count".into()))?)
                }
                "fpr" => {
                    let p: f64 = value
                        .trim()
                        .parse()
                        .map_err(|_| bad("not a number".into()))?;
                    if !(p > 0.0 && p < 1.0) {
                        return Err(bad("must be a fraction between 0 and 1".into()));
                    }
                    spec.fpr = Some(p);
                }
                "eviction" => {
                    let e: Eviction = value.trim().parse().map_err(bad)?;
                    if e.needs_future() {
                        return Err(bad(
                            "needs every request's next access, which a live proxy cannot know"
                                .into(),
                        ));
                    }
                    spec.eviction = Some(e);
                }
                "capacity" => match units::parse_bytes(value).map_err(bad)? {
                    0 => return Err(bad("must be more than 0 bytes".into())),
                    n => spec.capacity = Some(n),
                },
                other => {
                    return Err(format!(
                        "shadow {text:?}: unknown option {other:?} (window, expected_items, fpr, eviction, capacity)"
                    ))
                }
            }
        }
        Ok(spec)
    }
}

/// One shadow's figures, published by the lab thread after every sighting.
#[derive(Default, Debug)]
struct Figures {
    requests: Figure,
    hits: Figure,
    hit_bytes: Figure,
    writes: Figure,
    write_bytes: Figure,
    stored_bytes: Figure,
}

/// A counter family of the shadows: name, help, and how to read it.
type Counter = (&'static str, &'static str, fn(&Figures) -> u64);

/// A shadow's figures as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShadowFigures {
    /// The spec (the `policy` label).
    pub policy: String,
    /// Whether it is the live policy computed as a shadow.
    pub live: bool,
    /// Its capacity in bytes.
    pub capacity: u64,
    /// Sightings it took.
    pub requests: u64,
    /// Of those, hits.
    pub hits: u64,
    /// Bytes of the hits.
    pub hit_bytes: u64,
    /// Cache writes.
    pub writes: u64,
    /// Bytes of the writes.
    pub write_bytes: u64,
}

struct Row {
    spec: ShadowSpec,
    live: bool,
    capacity: u64,
    bytes_per_object: u64,
    figures: Shared<Figures>,
}

struct ShadowSink {
    lanes: Vec<(Lane, Shared<Figures>)>,
    vtime: u64,
}

impl Sink for ShadowSink {
    fn take(&mut self, s: &Sighting) {
        // An object of unknown or no size weighs one byte here, so that a shadow never tracks
        // more objects than its capacity in bytes.
        let access = Access::new(s.id, s.size.max(1), self.vtime);
        self.vtime += 1;
        for (lane, f) in &mut self.lanes {
            let step = lane.see(&access, s.time, s.storable);
            let c = lane.counts();
            f.requests.set(c.requests);
            match step {
                Step::Hit => {
                    f.hits.set(c.hits);
                    f.hit_bytes.set(c.hit_bytes);
                }
                Step::Written | Step::Refused => {
                    f.writes.set(c.admissions);
                    f.write_bytes.set(c.admitted_bytes);
                    f.stored_bytes.set(lane.used_bytes());
                }
                Step::Deferred => {}
            }
        }
    }
}

/// The shadows of one `serve`, the live policy's first.
pub struct Shadows {
    rows: Vec<Row>,
    tap: Tap,
}

/// Why the shadows could not start.
#[derive(Debug, thiserror::Error)]
pub enum ShadowError {
    /// A shadow's policy or store could not be built.
    #[error("lab.shadow {spec:?}: {error}")]
    Build {
        /// The spec.
        spec: String,
        /// Why.
        error: crate::store::LaneError,
    },
    /// The thread could not start.
    #[error("lab.shadow: starting its thread: {0}")]
    Thread(#[from] io::Error),
}

impl Shadows {
    /// Starts the shadows `specs` and the live policy's (`live`, with the live `settings`,
    /// `eviction` and `capacity`), fed through a queue of `queue` sightings.
    pub fn start(
        live: Policy,
        specs: &[ShadowSpec],
        settings: &Settings,
        eviction: Eviction,
        capacity: u64,
        queue: usize,
    ) -> Result<Shadows, ShadowError> {
        let mut rows = Vec::new();
        let mut lanes = Vec::new();
        let all = std::iter::once((ShadowSpec::live(live), true))
            .chain(specs.iter().map(|s| (s.clone(), false)));
        for (spec, is_live) in all {
            let eviction = spec.eviction.unwrap_or(eviction);
            let capacity = spec.capacity.unwrap_or(capacity);
            let store = if eviction.is_exact() {
                StoreKind::Exact
            } else {
                StoreKind::Moka
            };
            let lane = Lane::new(
                spec.policy,
                eviction,
                store,
                capacity,
                &spec.settings(settings),
                false,
            )
            .map_err(|error| ShadowError::Build {
                spec: spec.text.clone(),
                error,
            })?;
            let figures = Arc::new(Figures::default());
            lanes.push((lane, Arc::clone(&figures)));
            rows.push(Row {
                spec,
                live: is_live,
                capacity,
                bytes_per_object: bytes_per_object(eviction),
                figures,
            });
        }
        let tap = Tap::start("secondhit-shadows", queue, ShadowSink { lanes, vtime: 0 })?;
        Ok(Shadows { rows, tap })
    }

    /// Queues a sighting (never blocks; dropped and counted when the queue is full).
    #[inline]
    pub fn offer(&self, s: Sighting) {
        self.tap.offer(s);
    }

    /// Waits (up to `timeout`) until every sighting queued so far is taken.
    pub fn settle(&self, timeout: Duration) -> bool {
        self.tap.settle(timeout)
    }

    /// Sightings dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.tap.dropped()
    }

    /// Each shadow's figures, the live policy's first.
    pub fn figures(&self) -> Vec<ShadowFigures> {
        self.rows
            .iter()
            .map(|r| ShadowFigures {
                policy: r.spec.text.clone(),
                live: r.live,
                capacity: r.capacity,
                requests: r.figures.requests.get(),
                hits: r.figures.hits.get(),
                hit_bytes: r.figures.hit_bytes.get(),
                writes: r.figures.writes.get(),
                write_bytes: r.figures.write_bytes.get(),
            })
            .collect()
    }

    /// Adds the `secondhit_shadow_*` families, one sample per shadow.
    pub(crate) fn collect(&self, out: &mut Families) {
        let label = |r: &Row| -> Labels {
            vec![
                ("policy", r.spec.text.clone()),
                ("live", r.live.to_string()),
            ]
        };
        let counters: [Counter; 5] = [
            ("shadow_requests", "Sightings the shadow took", |f| {
                f.requests.get()
            }),
            ("shadow_hits", "Of those, hits in the shadow's store", |f| {
                f.hits.get()
            }),
            ("shadow_hit_bytes", "Bytes of the shadow's hits", |f| {
                f.hit_bytes.get()
            }),
            (
                "shadow_writes",
                "The shadow's cache writes (admitted misses that fit)",
                |f| f.writes.get(),
            ),
            (
                "shadow_write_bytes",
                "Bytes of the shadow's cache writes",
                |f| f.write_bytes.get(),
            ),
        ];
        for (name, help, get) in counters {
            out.counters(
                name,
                help,
                self.rows.iter().map(|r| (label(r), get(&r.figures))),
            );
        }
        out.gauges(
            "shadow_stored_bytes",
            "Object bytes in the shadow's store",
            self.rows
                .iter()
                .map(|r| (label(r), r.figures.stored_bytes.get().into())),
        );
        out.gauges(
            "shadow_bytes_per_object",
            "Memory the shadow's store takes per object it tracks (documented estimate)",
            self.rows
                .iter()
                .map(|r| (label(r), r.bytes_per_object.into())),
        );
        out.counter(
            "shadow_dropped",
            "Sightings the shadows missed because their queue was full (the request did not wait)",
            self.dropped(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_options_and_refuse_what_is_wrong_by_name() {
        let s: ShadowSpec = "second-hit:window=10m".parse().unwrap();
        assert_eq!(s.policy, Policy::SecondHit);
        assert_eq!(s.window, Some(Some(Duration::from_secs(600))));
        let s: ShadowSpec = "nth-hit:3".parse().unwrap();
        assert_eq!(s.policy, Policy::NthHit(3));
        assert_eq!(s.window, None);
        let s: ShadowSpec = "admit-all:eviction=s3fifo:capacity=1MiB".parse().unwrap();
        assert_eq!(
            (s.policy, s.eviction, s.capacity),
            (Policy::AdmitAll, Some(Eviction::S3Fifo), Some(1 << 20))
        );
        let s: ShadowSpec = "nth-hit:4:window=inf:fpr=0.001".parse().unwrap();
        assert_eq!(
            (s.policy, s.window, s.fpr),
            (Policy::NthHit(4), Some(None), Some(0.001))
        );
        assert_eq!(s.text, "nth-hit:4:window=inf:fpr=0.001");
        for (bad, says) in [
            ("third-hit", "third-hit"),
            ("second-hit:windo=1m", "unknown option \"windo\""),
            ("second-hit:10m", "not OPTION=VALUE"),
            ("admit-all:eviction=belady", "next access"),
            ("admit-all:eviction=mru", "mru"),
            ("admit-all:capacity=0", "more than 0"),
            ("second-hit:fpr=2", "fraction"),
        ] {
            let e = bad.parse::<ShadowSpec>().unwrap_err();
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
    }

    fn sight(id: u64, size: u64) -> Sighting {
        Sighting {
            id,
            size,
            time: Duration::ZERO,
            storable: true,
            weight: 0,
            fresh_for: None,
            hit: false,
        }
    }

    #[test]
    fn each_shadow_counts_as_its_policy_would_and_the_live_one_comes_first() {
        let specs = ["admit-all".parse().unwrap(), "nth-hit:3".parse().unwrap()];
        let sh = Shadows::start(
            Policy::SecondHit,
            &specs,
            &Settings::default(),
            Eviction::Lru,
            1 << 20,
            64,
        )
        .unwrap();
        for _ in 0..4 {
            sh.offer(sight(1, 100));
        }
        assert!(sh.settle(Duration::from_secs(10)));
        let f = sh.figures();
        assert_eq!(f.len(), 3);
        assert!(f[0].live && !f[1].live);
        // admit-all: miss, then 3 hits; second-hit: 2 misses, 2 hits; nth-hit:3: 3 misses, 1 hit.
        let hits: Vec<u64> = f.iter().map(|f| f.hits).collect();
        assert_eq!(hits, [2, 3, 1]);
        assert!(f.iter().all(|f| f.requests == 4 && f.writes == 1));
        assert_eq!(f[1].hit_bytes, 300);
        let mut families = Families::default();
        sh.collect(&mut families);
        let text = families.encode();
        assert!(text.contains("secondhit_shadow_hits_total{policy=\"nth-hit:3\",live=\"false\"} 1"));
        assert!(text.contains("secondhit_shadow_hits_total{policy=\"second-hit\",live=\"true\"} 2"));
        assert!(text.contains("secondhit_shadow_dropped_total 0"));
    }
}
