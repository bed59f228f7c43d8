//! A listener's live connections: which to close when every slot is taken, and how many each
//! client address holds.
//!
//! Timeouts alone let held connections lock a listener for as long as the timeouts: 4,096
//! connections that each send a byte now and then hold every slot while a normal client waits.
//! So a new connection that finds no free slot asks the registry to close the idlest one
//! ([`Registry::evict_idlest`]), chosen by [`pick`]: connections with no request in flight
//! before those serving one, then the one quiet longest. A connection younger than the grace
//! (the time a new client needs to send its request) is never chosen, nor one serving a request
//! that moved within the grace, so a flood of new connections cannot close a download that is
//! going on. "Quiet since" is learnt by comparing a connection's counters between scans: no
//! clock is read on the request path.

use super::activity::{Activity, Sample};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// The live connections of one listener (shared by the threads that accept on it).
#[derive(Debug)]
pub struct Registry {
    inner: Mutex<Inner>,
    /// Connections one address may hold; `None`: no limit.
    per_ip: Option<usize>,
}

#[derive(Debug, Default)]
struct Inner {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    /// Connections per address, kept only with a per-address limit.
    by_ip: HashMap<IpAddr, usize>,
}

/// One live connection as the registry knows it.
#[derive(Debug)]
pub struct Entry {
    activity: Arc<Activity>,
    ip: IpAddr,
    started: Instant,
    /// The counters at the last scan, and when they last differed from the scan before.
    seen: Sample,
    quiet_since: Instant,
    /// Already asked to close.
    evicting: bool,
    /// Has its slot: a connection still waiting for one is never the one to make room.
    serving: bool,
}

/// A connection's place in the registry; dropping it takes the connection out.
#[derive(Debug)]
pub struct Registered {
    registry: Arc<Registry>,
    index: usize,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        let Some(e) = inner.slots.get_mut(self.index).and_then(Option::take) else {
            return;
        };
        inner.free.push(self.index);
        if self.registry.per_ip.is_some() {
            if let Some(n) = inner.by_ip.get_mut(&e.ip) {
                *n -= 1;
                if *n == 0 {
                    inner.by_ip.remove(&e.ip);
                }
            }
        }
    }
}

impl Registered {
    /// The connection has its slot from `now` on: its age, and its grace, count from here.
    pub fn serving(&self, now: Instant) {
        let mut inner = self.registry.lock();
        if let Some(e) = inner.slots.get_mut(self.index).and_then(Option::as_mut) {
            e.serving = true;
            e.started = now;
            e.quiet_since = now;
        }
    }
}

impl Registry {
    /// An empty registry; `per_ip` connections at most per client address (0: no limit).
    pub fn new(per_ip: usize) -> Arc<Registry> {
        Arc::new(Registry {
            inner: Mutex::default(),
            per_ip: (per_ip > 0).then_some(per_ip),
        })
    }

    /// Nothing panics while holding the lock and every update is whole, so a poisoned lock
    /// is used as it is.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in a connection from `ip` that starts at `now`; `None` when `ip` already holds
    /// its limit.
    pub fn register(
        self: &Arc<Self>,
        ip: IpAddr,
        activity: Arc<Activity>,
        now: Instant,
    ) -> Option<Registered> {
        let mut inner = self.lock();
        if let Some(limit) = self.per_ip {
            let n = inner.by_ip.entry(ip).or_insert(0);
            if *n >= limit {
                return None;
            }
            *n += 1;
        }
        let entry = Entry {
            seen: activity.sample(),
            activity,
            ip,
            started: now,
            quiet_since: now,
            evicting: false,
            serving: false,
        };
        let index = match inner.free.pop() {
            Some(i) => {
                inner.slots[i] = Some(entry);
                i
            }
            None => {
                inner.slots.push(Some(entry));
                inner.slots.len() - 1
            }
        };
        Some(Registered {
            registry: Arc::clone(self),
            index,
        })
    }

    /// Asks the idlest connection (see [`pick`]) to close; returns whether one was asked.
    pub fn evict_idlest(&self, now: Instant, grace: Duration) -> bool {
        let mut inner = self.lock();
        let Some(i) = pick(inner.slots.iter_mut().flatten(), now, grace) else {
            return false;
        };
        let Some(e) = inner.slots.iter_mut().flatten().nth(i) else {
            return false;
        };
        e.evicting = true;
        tracing::debug!(
            ip = %e.ip,
            age = ?now.duration_since(e.started),
            quiet = ?now.duration_since(e.quiet_since),
            in_flight = e.seen.in_flight,
            "closing the idlest connection to make room"
        );
        e.activity.evict.notify_one();
        true
    }

    /// Live connections.
    pub fn len(&self) -> usize {
        let inner = self.lock();
        inner.slots.len() - inner.free.len()
    }

    /// Whether no connection is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Brings each entry's "quiet since" up to `now` and returns the position (in `entries`'
/// order) of the one to close: among those served for `grace` and not already closing, those
/// with no request in flight first, then those whose request has been quiet for `grace`; the
/// one quiet longest of its kind.
pub fn pick<'a>(
    entries: impl Iterator<Item = &'a mut Entry>,
    now: Instant,
    grace: Duration,
) -> Option<usize> {
    let mut best: Option<(usize, bool, Instant)> = None;
    for (i, e) in entries.enumerate() {
        let s = e.activity.sample();
        if s.moved_since(&e.seen) {
            e.seen = s;
            e.quiet_since = now;
        }
        if !e.serving || e.evicting || now.duration_since(e.started) < grace {
            continue;
        }
        let busy = s.in_flight > 0;
        if busy && now.duration_since(e.quiet_since) < grace {
            continue;
        }
        // Idle before busy, then quiet longest.
        let better = match best {
            None => true,
            Some((_, b_busy, b_quiet)) => (busy, e.quiet_since) < (b_busy, b_quiet),
        };
        if better {
            best = Some((i, busy, e.quiet_since));
        }
    }
    best.map(|(i, _, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[tokio::test]
    async fn the_idlest_connection_with_no_request_is_asked_to_close_first() {
        let r = Registry::new(0);
        let t0 = Instant::now();
        let (busy, idle_old, idle_new) = (
            Arc::new(Activity::default()),
            Arc::new(Activity::default()),
            Arc::new(Activity::default()),
        );
        let a = r.register(ip(1), Arc::clone(&busy), t0).unwrap();
        let b = r.register(ip(2), Arc::clone(&idle_old), t0).unwrap();
        let c = r.register(ip(3), Arc::clone(&idle_new), t0).unwrap();
        let waiting = r.register(ip(4), Arc::default(), t0).unwrap();
        a.serving(t0);
        b.serving(t0);
        c.serving(t0 + S);
        let _in_flight = busy.begin(); // a request that then goes quiet
        assert!(!r.evict_idlest(t0 + S / 2, S), "all younger than the grace");
        assert!(r.evict_idlest(t0 + 3 * S, S));
        let woken = |a: &Activity| {
            let n = a.evict.notified();
            tokio::pin!(n);
            n.as_mut().enable()
        };
        assert!(woken(&idle_old), "the oldest idle one");
        assert!(!woken(&idle_new) && !woken(&busy));
        assert!(r.evict_idlest(t0 + 3 * S, S));
        assert!(woken(&idle_new), "then the other idle one");
        assert!(r.evict_idlest(t0 + 5 * S, S));
        assert!(woken(&busy), "then the request quiet for the grace");
        assert!(
            !r.evict_idlest(t0 + 6 * S, S),
            "each is asked once, and one waiting for a slot never"
        );
        drop(waiting);
    }

    #[test]
    fn a_request_that_moves_is_not_evicted() {
        let t0 = Instant::now();
        let a = Arc::new(Activity::default());
        let _g = a.begin();
        let mut e = Entry {
            activity: Arc::clone(&a),
            ip: ip(1),
            started: t0,
            seen: Sample::default(),
            quiet_since: t0,
            evicting: false,
            serving: true,
        };
        // The request started since the entry was made: it moved just now.
        assert_eq!(pick(std::iter::once(&mut e), t0 + 5 * S, S), None);
        assert_eq!(pick(std::iter::once(&mut e), t0 + 6 * S, S), Some(0));
    }

    #[test]
    fn an_address_holds_at_most_its_limit() {
        let r = Registry::new(2);
        let t0 = Instant::now();
        let a = r.register(ip(1), Arc::default(), t0).unwrap();
        let _b = r.register(ip(1), Arc::default(), t0).unwrap();
        assert!(r.register(ip(1), Arc::default(), t0).is_none());
        assert!(r.register(ip(2), Arc::default(), t0).is_some());
        drop(a);
        assert!(r.register(ip(1), Arc::default(), t0).is_some());
        assert_eq!(r.len(), 1, "the refused and the dropped are gone");
    }
}
