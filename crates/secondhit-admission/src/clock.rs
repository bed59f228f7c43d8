//! Time, injected: the server reads the system's monotonic clock, tests move a [`ManualClock`] by
//! hand, and the simulator needs no clock at all (it passes each request's trace timestamp as
//! `now`).
//!
//! Decisions never read a clock themselves: callers read one and pass `now` (a [`Duration`] since
//! the clock's own epoch) into pure functions such as
//! [`Admission::on_miss`](crate::admission::Admission::on_miss).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A source of "now", as a duration since the clock's epoch. Implementations must be cheap and
/// safe to call from many threads; they should not go backwards (callers tolerate it: a rule
/// that sees time go backwards treats it as no time passing).
pub trait Clock: Send + Sync {
    /// The current time since this clock's epoch.
    fn now(&self) -> Duration;
}

/// The system's clock, read monotonically: the time since the Unix epoch when it was created,
/// plus the monotonic time since. It never goes backwards (wall-clock adjustments after creation
/// do not move it), and its readings are comparable with wall-clock times, as saved filter
/// state needs.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    epoch: Instant,
    base: Duration,
}

impl SystemClock {
    /// A clock reading the current wall-clock time.
    pub fn new() -> Self {
        SystemClock {
            epoch: Instant::now(),
            base: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or(Duration::ZERO),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.base + self.epoch.elapsed()
    }
}

/// A clock that moves only when told to: for tests, and for a live proxy whose freshness and
/// admission windows a test drives by hand. Nanosecond resolution; saturates at `u64::MAX` nanoseconds
/// (about 584 years).
///
/// # Example
/// ```
/// use secondhit_admission::clock::{Clock, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new(Duration::from_secs(10));
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now(), Duration::from_secs(15));
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

fn to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: Duration) -> Self {
        ManualClock {
            nanos: AtomicU64::new(to_nanos(start)),
        }
    }

    /// Sets the time (it may go backwards; see [`Clock`]).
    pub fn set(&self, now: Duration) {
        self.nanos.store(to_nanos(now), Ordering::Relaxed);
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = to_nanos(by);
        // fetch_update cannot fail here: the closure always returns Some.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(by))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(Duration::from_secs(1));
        assert_eq!(c.now(), Duration::from_secs(1));
        c.advance(Duration::from_millis(1500));
        assert_eq!(c.now(), Duration::from_millis(2500));
        c.set(Duration::from_secs(0));
        assert_eq!(c.now(), Duration::ZERO);
        c.advance(Duration::MAX);
        assert_eq!(c.now(), Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn system_clock_is_monotonic() {
        let c = SystemClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }
}
