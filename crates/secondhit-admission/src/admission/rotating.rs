//! Two generations of sightings, rotated atomically: the heart of `second-hit`.
//!
//! `current` takes every miss; `previous` is only read. A key counts as seen as often as the two
//! generations together say. Rotation (`previous <- current`, `current <- empty`) replaces the
//! pair behind an [`ArcSwap`] in one atomic store, so readers never block and never see half a
//! rotation. Memory stays fixed: the generation that falls off is cleared and becomes the new
//! `current`.
//!
//! Rotation is due when the window has passed since the last one, or when `current` has taken
//! its sized number of distinct keys. Exactly one caller performs it per trigger: the others
//! find the rotation lock taken (and carry on with the old pair) or, once they get it, find the
//! trigger already gone.
//!
//! What a caller racing a rotation can see: it may still hold the old pair while the generation
//! falling off (the old `previous`) is being cleared to become the new `current`. It then counts
//! that generation's sightings as partly or wholly gone. Those sightings are more than one window
//! old, which the window guarantee already lets go, so the answer is one the guarantee allows.
//! Its own sighting goes into the old `current`, which is the new `previous`, so it is kept. One
//! case can cost a sighting: when no miss came for a whole window, rotation also clears the old
//! `current`; a sighting recorded into it by a racing caller can be cleared with it, and that key's
//! next miss is then deferred once more than it would have been. No decision is ever unsafe (a
//! false "admit" needs bits that were set), and no caller blocks.

use super::counter::Counter;
use super::snapshot::{self, kind_byte, RestoreError, NO_WINDOW};
use super::{Admission, Decision, FilterStats, Stats};
use crate::bloom::{Bloom, Counting};
use crate::hash::KeyHash;
use arc_swap::ArcSwap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::Duration;

/// One generation of sightings: a set that can count (perhaps only to 1) and only grows until
/// cleared. Implemented by [`Bloom`] (counts to 1), [`Counting`] (to 15) and
/// [`Exact`](super::Exact).
pub trait Generation: Send + Sync + 'static {
    /// What kind of generation this is; names the policy.
    const KIND: Kind;
    /// Records one sighting of `key`; returns the count before it, never below the truth (up to
    /// the generation's maximum).
    fn record(&self, key: KeyHash) -> u32;
    /// The key's count, never below the truth (up to the maximum).
    fn count(&self, key: KeyHash) -> u32;
    /// Forgets everything.
    fn clear(&self);
    /// `(fill, false-positive rate)` for approximate generations, `None` for exact ones. O(size).
    fn accuracy(&self) -> Option<(f64, f64)>;
    /// Heap memory in bytes (an estimate for hash tables).
    fn memory_bytes(&self) -> u64;
    /// What a snapshot of this generation must match to be loaded into it.
    fn shape(&self) -> Shape;
    /// Appends the contents, for a snapshot.
    fn save(&self, out: &mut Vec<u8>);
    /// Replaces the contents from what [`Generation::save`] wrote for the same shape; `false`,
    /// changing nothing, if the bytes cannot be that.
    fn load(&self, bytes: &[u8]) -> bool;
    /// An empty generation sized by `settings` (filters: their parameters; exact sets: as
    /// always).
    fn sized_for(settings: &super::Settings) -> Result<Self, crate::bloom::ParamError>
    where
        Self: Sized;
}

/// A generation's shape: the filter's parameters (layout, bits, hashes), all zero for exact
/// sets. A snapshot loads only into a generation of the same shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// 0 standard, 1 blocked (filters); 0 for exact sets.
    pub layout: u8,
    /// Bits (filters); 0 for exact sets.
    pub bits: u64,
    /// Hashes (filters); 0 for exact sets.
    pub hashes: u32,
}

impl Shape {
    /// The shape of an exact generation.
    pub const EXACT: Shape = Shape {
        layout: 0,
        bits: 0,
        hashes: 0,
    };

    fn of(p: crate::bloom::Params) -> Shape {
        Shape {
            layout: match p.layout {
                crate::bloom::Layout::Standard => 0,
                crate::bloom::Layout::Blocked => 1,
            },
            bits: p.bits,
            hashes: p.hashes,
        }
    }
}

impl Generation for Bloom {
    const KIND: Kind = Kind::Bloom;
    #[inline]
    fn record(&self, key: KeyHash) -> u32 {
        u32::from(self.insert(key))
    }
    #[inline]
    fn count(&self, key: KeyHash) -> u32 {
        u32::from(self.contains(key))
    }
    fn clear(&self) {
        Bloom::clear(self)
    }
    fn accuracy(&self) -> Option<(f64, f64)> {
        let fill = self.fill_ratio();
        Some((fill, fill.powi(self.params().hashes as i32)))
    }
    fn memory_bytes(&self) -> u64 {
        Bloom::memory_bytes(self)
    }
    fn shape(&self) -> Shape {
        Shape::of(self.params())
    }
    fn save(&self, out: &mut Vec<u8>) {
        Bloom::save(self, out)
    }
    fn load(&self, bytes: &[u8]) -> bool {
        Bloom::load(self, bytes)
    }
    fn sized_for(settings: &super::Settings) -> Result<Self, crate::bloom::ParamError> {
        Ok(Bloom::new(settings.filter_params()?))
    }
}

impl Generation for Counting {
    const KIND: Kind = Kind::Counting;
    #[inline]
    fn record(&self, key: KeyHash) -> u32 {
        self.increment(key)
    }
    #[inline]
    fn count(&self, key: KeyHash) -> u32 {
        Counting::count(self, key)
    }
    fn clear(&self) {
        Counting::clear(self)
    }
    fn accuracy(&self) -> Option<(f64, f64)> {
        let fill = self.fill_ratio();
        Some((fill, fill.powi(self.params().hashes as i32)))
    }
    fn memory_bytes(&self) -> u64 {
        Counting::memory_bytes(self)
    }
    fn shape(&self) -> Shape {
        Shape::of(self.params())
    }
    fn save(&self, out: &mut Vec<u8>) {
        Counting::save(self, out)
    }
    fn load(&self, bytes: &[u8]) -> bool {
        Counting::load(self, bytes)
    }
    fn sized_for(settings: &super::Settings) -> Result<Self, crate::bloom::ParamError> {
        Ok(Counting::new(settings.filter_params()?))
    }
}

/// The kinds of [`Generation`], for naming a [`Rotating`] policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Membership only (counts 0 or 1).
    Bloom,
    /// Approximate counts.
    Counting,
    /// Exact counts.
    Exact,
}

/// When a generation rotates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Rotate when the current window of this length has ended. Windows lie on a fixed grid
    /// that starts at the first miss (and restarts at a count-triggered rotation). `None`: never
    /// on time.
    pub length: Option<Duration>,
    /// Rotate when `current` has recorded this many distinct keys. `None`: never on count.
    pub max_items: Option<u64>,
}

const NOT_STARTED: u64 = u64::MAX;

struct Pair<G> {
    current: Arc<G>,
    previous: Arc<G>,
    /// When this pair's window began, in nanoseconds; `NOT_STARTED` until the first miss.
    started: AtomicU64,
    /// Distinct keys `current` has recorded.
    distinct: AtomicU64,
}

/// The rotating-pair policy: admits a miss when the key's count over both generations, before
/// this miss, reaches `threshold` (1 for second-hit, N - 1 for nth-hit:N).
///
/// Guarantee (tested): while `current` stays under `max_items` distinct keys, a key seen at time
/// `t` is admitted on any later miss before `t + window`, and (barring false positives) a key not
/// seen since `t` is forgotten from `t + 2 * window` on: windows lie on a fixed grid from the
/// first miss. A false positive can only admit early, never defer.
///
/// # Example
/// ```
/// use secondhit_admission::admission::{Admission, Decision, Rotating, Window};
/// use secondhit_admission::bloom::{Bloom, Layout, Params};
/// use secondhit_admission::KeyHash;
/// use std::time::Duration;
///
/// let p = Params::for_rate(10_000, 0.01, Layout::Blocked)?;
/// let window = Window { length: Some(Duration::from_secs(60)), max_items: Some(10_000) };
/// let policy = Rotating::new(Bloom::new(p), Bloom::new(p), 1, window);
/// let key = KeyHash::of(b"/index.html");
/// let s = Duration::from_secs;
/// assert_eq!(policy.on_miss(key, s(0)), Decision::Defer);
/// assert_eq!(policy.on_miss(key, s(59)), Decision::Admit);
/// // Not seen for two windows: forgotten, so deferred again.
/// assert_eq!(policy.on_miss(key, s(300)), Decision::Defer);
/// assert_eq!(policy.stats().rotations, 1);
/// # Ok::<(), secondhit_admission::bloom::ParamError>(())
/// ```
pub struct Rotating<G> {
    pair: ArcSwap<Pair<G>>,
    threshold: u32,
    /// The window's length in nanoseconds ([`UNSET`]: none); changed by [`Rotating::reconfigure`].
    length: AtomicU64,
    /// Distinct keys that trigger a rotation ([`UNSET`]: none).
    max_items: AtomicU64,
    /// A new sizing to build generations with from the next rotation on.
    pending: Mutex<Option<Resize<G>>>,
    rotation: Mutex<()>,
    admitted: Counter,
    deferred: Counter,
    rotations: AtomicU64,
    rotations_on_count: AtomicU64,
    keys_per_window: AtomicU64,
}

/// "Not set" for the window's atomics.
const UNSET: u64 = u64::MAX;

/// Builds a generation of a new size (`None` if it cannot: the old size is kept).
pub type MakeGeneration<G> = Box<dyn Fn() -> Option<G> + Send + Sync>;

/// Generations of a new size, built at the next two rotations (then both are of it).
struct Resize<G> {
    make: MakeGeneration<G>,
    max_items: Option<u64>,
    builds_left: u8,
}

fn load_opt(a: &AtomicU64) -> Option<u64> {
    Some(a.load(Relaxed)).filter(|&v| v != UNSET)
}

impl<G> fmt::Debug for Rotating<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rotating")
            .field("generation", &std::any::type_name::<G>())
            .field("threshold", &self.threshold)
            .field("length_nanos", &load_opt(&self.length))
            .field("max_items", &load_opt(&self.max_items))
            .finish_non_exhaustive()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1)
}

impl<G: Generation> Rotating<G> {
    /// A policy over two empty generations (`current`, `previous`) that admits a key once its
    /// count before the miss reaches `threshold` (0 admits everything). The first window starts
    /// at the first miss.
    pub fn new(current: G, previous: G, threshold: u32, window: Window) -> Self {
        Rotating {
            pair: ArcSwap::from_pointee(Pair {
                current: Arc::new(current),
                previous: Arc::new(previous),
                started: AtomicU64::new(NOT_STARTED),
                distinct: AtomicU64::new(0),
            }),
            threshold,
            length: AtomicU64::new(window.length.map_or(UNSET, nanos)),
            max_items: AtomicU64::new(window.max_items.unwrap_or(UNSET)),
            pending: Mutex::new(None),
            rotation: Mutex::new(()),
            admitted: Counter::default(),
            deferred: Counter::default(),
            rotations: AtomicU64::new(0),
            rotations_on_count: AtomicU64::new(0),
            keys_per_window: AtomicU64::new(0),
        }
    }

    /// The rotation rules now.
    pub fn window(&self) -> Window {
        Window {
            length: load_opt(&self.length).map(Duration::from_nanos),
            max_items: load_opt(&self.max_items),
        }
    }

    /// Changes the rules without losing what the generations hold: the window's length from the
    /// next miss on; and, when `resize` is given, generations built by it (with their own
    /// `max_items`) from the next rotation on, the current ones answering until then. Safe while
    /// the policy is in use.
    pub fn reconfigure(
        &self,
        length: Option<Duration>,
        max_items: Option<u64>,
        resize: Option<MakeGeneration<G>>,
    ) {
        self.length.store(length.map_or(UNSET, nanos), Relaxed);
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        match resize {
            Some(make) => {
                *pending = Some(Resize {
                    make,
                    max_items,
                    builds_left: 2,
                })
            }
            None => {
                *pending = None;
                self.max_items.store(max_items.unwrap_or(UNSET), Relaxed);
            }
        }
    }

    fn rotation_due(&self, pair: &Pair<G>, now: u64) -> bool {
        let started = pair.started.load(Relaxed);
        if started == NOT_STARTED {
            // The first miss starts the first window; losing this race to another first miss
            // is fine (both are "now").
            let _ = pair
                .started
                .compare_exchange(NOT_STARTED, now, Relaxed, Relaxed);
            return false;
        }
        load_opt(&self.length).is_some_and(|w| now.saturating_sub(started) >= w)
            || load_opt(&self.max_items).is_some_and(|m| pair.distinct.load(Relaxed) >= m)
    }

    /// The policy's state as bytes (see [`snapshot`](super::snapshot)): both generations and
    /// the current window's age at `now` (the policy's clock), stamped with `wall` (the time since
    /// the Unix epoch, which a later [`Rotating::restore`] compares with its own). Safe while the
    /// policy is in use: a miss recorded during the copy may or may not be in it.
    pub fn snapshot(&self, now: Duration, wall: Duration) -> Vec<u8> {
        let pair = self.pair.load();
        let started = pair.started.load(Relaxed);
        let age = if started == NOT_STARTED {
            NO_WINDOW
        } else {
            nanos(now).saturating_sub(started)
        };
        snapshot::encode(
            self.threshold,
            nanos(wall),
            age,
            pair.distinct.load(Relaxed),
            &*pair.current,
            &*pair.previous,
        )
    }

    /// Loads a snapshot into this policy, as of `now` (its clock) and `wall` (since the Unix
    /// epoch): the current window's age is the saved age plus the wall time since the save. It
    /// must be of the same kind and threshold, sized the same, written with the same hash seed,
    /// and its window must have begun less than two windows ago. Meant for a fresh policy at
    /// start; on any error nothing is changed.
    pub fn restore(&self, bytes: &[u8], now: Duration, wall: Duration) -> Result<(), RestoreError> {
        let p = snapshot::parse(bytes)?;
        if p.kind != kind_byte(G::KIND) || p.threshold != self.threshold {
            let describe = |kind: u8, t: u32| match kind {
                0 => "second-hit".to_string(),
                1 => format!("nth-hit:{}", t + 1),
                2 if t == 1 => "second-hit-exact".to_string(),
                2 => format!("nth-hit-exact:{}", t + 1),
                other => format!("an unknown policy kind ({other})"),
            };
            return Err(RestoreError::Policy {
                found: describe(p.kind, p.threshold),
                expected: describe(kind_byte(G::KIND), self.threshold),
            });
        }
        let pair = self.pair.load();
        let expected = pair.current.shape();
        if p.shape != expected {
            return Err(RestoreError::Sizing {
                found: p.shape,
                expected,
            });
        }
        if p.seed != crate::hash::SEED {
            return Err(RestoreError::Seed(p.seed));
        }
        let elapsed = nanos(wall).saturating_sub(p.saved_at);
        let age = (p.age != NO_WINDOW).then(|| p.age.saturating_add(elapsed));
        if let (Some(age), Some(w)) = (age, self.window().length) {
            if age >= nanos(w).saturating_mul(2) {
                return Err(RestoreError::TooOld {
                    age: Duration::from_nanos(age),
                    window: w,
                });
            }
        }
        // Same shape and a good checksum: the lengths match. (A snapshot taken right after a
        // resize holds a previous generation of the old size: it is left out, the current kept.)
        if !pair.current.load(p.current) {
            return Err(RestoreError::NotASnapshot);
        }
        if !pair.previous.load(p.previous) {
            pair.previous.clear();
        }
        pair.started.store(
            age.map_or(NOT_STARTED, |a| nanos(now).saturating_sub(a)),
            Relaxed,
        );
        pair.distinct.store(p.distinct, Relaxed);
        Ok(())
    }

    /// Rotates if still due once the rotation lock is held; returns at once if another caller is
    /// rotating (it keeps using the old pair; the module's documentation says what it can see).
    #[cold]
    fn rotate(&self, now: u64) {
        let _guard = match self.rotation.try_lock() {
            Ok(g) => g,
            // The lock guards no data, so a panic while holding it left nothing inconsistent.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        let old = self.pair.load_full();
        if !self.rotation_due(&old, now) {
            return;
        }
        // Windows stay on a fixed grid from the first miss, so the pair covers between one and
        // two whole windows: a sighting at t is kept until at least t + window and at most
        // t + 2 * window. A count-triggered rotation starts a new grid at `now`.
        let started = old.started.load(Relaxed);
        let elapsed = now.saturating_sub(started);
        let (new_start, both_stale) = match load_opt(&self.length) {
            Some(w) if w > 0 && elapsed >= w => (started + elapsed / w * w, elapsed / w >= 2),
            length => {
                // On count: the keys a whole window would have brought at this pace.
                self.rotations_on_count.fetch_add(1, Relaxed);
                if let Some(w) = length.filter(|_| elapsed > 0) {
                    let keys = u128::from(old.distinct.load(Relaxed)) * u128::from(w)
                        / u128::from(elapsed);
                    let keys = u64::try_from(keys).unwrap_or(u64::MAX);
                    self.keys_per_window.fetch_max(keys, Relaxed);
                }
                (now, false)
            }
        };
        // The generation falling off is recycled as the new `current` (memory stays fixed),
        // unless a new sizing is waiting: then the new `current` is built to it.
        let resized = {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let built = pending
                .as_ref()
                .and_then(|r| Some(((r.make)()?, r.max_items)));
            if let Some(r) = pending.as_mut() {
                r.builds_left = r.builds_left.saturating_sub(1);
                if r.builds_left == 0 || built.is_none() {
                    *pending = None;
                }
            }
            built
        };
        let current = match resized {
            Some((g, max_items)) => {
                self.max_items.store(max_items.unwrap_or(UNSET), Relaxed);
                Arc::new(g)
            }
            None => {
                old.previous.clear();
                Arc::clone(&old.previous)
            }
        };
        if both_stale {
            // Nothing was recorded for a whole window: what `current` holds is over two windows old.
            old.current.clear();
        }
        self.pair.store(Arc::new(Pair {
            current,
            previous: Arc::clone(&old.current),
            started: AtomicU64::new(new_start),
            distinct: AtomicU64::new(0),
        }));
        self.rotations.fetch_add(1, Relaxed);
    }
}

impl<G: Generation> Admission for Rotating<G> {
    #[inline]
    fn on_miss(&self, key: KeyHash, now: Duration) -> Decision {
        let now = nanos(now);
        let mut pair = self.pair.load();
        if self.rotation_due(&pair, now) {
            self.rotate(now);
            pair = self.pair.load();
        }
        let before = pair.current.record(key);
        if before == 0 {
            pair.distinct.fetch_add(1, Relaxed);
        }
        let seen = if before >= self.threshold {
            before
        } else {
            before + pair.previous.count(key)
        };
        if seen >= self.threshold {
            self.admitted.incr();
            Decision::Admit
        } else {
            self.deferred.incr();
            Decision::Defer
        }
    }

    fn snapshot(&self, now: Duration, wall: Duration) -> Option<Vec<u8>> {
        Some(Rotating::snapshot(self, now, wall))
    }

    fn restore(&self, bytes: &[u8], now: Duration, wall: Duration) -> Result<(), RestoreError> {
        Rotating::restore(self, bytes, now, wall)
    }

    fn reconfigure(&self, settings: &super::Settings) -> Result<(), super::PolicyError> {
        let max_items = (G::KIND != Kind::Exact).then_some(settings.expected_items);
        // A new size only when the sizing changed: the same one would just allocate again.
        let resize = match G::KIND {
            Kind::Exact => None,
            _ => {
                let shape = Shape::of(settings.filter_params()?);
                (shape != self.pair.load().current.shape()).then(|| {
                    let s = *settings;
                    Box::new(move || G::sized_for(&s).ok()) as MakeGeneration<G>
                })
            }
        };
        Rotating::reconfigure(self, settings.window, max_items, resize);
        Ok(())
    }

    fn stats(&self) -> Stats {
        let pair = self.pair.load();
        let cur = pair.current.accuracy();
        let prev = pair.previous.accuracy();
        let (current_fill, cur_fpr) = cur.unwrap_or((0.0, 0.0));
        let (previous_fill, prev_fpr) = prev.unwrap_or((0.0, 0.0));
        Stats {
            admitted: self.admitted.get(),
            deferred: self.deferred.get(),
            rotations: self.rotations.load(Relaxed),
            rotations_on_count: self.rotations_on_count.load(Relaxed),
            keys_per_window: self.keys_per_window.load(Relaxed),
            filter: Some(FilterStats {
                current_items: pair.distinct.load(Relaxed),
                current_fill,
                previous_fill,
                estimated_fpr: 1.0 - (1.0 - cur_fpr) * (1.0 - prev_fpr),
                memory_bytes: pair.current.memory_bytes() + pair.previous.memory_bytes(),
            }),
        }
    }

    fn name(&self) -> String {
        use super::Policy;
        match (G::KIND, self.threshold) {
            (Kind::Bloom, 1) => Policy::SecondHit.to_string(),
            (Kind::Bloom, t) => format!("bloom-threshold:{t}"),
            (Kind::Counting, t) => Policy::NthHit(t + 1).to_string(),
            (Kind::Exact, 1) => Policy::SecondHitExact.to_string(),
            (Kind::Exact, t) => Policy::NthHitExact(t + 1).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Exact, Policy, Settings};
    use super::*;
    use crate::bloom::{Layout, Params};
    use crate::clock::{Clock, ManualClock};
    use std::sync::Barrier;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn second_hit(window: u64, max_items: Option<u64>) -> Rotating<Bloom> {
        let p = Params::for_rate(10_000, 0.001, Layout::Standard).unwrap();
        Rotating::new(
            Bloom::new(p),
            Bloom::new(p),
            1,
            Window {
                length: Some(s(window)),
                max_items,
            },
        )
    }

    #[test]
    fn first_request_defers_second_admits() {
        let p = second_hit(60, None);
        let k = KeyHash::of(b"k");
        assert_eq!(p.on_miss(k, s(0)), Decision::Defer);
        assert_eq!(p.on_miss(k, s(1)), Decision::Admit);
        assert_eq!(p.on_miss(k, s(2)), Decision::Admit);
        let st = p.stats();
        assert_eq!((st.admitted, st.deferred, st.rotations), (2, 1, 0));
        let f = st.filter.unwrap();
        assert_eq!(f.current_items, 1);
        assert!(f.current_fill > 0.0 && f.previous_fill == 0.0);
    }

    #[test]
    fn rotations_on_count_are_told_apart_with_the_keys_a_window_would_hold() {
        let p = second_hit(60, Some(4));
        for (i, key) in [b"a", b"b", b"c", b"d"].iter().enumerate() {
            p.on_miss(KeyHash::of(*key), s(i as u64 * 5)); // four keys by t = 15
        }
        assert_eq!(p.stats().rotations, 0);
        // The fifth miss at 20 finds `current` full after 20 s of a 60 s window: 4 keys in
        // 20 s is 12 a window.
        p.on_miss(KeyHash::of(b"e"), s(20));
        let st = p.stats();
        assert_eq!(
            (st.rotations, st.rotations_on_count, st.keys_per_window),
            (1, 1, 12)
        );
        // A rotation on time counts as one, and leaves the estimate alone.
        p.on_miss(KeyHash::of(b"f"), s(80));
        let st = p.stats();
        assert_eq!(
            (st.rotations, st.rotations_on_count, st.keys_per_window),
            (2, 1, 12)
        );
    }

    #[test]
    fn a_sighting_survives_one_rotation_and_dies_at_the_second() {
        let p = second_hit(60, None);
        let (a, b) = (KeyHash::of(b"a"), KeyHash::of(b"b"));
        p.on_miss(a, s(10)); // window 1 starts at 10
        p.on_miss(b, s(65)); // 65 - 10 < 60: no rotation yet
        assert_eq!(p.stats().rotations, 0);
        // At 70 the window rotates; `a` is in previous and still admitted.
        assert_eq!(p.on_miss(a, s(70)), Decision::Admit);
        assert_eq!(p.stats().rotations, 1);
        // At 130 a second rotation drops the generation of 10..70 that held `b`'s sighting at
        // 65; `a`, recorded again at 70, is still known.
        assert_eq!(p.on_miss(b, s(130)), Decision::Defer);
        assert_eq!(p.on_miss(a, s(131)), Decision::Admit);
        assert_eq!(p.stats().rotations, 2);
    }

    #[test]
    fn a_long_gap_forgets_both_generations() {
        let p = second_hit(60, None);
        let k = KeyHash::of(b"k");
        p.on_miss(k, s(0));
        assert_eq!(p.on_miss(k, s(120)), Decision::Defer);
        assert_eq!(p.stats().rotations, 1);
    }

    #[test]
    fn time_going_backwards_is_no_time_passing() {
        let p = second_hit(60, None);
        let k = KeyHash::of(b"k");
        p.on_miss(k, s(100));
        assert_eq!(p.on_miss(k, s(5)), Decision::Admit);
        assert_eq!(p.stats().rotations, 0);
    }

    #[test]
    fn a_surge_rotates_early_on_count() {
        let p = second_hit(3600, Some(100));
        for i in 0..250u64 {
            p.on_miss(KeyHash::of_u64(i), s(0));
        }
        // 100 distinct keys fill a generation; the 101st and 201st misses rotate.
        assert_eq!(p.stats().rotations, 2);
        assert_eq!(p.stats().filter.unwrap().current_items, 50);
        // Keys 100..200 are in previous, 200..250 in current, 0..100 forgotten.
        assert_eq!(p.on_miss(KeyHash::of_u64(150), s(1)), Decision::Admit);
        assert_eq!(p.on_miss(KeyHash::of_u64(5), s(1)), Decision::Defer);
    }

    #[test]
    fn exact_with_no_window_never_forgets() {
        let p = Settings {
            window: None,
            ..Settings::default()
        }
        .build(Policy::SecondHitExact)
        .unwrap();
        let k = KeyHash::of(b"k");
        p.on_miss(k, s(0));
        for i in 0..5_000u64 {
            p.on_miss(KeyHash::of_u64(i), s(i));
        }
        assert_eq!(
            p.on_miss(k, Duration::from_secs(u64::MAX / 4)),
            Decision::Admit
        );
        assert_eq!(p.stats().rotations, 0);
    }

    #[test]
    fn nth_hit_admits_on_the_nth_request_across_generations() {
        let p = Settings {
            window: Some(s(60)),
            ..Settings::default()
        }
        .build(Policy::NthHit(3))
        .unwrap();
        let k = KeyHash::of(b"k");
        assert_eq!(p.on_miss(k, s(0)), Decision::Defer);
        // The second sighting is in the next generation: counts add up across the pair.
        assert_eq!(p.on_miss(k, s(61)), Decision::Defer);
        assert_eq!(p.on_miss(k, s(62)), Decision::Admit);
        assert_eq!(p.stats().rotations, 1);
    }

    #[test]
    fn nth_hit_2_decides_exactly_as_second_hit() {
        // Same parameters, same positions: a counter is non-zero exactly where a bit is set.
        for layout in [Layout::Standard, Layout::Blocked] {
            let settings = Settings {
                window: Some(s(50)),
                expected_items: 300,
                fpr: 0.05,
                layout,
            };
            let a = settings.build(Policy::SecondHit).unwrap();
            let b = settings.build(Policy::NthHit(2)).unwrap();
            let mut x = 1u64;
            for t in 0..20_000u64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let key = KeyHash::of_u64((x >> 33) % 2_000);
                assert_eq!(a.on_miss(key, s(t / 10)), b.on_miss(key, s(t / 10)), "{t}");
            }
            let (sa, sb) = (a.stats(), b.stats());
            assert_eq!((sa.admitted, sa.rotations), (sb.admitted, sb.rotations));
            assert!(sa.rotations > 10);
        }
    }

    #[test]
    fn exactly_one_rotation_per_trigger_under_concurrency() {
        let p = Arc::new(second_hit(60, None));
        let clock = Arc::new(ManualClock::new(s(0)));
        p.on_miss(KeyHash::of(b"start"), clock.now());
        for round in 1..=20u64 {
            clock.set(s(60 * round));
            let barrier = Arc::new(Barrier::new(8));
            let threads: Vec<_> = (0..8u64)
                .map(|t| {
                    let (p, clock, barrier) = (p.clone(), clock.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        for i in 0..200 {
                            p.on_miss(KeyHash::of_u64(t * 1000 + i), clock.now());
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(p.stats().rotations, round);
        }
    }

    #[test]
    fn concurrent_misses_never_lose_a_sighting() {
        // Each thread records its own keys; after joining, every one of them is admitted.
        let p = Arc::new(second_hit(3600, None));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000u64 {
                        p.on_miss(KeyHash::of_u64(t << 32 | i), s(0));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for t in 0..4u64 {
            for i in 0..2_000u64 {
                assert_eq!(
                    p.on_miss(KeyHash::of_u64(t << 32 | i), s(1)),
                    Decision::Admit
                );
            }
        }
    }

    #[test]
    fn exact_generation_counts() {
        let p = Rotating::new(
            Exact::new(),
            Exact::new(),
            3,
            Window {
                length: None,
                max_items: None,
            },
        );
        let k = KeyHash::of(b"k");
        let d: Vec<_> = (0..5).map(|_| p.on_miss(k, s(0))).collect();
        use Decision::*;
        assert_eq!(d, [Defer, Defer, Defer, Admit, Admit]);
        assert_eq!(p.name(), "nth-hit-exact:4");
    }

    #[test]
    fn reconfiguring_keeps_what_was_seen_and_resizes_at_the_next_rotation() {
        use crate::admission::{Policy, Settings};
        let settings = Settings {
            window: Some(s(60)),
            expected_items: 1_000,
            ..Settings::default()
        };
        let p = settings.build(Policy::SecondHit).unwrap();
        let k = KeyHash::of(b"k");
        assert_eq!(p.on_miss(k, s(0)), Decision::Defer);
        let memory = |p: &dyn Admission| p.stats().filter.unwrap().memory_bytes;
        let before = memory(&*p);
        let bigger = Settings {
            window: Some(s(10)),
            expected_items: 8_000,
            ..settings
        };
        p.reconfigure(&bigger).unwrap();
        // Nothing changes size until the next rotation; what was seen is still seen.
        assert_eq!(memory(&*p), before);
        assert_eq!(p.on_miss(k, s(5)), Decision::Admit);
        // The new 10 s window rotates at 10 s: the new current is built to the new size.
        assert_eq!(p.on_miss(KeyHash::of(b"other"), s(11)), Decision::Defer);
        assert_eq!(p.stats().rotations, 1);
        let mixed = memory(&*p);
        assert!(mixed > before, "{mixed} vs {before}");
        assert_eq!(p.on_miss(k, s(12)), Decision::Admit, "still in previous");
        // One more rotation: both generations of the new size.
        p.on_miss(KeyHash::of(b"third"), s(21));
        assert!(memory(&*p) > mixed);
        // The same sizing again allocates nothing new.
        let now = memory(&*p);
        p.reconfigure(&bigger).unwrap();
        p.on_miss(KeyHash::of(b"fourth"), s(31));
        assert_eq!(memory(&*p), now);
    }
}
