//! A coarse timer for hyper's per-request header-read timeout.
//!
//! hyper arms the header-read timeout for every request head it reads: it asks its [`Timer`]
//! for a new sleep, polls it once while the keep-alive connection waits for the next request,
//! and drops it when the head has arrived. With tokio's timer that is a boxed `Sleep`, a clone
//! of the runtime's handle, an insertion into the timer wheel and a removal from it, on every
//! request, HIT or miss, for a timeout that almost never fires. The sleeps below avoid all of
//! that.
//!
//! [`Coarse`] keeps each thread's pending sleeps in a slab of its own: a sleep takes
//! a slot when first polled before its deadline and gives it back when dropped, and one task
//! per thread with pending sleeps wakes, every [`TICK`], those whose deadline has passed. A
//! sleep therefore ends between its deadline and one [`TICK`] after it: ample for timeouts of
//! seconds, not a general-purpose timer.
//!
//! The slab sits behind a mutex that only its own thread takes, but for the ticker (which a
//! multi-threaded runtime may run elsewhere) and for a sleep dropped on another thread: both are
//! correct, just not the fast case. A sleep holds its slab, so it gives its slot back wherever
//! it is dropped.

use hyper::rt::{Sleep, Timer};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How often a thread with pending sleeps checks their deadlines: the most a sleep ends late.
pub const TICK: Duration = Duration::from_millis(100);

/// hyper's [`Timer`] with the pending sleeps kept per thread (see the module's documentation).
/// Its sleeps are polled inside a tokio runtime: the ticker is a task on it. Outside one, a
/// pending sleep asks to be polled again at once rather than never.
#[derive(Clone, Copy, Debug, Default)]
pub struct Coarse;

impl Timer for Coarse {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        Box::pin(CoarseSleep {
            deadline,
            slot: None,
        })
    }
}

/// A sleep of [`Coarse`]: ready once its deadline has passed.
#[derive(Debug)]
struct CoarseSleep {
    deadline: Instant,
    /// The slot it holds, once polled before its deadline.
    slot: Option<Held>,
}

/// A slot of a thread's slab, as of one use of it.
#[derive(Debug)]
struct Held {
    wheel: Arc<Mutex<Wheel>>,
    index: u32,
    generation: u32,
}

impl Sleep for CoarseSleep {}

impl Future for CoarseSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.deadline {
            this.slot = None; // given back by Held's drop
            return Poll::Ready(());
        }
        if let Some(h) = &this.slot {
            lock(&h.wheel).rewake(h, cx.waker());
            return Poll::Pending;
        }
        this.slot = WHEEL
            .try_with(|w| Wheel::hold(w, this.deadline, cx.waker()))
            .ok()
            .flatten();
        if this.slot.is_none() {
            // No runtime for a ticker here (or the thread is exiting).
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        lock(&self.wheel).free(self.index, self.generation);
    }
}

/// The slab's lock. Nothing panics while holding it, and a slab left half-updated would at
/// worst wake a task spuriously, so a poisoned lock is used as it is.
fn lock(wheel: &Mutex<Wheel>) -> MutexGuard<'_, Wheel> {
    wheel.lock().unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    static WHEEL: Arc<Mutex<Wheel>> = Arc::new(Mutex::new(Wheel::default()));
}

/// One thread's pending sleeps: a slab of slots, each reused under a new generation.
#[derive(Debug, Default)]
struct Wheel {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slots in use.
    held: usize,
    /// The ticker running for this slab, by number (0: none).
    ticker: u64,
    tickers_started: u64,
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    deadline: Instant,
    /// Taken when the ticker wakes it.
    waker: Option<Waker>,
    held: bool,
}

impl Wheel {
    /// A slot for a sleep until `deadline` in `wheel`, and a ticker if none runs; `None` when no
    /// ticker can be started (no tokio runtime here).
    fn hold(wheel: &Arc<Mutex<Wheel>>, deadline: Instant, waker: &Waker) -> Option<Held> {
        let mut w = lock(wheel);
        let index = match w.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(w.slots.len()).ok()?;
                w.slots.push(Slot {
                    generation: 0,
                    deadline,
                    waker: None,
                    held: false,
                });
                i
            }
        };
        let start_ticker = w.ticker == 0;
        if start_ticker {
            // Spawned after the lock is let go: a runtime that refuses the task drops it at
            // once, and its guard takes the lock.
            w.tickers_started += 1;
            w.ticker = w.tickers_started;
        }
        let number = w.ticker;
        let slot = &mut w.slots[index as usize];
        slot.deadline = deadline;
        slot.waker = Some(waker.clone());
        slot.held = true;
        let generation = slot.generation;
        w.held += 1;
        drop(w);
        let held = Held {
            wheel: Arc::clone(wheel),
            index,
            generation,
        };
        if start_ticker {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                let mut w = lock(wheel);
                if w.ticker == number {
                    w.ticker = 0;
                }
                drop(w);
                return None; // `held` gives the slot back as it goes
            };
            let guard = Ticker {
                wheel: Arc::clone(wheel),
                number,
            };
            runtime.spawn(tick(guard));
        }
        Some(held)
    }

    /// Records the waker to wake for a slot still held.
    fn rewake(&mut self, h: &Held, waker: &Waker) {
        if let Some(slot) = self.slot(h.index, h.generation) {
            match &slot.waker {
                Some(w) if w.will_wake(waker) => {}
                _ => slot.waker = Some(waker.clone()),
            }
        }
    }

    fn slot(&mut self, index: u32, generation: u32) -> Option<&mut Slot> {
        self.slots
            .get_mut(index as usize)
            .filter(|s| s.held && s.generation == generation)
    }

    fn free(&mut self, index: u32, generation: u32) {
        let Some(slot) = self.slot(index, generation) else {
            return;
        };
        slot.held = false;
        slot.waker = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.held -= 1;
    }

    /// Collects the wakers of the sleeps due at `now` (each taken once). Returns false, and
    /// marks the ticker gone, when no slot is held.
    fn due(&mut self, now: Instant, wakers: &mut Vec<Waker>) -> bool {
        for slot in &mut self.slots {
            if slot.held && slot.deadline <= now {
                if let Some(w) = slot.waker.take() {
                    wakers.push(w);
                }
            }
        }
        if self.held == 0 {
            self.ticker = 0;
        }
        self.held > 0
    }
}

/// A running ticker's claim on its slab: when the ticker ends, or is dropped with its runtime,
/// the slab knows to start another.
struct Ticker {
    wheel: Arc<Mutex<Wheel>>,
    number: u64,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let mut w = lock(&self.wheel);
        if w.ticker == self.number {
            w.ticker = 0;
        }
    }
}

/// Every [`TICK`], wakes the sleeps that are due; ends when no sleep is held.
async fn tick(guard: Ticker) {
    let mut wakers = Vec::new();
    loop {
        tokio::time::sleep(TICK).await;
        let more = lock(&guard.wheel).due(Instant::now(), &mut wakers);
        // Woken outside the lock: a woken task may run here and sleep again.
        for w in wakers.drain(..) {
            w.wake();
        }
        if !more {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

    /// Slots held on this thread, and whether a ticker runs for them.
    fn state() -> (usize, bool) {
        WHEEL.with(|w| {
            let w = lock(w);
            (w.held, w.ticker != 0)
        })
    }

    fn flag_waker(flag: Arc<AtomicBool>) -> Waker {
        struct Flag(Arc<AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Relaxed);
            }
        }
        Waker::from(Arc::new(Flag(flag)))
    }

    #[tokio::test]
    async fn a_sleep_ends_after_its_deadline_within_a_few_ticks() {
        let start = Instant::now();
        Coarse.sleep(Duration::from_millis(150)).await;
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(150), "{took:?}");
        assert!(took < Duration::from_millis(150) + 10 * TICK, "{took:?}");
        assert_eq!(state().0, 0, "the slot was given back");
    }

    #[tokio::test]
    async fn a_dropped_sleep_gives_its_slot_back_and_is_never_woken() {
        let woken = Arc::new(AtomicBool::new(false));
        let waker = flag_waker(Arc::clone(&woken));
        let mut cx = Context::from_waker(&waker);
        let mut s = Coarse.sleep(2 * TICK);
        assert!(s.as_mut().poll(&mut cx).is_pending());
        assert!(s.as_mut().poll(&mut cx).is_pending());
        assert_eq!(state(), (1, true), "polled twice, one slot, one ticker");
        drop(s);
        assert_eq!(state().0, 0);
        tokio::time::sleep(5 * TICK).await;
        assert!(!woken.load(Relaxed), "a dropped sleep is never woken");
        assert_eq!(state(), (0, false), "the ticker ends when no sleep is held");
    }

    #[tokio::test]
    async fn a_stale_generation_does_not_free_a_reused_slot() {
        let waker = flag_waker(Arc::default());
        let mut cx = Context::from_waker(&waker);
        let mut a = Coarse.sleep(Duration::from_secs(60));
        assert!(a.as_mut().poll(&mut cx).is_pending());
        drop(a);
        let mut b = Coarse.sleep(Duration::from_secs(60));
        assert!(b.as_mut().poll(&mut cx).is_pending());
        WHEEL.with(|w| {
            let mut w = lock(w);
            assert_eq!(w.slots.len(), 1, "the freed slot was reused");
            w.free(0, 0); // the first sleep's key
            assert_eq!(w.held, 1, "generation 0 does not free generation 1");
        });
        drop(b);
        assert_eq!(state().0, 0);
    }

    #[tokio::test]
    async fn many_sleeps_each_end_after_their_own_deadline() {
        let start = Instant::now();
        let tasks: Vec<_> = (0..50u64)
            .map(|i| {
                tokio::spawn(async move {
                    let wait = Duration::from_millis(40 * (i % 5));
                    Coarse.sleep(wait).await;
                    (wait, Instant::now())
                })
            })
            .collect();
        for t in tasks {
            let (wait, ended) = t.await.unwrap();
            assert!(ended.duration_since(start) >= wait);
        }
        assert_eq!(state().0, 0);
        assert!(WHEEL.with(|w| lock(w).slots.len()) <= 50);
    }

    #[tokio::test]
    async fn a_ticker_dropped_with_its_runtime_is_replaced() {
        // A slot of this thread's slab taken on another runtime, which then ends with its
        // ticker: the slab is left to the next runtime's ticker.
        let wheel = WHEEL.with(Arc::clone);
        let held = std::thread::spawn(move || {
            let other = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let waker = flag_waker(Arc::default());
            let deadline = Instant::now() + Duration::from_secs(60);
            let held = other.block_on(async { Wheel::hold(&wheel, deadline, &waker) });
            drop(other);
            held
        })
        .join()
        .unwrap();
        assert!(held.is_some());
        assert_eq!(state(), (1, false), "the ticker went with its runtime");
        Coarse.sleep(Duration::from_millis(50)).await;
        assert_eq!(state(), (1, true), "a new ticker serves the slab");
        drop(held);
        assert_eq!(state().0, 0);
    }
}
