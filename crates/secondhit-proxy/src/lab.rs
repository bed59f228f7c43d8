//! The live lab: what `serve` learns about its own traffic, off the request path.
//!
//! Every request that reaches the cache logic is a [`Sighting`]: one that found its object
//! (HIT, STALE, REVALIDATED) or that asked the admission policy (MISS, DEFERRED, and the misses
//! whose response turned out not storable or failed: the live filter saw those too). A request
//! that may only be looked up (a HEAD or Range miss) is not one. A sighting carries the key's
//! 64-bit object id, the object's size, whether it was storable, and the proxy's clock. Sightings go to two optional consumers, each behind its own bounded queue drained by
//! one thread; when a queue is full the sighting is dropped and counted, and the request never
//! waits:
//!
//! - [`shadow`]: other admission policies (and the live one, computed the same way), each in
//!   the simulator's store of keys and sizes, answering "what would that policy have done on
//!   this traffic?" in `/metrics`;
//! - [`record`]: the sightings written as an oracleGeneral trace (`--record FILE`), rotated by
//!   size, which `secondhit simulate` reads back: record, simulate, choose, reload.

pub mod record;
pub mod shadow;

use crate::metrics::Families;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

pub use record::{RecordFormat, RecordOptions, Recorder};
pub use shadow::{ShadowSpec, Shadows};

/// One request that reached the cache logic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sighting {
    /// The primary key's object id ([`object_id`](crate::hash::object_id)).
    pub id: u64,
    /// The object's size in bytes (its body, whole, whatever part of it the client asked for;
    /// 0 when no response said it, as a 304 to a conditional request that was not stored).
    pub size: u64,
    /// The proxy's clock.
    pub time: Duration,
    /// Whether the live cache could have stored the response (false: `no-store`, `private`,
    /// too large, an origin error, ...). The shadows look such a request up and ask their
    /// policy, as the live cache did, but never write it; the recording keeps it (in the
    /// `secondhit` format: oracleGeneral has no such field, and a simulation of such a recording
    /// treats every object as storable).
    pub storable: bool,
    /// The bytes the cache charges (or would charge) the object against its capacity: its
    /// body, key, header fields and bookkeeping (its body only in lab mode); 0 when not known
    /// (a body of unknown length, a failed fetch).
    pub weight: u64,
    /// How long the object stays fresh from `time` where it could be stored (a hit: what is
    /// left of its freshness; a response: its lifetime less its age); `None` when it could not
    /// be, or is not known.
    pub fresh_for: Option<Duration>,
    /// The cache served it (a fresh hit).
    pub hit: bool,
}

/// A consumer of sightings, run on a lab thread.
pub(crate) trait Sink: Send + 'static {
    /// One sighting.
    fn take(&mut self, s: &Sighting);
    /// The queue is empty for now (a batch is done): a chance to flush.
    fn idle(&mut self) {}
}

enum Msg {
    Seen(Sighting),
    /// Answered once everything queued before it is consumed and the sink went idle.
    Settle(SyncSender<()>),
}

/// A bounded queue and the thread that drains it into a [`Sink`].
pub(crate) struct Tap {
    tx: Option<SyncSender<Msg>>,
    /// Sightings refused because the queue was full.
    dropped: AtomicU64,
}

impl Tap {
    /// Starts the thread `name` with a queue of `queue` sightings.
    pub(crate) fn start(name: &str, queue: usize, sink: impl Sink) -> io::Result<Tap> {
        let (tx, rx) = sync_channel(queue.max(1));
        // Not joined: see `Drop`.
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || drain(rx, sink))?;
        Ok(Tap {
            tx: Some(tx),
            dropped: AtomicU64::new(0),
        })
    }

    /// Queues a sighting, or drops and counts it when the queue is full. Never blocks.
    #[inline]
    pub(crate) fn offer(&self, s: Sighting) {
        let Some(tx) = &self.tx else { return };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            tx.try_send(Msg::Seen(s))
        {
            self.dropped.fetch_add(1, Relaxed);
        }
    }

    /// Sightings dropped so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }

    /// Waits (up to `timeout`) until every sighting queued so far is consumed and the sink has
    /// gone idle (a recording flushed). Whether that happened in time.
    pub(crate) fn settle(&self, timeout: Duration) -> bool {
        let Some(tx) = &self.tx else { return false };
        let deadline = std::time::Instant::now() + timeout;
        let (ack, done) = sync_channel(1);
        // Never blocks past the deadline, even on a full queue behind a stuck sink (a hung
        // disk under the recording).
        let mut msg = Msg::Settle(ack);
        loop {
            match tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(m)) => {
                    if std::time::Instant::now() >= deadline {
                        return false;
                    }
                    msg = m;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        done.recv_timeout(left).is_ok()
    }
}

impl Drop for Tap {
    /// Closes the queue: the thread consumes what is queued and ends by itself. It is not
    /// joined (a sink stuck on a hung disk must not hang whoever drops the last reference, a
    /// runtime worker perhaps); [`Tap::settle`] first to know everything was consumed.
    fn drop(&mut self) {
        self.tx = None;
    }
}

fn drain(rx: Receiver<Msg>, mut sink: impl Sink) {
    let mut acks = Vec::new();
    let handle = |msg, acks: &mut Vec<SyncSender<()>>, sink: &mut dyn Sink| match msg {
        Msg::Seen(s) => sink.take(&s),
        Msg::Settle(ack) => acks.push(ack),
    };
    while let Ok(msg) = rx.recv() {
        handle(msg, &mut acks, &mut sink);
        while let Ok(msg) = rx.try_recv() {
            handle(msg, &mut acks, &mut sink);
        }
        sink.idle();
        for ack in acks.drain(..) {
            let _ = ack.send(());
        }
        // Let sightings gather, as the access log's lines do: with this thread blocked on an
        // empty queue, every request's `try_send` was a futex wake and a context switch (the
        // profile of a HIT under load: 9 % of the request threads' time in `try_to_wake_up`
        // from `try_send`, and the lab threads in `futex_do_wait`). While it sleeps nobody
        // waits, so a send is an atomic store; an idle lab blocks in `recv` and costs nothing.
        std::thread::sleep(crate::access_log::GATHER);
    }
    sink.idle();
}

/// The lab of one `serve`: its shadows and its recording, either or both.
#[derive(Default)]
pub struct Lab {
    shadows: Option<Shadows>,
    recorder: Option<Recorder>,
}

impl Lab {
    /// A lab of `shadows` and `recorder` (each optional).
    pub fn new(shadows: Option<Shadows>, recorder: Option<Recorder>) -> Lab {
        Lab { shadows, recorder }
    }

    /// Whether anything listens: without, the request path makes no sightings at all.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.shadows.is_some() || self.recorder.is_some()
    }

    /// Hands a sighting to each consumer (never blocks).
    #[inline]
    pub fn sight(&self, s: Sighting) {
        if let Some(sh) = &self.shadows {
            sh.offer(s);
        }
        if let Some(r) = &self.recorder {
            r.offer(s);
        }
    }

    /// The shadows, if any.
    pub fn shadows(&self) -> Option<&Shadows> {
        self.shadows.as_ref()
    }

    /// The recording, if any.
    pub fn recorder(&self) -> Option<&Recorder> {
        self.recorder.as_ref()
    }

    /// Waits (up to `timeout` each) until both consumers have taken every sighting so far and
    /// the recording is flushed. Whether both did in time.
    pub fn settle(&self, timeout: Duration) -> bool {
        let a = self.shadows.as_ref().is_none_or(|s| s.settle(timeout));
        let b = self.recorder.as_ref().is_none_or(|r| r.settle(timeout));
        a && b
    }

    /// Adds the lab's metric families (none when it is off).
    pub fn collect(&self, out: &mut Families) {
        if let Some(s) = &self.shadows {
            s.collect(out);
        }
        if let Some(r) = &self.recorder {
            r.collect(out);
        }
    }
}

/// An atomically published figure.
#[derive(Default, Debug)]
pub(crate) struct Figure(AtomicU64);

impl Figure {
    pub(crate) fn set(&self, v: u64) {
        self.0.store(v, Relaxed);
    }
    pub(crate) fn add(&self, v: u64) {
        self.0.fetch_add(v, Relaxed);
    }
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Shared between a sink and the metrics reader.
pub(crate) type Shared<T> = Arc<T>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{channel, Sender};
    use std::sync::Mutex;

    /// Takes sightings only as fast as the test lets it.
    struct Gated {
        gate: Receiver<()>,
        took: Arc<Mutex<Vec<u64>>>,
        entered: Sender<()>,
    }

    impl Sink for Gated {
        fn take(&mut self, s: &Sighting) {
            let _ = self.entered.send(());
            let _ = self.gate.recv();
            self.took.lock().unwrap().push(s.id);
        }
    }

    fn sight(id: u64) -> Sighting {
        Sighting {
            id,
            size: 1,
            time: Duration::ZERO,
            storable: true,
            weight: 0,
            fresh_for: None,
            hit: false,
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting_and_the_rest_arrive_in_order() {
        let (open, gate) = channel();
        let (entered, inside) = channel();
        let took = Arc::new(Mutex::new(Vec::new()));
        let tap = Tap::start(
            "test-tap",
            2,
            Gated {
                gate,
                took: Arc::clone(&took),
                entered,
            },
        )
        .unwrap();
        tap.offer(sight(0));
        // The thread holds sighting 0 and waits at the gate: the queue has room for two.
        inside.recv().unwrap();
        for id in 1..=6 {
            tap.offer(sight(id)); // never blocks: 1 and 2 queue, 3 to 6 are dropped
        }
        assert_eq!(tap.dropped(), 4);
        for _ in 0..3 {
            open.send(()).unwrap();
        }
        assert!(tap.settle(Duration::from_secs(10)));
        assert_eq!(*took.lock().unwrap(), vec![0, 1, 2]);
    }
}
