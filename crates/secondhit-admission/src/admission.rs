//! Admission: on a cache miss, may the fetched object be stored? A pure decision the proxy and the
//! simulator both act on.
//!
//! * [`Admission`] is the trait: `on_miss(key, now) -> Decision`, no I/O, `&self`, thread-safe.
//! * [`AdmitAll`] stores every miss (the baseline).
//! * [`Rotating`] keeps two generations of sightings (`current` takes inserts, `previous` is
//!   read-only) and admits a key once it has been seen enough times across both. Its generations
//!   are a [`Bloom`] (`second-hit`), a
//!   [`Counting`] filter (`nth-hit:N`) or exact hash maps
//!   ([`Exact`]: `second-hit-exact`, `nth-hit-exact:N`), which isolate what the approximation
//!   costs.
//! * [`Probabilistic`] (`prob:P`) and [`SizeLimit`] (`size:BYTES`) are the memoryless
//!   baselines: admit with probability P, admit objects up to a size.
//! * [`Policy`] names a policy as on the command line; [`Settings`] holds the filter settings
//!   and builds any policy from a name.
//!
//! Only misses are recorded: a hit never reaches the admission policy.
//!
//! # Example
//! ```
//! use secondhit_admission::admission::{Admission, Decision, Policy, Settings};
//! use secondhit_admission::KeyHash;
//! use std::time::Duration;
//!
//! let policy = Settings::default().build(Policy::SecondHit)?;
//! let key = KeyHash::of(b"GET example.com/a.js");
//! let t = Duration::from_secs(0);
//! assert_eq!(policy.on_miss(key, t), Decision::Defer); // one-hit wonder so far: don't store
//! assert_eq!(policy.on_miss(key, t), Decision::Admit); // second request: store it
//! assert_eq!(policy.stats().admitted, 1);
//! # Ok::<(), secondhit_admission::admission::PolicyError>(())
//! ```

mod counter;
mod exact;
mod rotating;
mod simple;
pub mod snapshot;

use counter::Counter;
pub use exact::Exact;
pub use rotating::{Generation, Kind, MakeGeneration, Rotating, Shape, Window};
pub use simple::{Probabilistic, SizeLimit};
pub use snapshot::RestoreError;

use crate::bloom::{Bloom, Counting, Layout, ParamError, Params, MAX_COUNT};
use crate::hash::KeyHash;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// What to do with a missed object once it is fetched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Decision {
    /// Store it.
    Admit,
    /// Serve it but do not store it (not seen often enough yet).
    Defer,
}

impl Decision {
    /// `"admit"` or `"defer"`, for logs and labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Decision::Admit => "admit",
            Decision::Defer => "defer",
        }
    }

    /// Whether the object should be stored.
    pub const fn is_admit(self) -> bool {
        matches!(self, Decision::Admit)
    }
}

/// An admission policy shared by the proxy (many threads, system time) and the simulator (one
/// thread per run, trace time).
///
/// Implementations must be pure of I/O and must not read a clock: `now` is the caller's time
/// since its [`Clock`](crate::clock::Clock)'s epoch. Time going backwards counts as no time
/// passing.
pub trait Admission: Send + Sync + fmt::Debug {
    /// Records a miss for `key` at `now` and decides whether to store the object.
    fn on_miss(&self, key: KeyHash, now: Duration) -> Decision;

    /// [`Admission::on_miss`] for a host that knows the object's size in bytes (the simulator
    /// does; a proxy deciding before it fetches does not). Only size-aware policies
    /// ([`SizeLimit`]) read it; the others answer as `on_miss`.
    fn on_miss_sized(&self, key: KeyHash, _size: u64, now: Duration) -> Decision {
        self.on_miss(key, now)
    }

    /// The policy's counters (cumulative since it was built) and, for filter-based policies, the
    /// state of the filters. Filter fields read the whole filter: call it for reports and
    /// metrics, not per request.
    fn stats(&self) -> Stats;

    /// The policy's name as on the command line, e.g. `second-hit` or `nth-hit:3`.
    fn name(&self) -> String;

    /// The policy's state as bytes, for the host to keep across a restart (`None`: it keeps
    /// none). `now` is the policy's clock, `wall` the time since the Unix epoch. See
    /// [`snapshot`].
    fn snapshot(&self, _now: Duration, _wall: Duration) -> Option<Vec<u8>> {
        None
    }

    /// Takes new filter settings without forgetting what the filter holds: a new window from the
    /// next miss on, and a new sizing (items, false-positive rate, layout) for the generations
    /// built from the next rotation on, the current ones answering until then. For policies
    /// without a filter, nothing to do.
    fn reconfigure(&self, _settings: &Settings) -> Result<(), PolicyError> {
        Ok(())
    }

    /// Loads what [`Admission::snapshot`] wrote (same policy, sizing and hash seed, windows not
    /// over), as of `now` and `wall`. Never panics on bad bytes; on error nothing changes.
    fn restore(&self, _bytes: &[u8], _now: Duration, _wall: Duration) -> Result<(), RestoreError> {
        Err(RestoreError::Unsupported)
    }
}

/// What every policy counts. Counters are cumulative since the policy was built.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Stats {
    /// Misses that were admitted.
    pub admitted: u64,
    /// Misses that were deferred.
    pub deferred: u64,
    /// Generation rotations so far.
    pub rotations: u64,
    /// Of those, rotations because `current` reached its `max_items` distinct keys before its
    /// window ended: the generations are sized for fewer keys than arrive in a window, so
    /// sightings are forgotten sooner than the window promises.
    pub rotations_on_count: u64,
    /// The most distinct keys a window would hold, estimated at count-triggered rotations from
    /// how fast `current` filled (keys x window / time taken); 0 when none happened or there is
    /// no window. What `expected_items` should be at least.
    pub keys_per_window: u64,
    /// The generations' state, for policies that keep them.
    pub filter: Option<FilterStats>,
}

/// The state of a rotating pair of generations.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FilterStats {
    /// Distinct keys recorded in `current` since the last rotation (for a filter, keys that set
    /// at least one new position).
    pub current_items: u64,
    /// Fraction of `current`'s bits (counters) set; 0 for exact sets.
    pub current_fill: f64,
    /// Fraction of `previous`'s bits (counters) set; 0 for exact sets.
    pub previous_fill: f64,
    /// Estimated chance that a key never seen reads as seen in either generation:
    /// `1 - (1 - fill_c^k)(1 - fill_p^k)`; 0 for exact sets.
    pub estimated_fpr: f64,
    /// Heap memory of both generations, in bytes (for exact sets, an estimate of the tables).
    pub memory_bytes: u64,
}

/// Why a policy could not be built or parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyError {
    /// A policy name that is not one of the known ones.
    Unknown(String),
    /// `prob:P` with P not a number in [0, 1].
    BadProbability(String),
    /// `size:BYTES` with a size that does not parse.
    BadSize(String),
    /// `nth-hit:N` with N outside 2..=16.
    BadN {
        /// The policy as written.
        policy: String,
        /// The N as written.
        value: String,
    },
    /// The filter's parameters were refused.
    Filter(ParamError),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Unknown(name) => write!(
                f,
                "unknown admission policy {name:?}: expected admit-all, second-hit, second-hit-exact, nth-hit:N, nth-hit-exact:N, prob:P or size:BYTES"
            ),
            PolicyError::BadProbability(v) => write!(
                f,
                "prob:P: P must be a probability from 0 to 1 (kept to 7 decimals), got {v:?}"
            ),
            PolicyError::BadSize(v) => write!(
                f,
                "size:BYTES: BYTES must be a whole number of bytes, optionally with KB, MB, GB, KiB, MiB or GiB, got {v:?}"
            ),
            PolicyError::BadN { policy, value } => write!(
                f,
                "{policy}: N must be a whole number from 2 to {} (use admit-all for N = 1), got {value:?}",
                MAX_COUNT + 1
            ),
            PolicyError::Filter(e) => write!(f, "filter settings: {e}"),
        }
    }
}

impl std::error::Error for PolicyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PolicyError::Filter(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ParamError> for PolicyError {
    fn from(e: ParamError) -> Self {
        PolicyError::Filter(e)
    }
}

/// A policy by name, as on the command line (`admit-all`, `second-hit`, `second-hit-exact`,
/// `nth-hit:N`, `nth-hit-exact:N`, `prob:P`, `size:BYTES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Store every miss.
    AdmitAll,
    /// Store on the second request within the windows (rotating Bloom pair).
    SecondHit,
    /// `second-hit` over exact sets with the same time windows.
    SecondHitExact,
    /// Store on the N-th request within the windows (rotating counting-Bloom pair), 2 <= N <= 16.
    NthHit(u32),
    /// `nth-hit:N` over exact counts with the same time windows.
    NthHitExact(u32),
    /// Store each miss with probability P, given in parts per ten million (`prob:0.1` is
    /// 1,000,000), drawn from a seeded generator.
    Prob(u32),
    /// Store objects of at most this many bytes (`size:1MiB`); needs the object's size.
    Size(u64),
}

impl Policy {
    /// Whether the policy keeps a Bloom-style filter (and so has a false-positive rate).
    pub fn is_approximate(self) -> bool {
        matches!(self, Policy::SecondHit | Policy::NthHit(_))
    }

    /// The exact counterpart with the same windows, if the policy is approximate.
    pub fn exact_counterpart(self) -> Option<Policy> {
        match self {
            Policy::SecondHit => Some(Policy::SecondHitExact),
            Policy::NthHit(n) => Some(Policy::NthHitExact(n)),
            _ => None,
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::AdmitAll => f.write_str("admit-all"),
            Policy::SecondHit => f.write_str("second-hit"),
            Policy::SecondHitExact => f.write_str("second-hit-exact"),
            Policy::NthHit(n) => write!(f, "nth-hit:{n}"),
            Policy::NthHitExact(n) => write!(f, "nth-hit-exact:{n}"),
            Policy::Prob(p) => {
                let text = format!("{:.7}", f64::from(*p) / 1e7);
                let text = text.trim_end_matches('0').trim_end_matches('.');
                write!(f, "prob:{text}")
            }
            Policy::Size(b) => write!(f, "size:{b}"),
        }
    }
}

impl FromStr for Policy {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let parse_n = |v: &str| -> Result<u32, PolicyError> {
            match v.parse::<u32>() {
                Ok(n) if (2..=MAX_COUNT + 1).contains(&n) => Ok(n),
                _ => Err(PolicyError::BadN {
                    policy: s.to_string(),
                    value: v.to_string(),
                }),
            }
        };
        match s {
            "admit-all" => Ok(Policy::AdmitAll),
            "second-hit" => Ok(Policy::SecondHit),
            "second-hit-exact" => Ok(Policy::SecondHitExact),
            _ => {
                if let Some(v) = s.strip_prefix("nth-hit:") {
                    Ok(Policy::NthHit(parse_n(v)?))
                } else if let Some(v) = s.strip_prefix("nth-hit-exact:") {
                    Ok(Policy::NthHitExact(parse_n(v)?))
                } else if let Some(v) = s.strip_prefix("prob:") {
                    let p: f64 = v
                        .trim()
                        .parse()
                        .map_err(|_| PolicyError::BadProbability(v.to_string()))?;
                    if !(0.0..=1.0).contains(&p) {
                        return Err(PolicyError::BadProbability(v.to_string()));
                    }
                    Ok(Policy::Prob((p * 1e7).round() as u32))
                } else if let Some(v) = s.strip_prefix("size:") {
                    parse_size(v)
                        .map(Policy::Size)
                        .ok_or_else(|| PolicyError::BadSize(v.to_string()))
                } else {
                    Err(PolicyError::Unknown(s.to_string()))
                }
            }
        }
    }
}

/// The settings every windowed policy shares; `serve` and `simulate` use the same defaults, so
/// that a prediction and a live run with no options describe the same cache.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Settings {
    /// How long a generation takes inserts before it rotates; `None` never rotates on time.
    pub window: Option<Duration>,
    /// Distinct keys a generation is sized for; a filter rotates early when `current` has taken
    /// this many, so its false-positive rate stays near `fpr` under a surge.
    pub expected_items: u64,
    /// Target false-positive rate of one generation at `expected_items`.
    pub fpr: f64,
    /// The filters' layout.
    pub layout: Layout,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            window: Some(Self::DEFAULT_WINDOW),
            expected_items: Self::DEFAULT_EXPECTED_ITEMS,
            fpr: Self::DEFAULT_FPR,
            layout: Layout::Blocked,
        }
    }
}

impl Settings {
    /// Default window: one hour.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(3600);
    /// Default distinct keys per generation: one million (1.2 MiB per generation at 1 %).
    pub const DEFAULT_EXPECTED_ITEMS: u64 = 1_000_000;
    /// Default target false-positive rate: 1 %.
    pub const DEFAULT_FPR: f64 = 0.01;

    /// The `expected_items` that fits `keys` distinct keys a window with room to spare: a
    /// quarter more, rounded up to two significant digits (3,456,789 -> 4,400,000), at least
    /// 1,000. What `simulate --expected-items auto` picks and the undersized-filter warnings
    /// suggest (from [`Stats::keys_per_window`]).
    pub fn expected_items_for(keys: u64) -> u64 {
        let want = keys.saturating_add(keys / 4).max(1_000);
        let unit = 10u64.pow(want.ilog10().saturating_sub(1));
        want.div_ceil(unit).saturating_mul(unit)
    }

    /// The parameters of one generation's filter.
    pub fn filter_params(&self) -> Result<Params, ParamError> {
        Params::for_rate(self.expected_items, self.fpr, self.layout)
    }

    /// Builds a policy with these settings. Exact policies rotate on time only (they have no
    /// false-positive rate to protect), so with `window: None` they never forget.
    pub fn build(&self, policy: Policy) -> Result<Box<dyn Admission>, PolicyError> {
        let filter_window = Window {
            length: self.window,
            max_items: Some(self.expected_items),
        };
        let exact_window = Window {
            length: self.window,
            max_items: None,
        };
        Ok(match policy {
            Policy::AdmitAll => Box::new(AdmitAll::default()),
            Policy::SecondHit => {
                let p = self.filter_params()?;
                Box::new(Rotating::new(
                    Bloom::new(p),
                    Bloom::new(p),
                    1,
                    filter_window,
                ))
            }
            Policy::NthHit(n) => {
                let p = self.filter_params()?;
                Box::new(Rotating::new(
                    Counting::new(p),
                    Counting::new(p),
                    n - 1,
                    filter_window,
                ))
            }
            Policy::SecondHitExact => {
                Box::new(Rotating::new(Exact::new(), Exact::new(), 1, exact_window))
            }
            Policy::NthHitExact(n) => Box::new(Rotating::new(
                Exact::new(),
                Exact::new(),
                n - 1,
                exact_window,
            )),
            Policy::Prob(p) => Box::new(Probabilistic::new(p, simple::DEFAULT_SEED)),
            Policy::Size(limit) => Box::new(SizeLimit::new(limit)),
        })
    }
}

/// Bytes as `size:` takes them: a whole number with an optional decimal (KB, MB, GB) or binary
/// (KiB, MiB, GiB) unit.
fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(digits);
    let n: u64 = n.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Admits every miss: the classic cache, and the baseline every other policy is compared with.
#[derive(Debug, Default)]
pub struct AdmitAll {
    admitted: Counter,
}

impl Admission for AdmitAll {
    fn on_miss(&self, _key: KeyHash, _now: Duration) -> Decision {
        self.admitted.incr();
        Decision::Admit
    }

    fn stats(&self) -> Stats {
        Stats {
            admitted: self.admitted.get(),
            ..Stats::default()
        }
    }

    fn name(&self) -> String {
        Policy::AdmitAll.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_items_are_suggested_with_room_and_round_figures() {
        assert_eq!(Settings::expected_items_for(0), 1_000);
        assert_eq!(Settings::expected_items_for(40_800), 51_000);
        assert_eq!(Settings::expected_items_for(3_456_789), 4_400_000);
        assert_eq!(Settings::expected_items_for(u64::MAX), u64::MAX);
    }

    #[test]
    fn policy_names_round_trip() {
        for name in [
            "admit-all",
            "second-hit",
            "second-hit-exact",
            "nth-hit:2",
            "nth-hit:16",
            "nth-hit-exact:5",
            "prob:0.1",
            "prob:0.0005",
            "prob:1",
            "size:1048576",
        ] {
            let p: Policy = name.parse().unwrap();
            assert_eq!(p.to_string(), name);
            let built = Settings::default().build(p).unwrap();
            assert_eq!(built.name(), name);
        }
    }

    #[test]
    fn bad_policy_names_say_what_is_wrong() {
        let e = "second_hit".parse::<Policy>().unwrap_err().to_string();
        assert!(
            e.contains("\"second_hit\"") && e.contains("nth-hit:N"),
            "{e}"
        );
        for bad in ["nth-hit:1", "nth-hit:17", "nth-hit:x", "nth-hit:"] {
            let e = bad.parse::<Policy>().unwrap_err().to_string();
            assert!(e.contains("from 2 to 16"), "{bad}: {e}");
        }
        for bad in ["prob:1.5", "prob:-0.1", "prob:x"] {
            let e = bad.parse::<Policy>().unwrap_err().to_string();
            assert!(e.contains("probability from 0 to 1"), "{bad}: {e}");
        }
        assert_eq!("size:2MiB".parse::<Policy>(), Ok(Policy::Size(2 << 20)));
        assert_eq!("size:5KB".parse::<Policy>(), Ok(Policy::Size(5_000)));
        let e = "size:5XB".parse::<Policy>().unwrap_err().to_string();
        assert!(e.contains("\"5XB\""), "{e}");
        let s = Settings {
            fpr: 1.5,
            ..Settings::default()
        };
        let e = s.build(Policy::SecondHit).unwrap_err().to_string();
        assert!(e.contains("1.5"), "{e}");
        // An exact policy needs no filter, so bad filter settings do not matter to it.
        assert!(s.build(Policy::SecondHitExact).is_ok());
    }

    #[test]
    fn admit_all_admits_and_counts() {
        let a = AdmitAll::default();
        for i in 0..5 {
            assert_eq!(
                a.on_miss(KeyHash::of_u64(i), Duration::ZERO),
                Decision::Admit
            );
        }
        assert_eq!(
            a.stats(),
            Stats {
                admitted: 5,
                ..Stats::default()
            }
        );
    }
}
