//! What a connection is doing, seen from outside hyper, and the watchdog that closes it when it
//! does nothing useful.
//!
//! hyper bounds the wait for a request head (HTTP/1.1) and nothing else: an HTTP/2 connection
//! with no stream, a client that stops reading its response, or an HTTP/2 client that keeps a
//! zero flow-control window would hold its connection slot, and what is buffered for it, for
//! ever. Each connection therefore carries an [`Activity`]: its IO counts reads and writes that
//! moved bytes ([`Watched`]), its service counts requests and those whose response has not
//! ended ([`Tracked`], [`Counted`]). The request path pays a counter increment per read and per
//! write and two per request, and reads no clock: the [`watchdog`] samples the counters a few
//! times per timeout and [`Watch::observe`] decides, from the samples and `now`, whether the
//! connection is idle or stalled.

use bytes::Bytes;
use http::Response;
use hyper::body::{Body, Frame, SizeHint};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// One connection's counters, shared by its IO, its service, its watchdog and the listener's
/// registry. Every counter is cumulative and only compared with an earlier sample of itself.
#[derive(Debug, Default)]
pub struct Activity {
    /// Reads that returned bytes.
    reads: AtomicU64,
    /// Writes that took bytes.
    writes: AtomicU64,
    /// Requests handed to the service.
    requests: AtomicU64,
    /// Requests whose response (its body included) has not ended or been dropped.
    in_flight: AtomicUsize,
    /// The last write (or flush) could not go on: the client's receive window is full.
    write_blocked: AtomicBool,
    /// Rung by the registry to make room for a new connection.
    pub(crate) evict: Notify,
}

/// The counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Reads that returned bytes, so far.
    pub reads: u64,
    /// Writes that took bytes, so far.
    pub writes: u64,
    /// Requests started, so far.
    pub requests: u64,
    /// Requests whose response has not ended.
    pub in_flight: usize,
    /// Whether the last write was refused for want of room.
    pub write_blocked: bool,
}

impl Sample {
    /// Whether anything moved between `earlier` and this sample.
    pub fn moved_since(&self, earlier: &Sample) -> bool {
        self.reads != earlier.reads
            || self.writes != earlier.writes
            || self.requests != earlier.requests
    }
}

impl Activity {
    /// The counters now.
    pub fn sample(&self) -> Sample {
        Sample {
            reads: self.reads.load(Relaxed),
            writes: self.writes.load(Relaxed),
            requests: self.requests.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
            write_blocked: self.write_blocked.load(Relaxed),
        }
    }

    /// A request starts: counted, and in flight until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.requests.fetch_add(1, Relaxed);
        self.in_flight.fetch_add(1, Relaxed);
        InFlight(Arc::clone(self))
    }
}

/// A request in flight on its connection; dropping it ends the request.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// Why a watchdog closed its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No request in flight and none started for `client_idle`.
    Idle,
    /// A response could not be written, or a request in flight saw no byte move either way,
    /// for `client_send`.
    Stalled,
    /// Closed to make room for a new connection when every slot was taken.
    Evicted,
}

impl Verdict {
    /// The name in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Idle => "idle",
            Verdict::Stalled => "stalled",
            Verdict::Evicted => "evicted",
        }
    }
}

/// The timeouts a watchdog applies; `None` switches one off.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timeouts {
    /// `client_idle`.
    pub idle: Option<Duration>,
    /// `client_send`.
    pub send: Option<Duration>,
}

impl Timeouts {
    /// How often to sample: a quarter of the shortest timeout (so a connection is closed
    /// between the timeout and 1.25 times it), at least 25 ms.
    pub fn period(&self) -> Option<Duration> {
        let shortest = match (self.idle, self.send) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some((shortest / 4).max(Duration::from_millis(25)))
    }
}

/// A watchdog's memory of a connection: the last sample and when things last moved.
#[derive(Clone, Debug)]
pub struct Watch {
    last: Sample,
    /// The last time a request started or was in flight.
    busy_at: Instant,
    /// The last time a byte moved either way, or a request started.
    moved_at: Instant,
    /// The last time a write took bytes, a request started, or writing became blocked.
    wrote_at: Instant,
}

impl Watch {
    /// A connection that started at `now`.
    pub fn new(now: Instant) -> Watch {
        Watch {
            last: Sample::default(),
            busy_at: now,
            moved_at: now,
            wrote_at: now,
        }
    }

    /// Takes in the sample `s` made at `now`; says whether the connection is to be closed.
    pub fn observe(&mut self, s: Sample, now: Instant, t: &Timeouts) -> Option<Verdict> {
        let last = std::mem::replace(&mut self.last, s);
        if s.requests != last.requests {
            // A new request: silence before it says nothing about how it is served.
            self.busy_at = now;
            self.moved_at = now;
            self.wrote_at = now;
        }
        if s.in_flight > 0 {
            self.busy_at = now;
        }
        if s.reads != last.reads || s.writes != last.writes {
            self.moved_at = now;
        }
        if s.writes != last.writes || (s.write_blocked && !last.write_blocked) {
            self.wrote_at = now;
        }
        if let Some(send) = t.send {
            // Blocked: the client does not take what is written (nginx's send_timeout). In
            // flight and silent both ways: an HTTP/2 zero window, or a request hanging.
            let blocked = s.write_blocked && now.duration_since(self.wrote_at) >= send;
            let silent = s.in_flight > 0 && now.duration_since(self.moved_at) >= send;
            if blocked || silent {
                return Some(Verdict::Stalled);
            }
        }
        if let Some(idle) = t.idle {
            if s.in_flight == 0 && now.duration_since(self.busy_at) >= idle {
                return Some(Verdict::Idle);
            }
        }
        None
    }
}

/// Resolves when the connection behind `activity` is to be closed, idle or stalled (eviction
/// is the listener's to watch). Never resolves when neither timeout is set.
pub async fn watchdog(activity: &Activity, t: Timeouts) -> Verdict {
    let Some(period) = t.period() else {
        return std::future::pending().await;
    };
    let mut watch = Watch::new(Instant::now());
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let now = tick.tick().await;
        if let Some(v) = watch.observe(activity.sample(), now, &t) {
            return v;
        }
    }
}

/// A connection's IO, counting the reads and writes that moved bytes.
#[derive(Debug)]
pub struct Watched<T> {
    io: T,
    activity: Arc<Activity>,
}

impl<T> Watched<T> {
    /// `io`, counted in `activity`.
    pub fn new(io: T, activity: Arc<Activity>) -> Self {
        Watched { io, activity }
    }

    fn wrote<R>(&self, p: Poll<io::Result<R>>, took: impl Fn(&R) -> bool) -> Poll<io::Result<R>> {
        match &p {
            Poll::Pending => self.activity.write_blocked.store(true, Relaxed),
            Poll::Ready(Ok(r)) => {
                if took(r) {
                    self.activity.writes.fetch_add(1, Relaxed);
                }
                self.activity.write_blocked.store(false, Relaxed);
            }
            Poll::Ready(Err(_)) => {}
        }
        p
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let p = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(p, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.reads.fetch_add(1, Relaxed);
        }
        p
    }
}

/// An IO that may send stored bodies held in sealed memory files without copying them (see
/// [`crate::pages`]): `None` when it does not, or `bufs` holds no such body.
pub trait WritePages {
    /// Writes `bufs` as `poll_write_vectored` would, sending a sealed body's pages by
    /// reference; `None` to leave the write to `poll_write_vectored`.
    fn poll_write_pages(
        &self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Option<Poll<io::Result<usize>>>;
}

impl WritePages for tokio::net::TcpStream {
    fn poll_write_pages(
        &self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Option<Poll<io::Result<usize>>> {
        crate::pages::poll_write_pages(self, cx, bufs)
    }
}

impl<T: AsyncWrite + WritePages + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let p = match self.io.poll_write_pages(cx, &[io::IoSlice::new(buf)]) {
            Some(p) => p,
            None => Pin::new(&mut self.io).poll_write(cx, buf),
        };
        self.wrote(p, |n| *n > 0)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let p = match self.io.poll_write_pages(cx, bufs) {
            Some(p) => p,
            None => Pin::new(&mut self.io).poll_write_vectored(cx, bufs),
        };
        self.wrote(p, |n| *n > 0)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let p = Pin::new(&mut self.io).poll_flush(cx);
        self.wrote(p, |_| false)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

pin_project_lite::pin_project! {
    /// A handler's future, in flight from its start until its response's body has ended (the
    /// guard moves into the body).
    pub struct Tracked<F> {
        #[pin]
        fut: F,
        guard: Option<InFlight>,
    }
}

impl<F> Tracked<F> {
    /// `fut`, in flight as `guard` says.
    pub fn new(fut: F, guard: InFlight) -> Self {
        Tracked {
            fut,
            guard: Some(guard),
        }
    }
}

impl<F, B, E> Future for Tracked<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<Counted<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = std::task::ready!(this.fut.poll(cx));
        let guard = this.guard.take();
        Poll::Ready(out.map(|r| {
            r.map(|body| Counted {
                body,
                _guard: guard,
            })
        }))
    }
}

/// A response body whose request stays in flight until it ends or is dropped.
#[derive(Debug)]
pub struct Counted<B> {
    body: B,
    _guard: Option<InFlight>,
}

impl<B> Body for Counted<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn t() -> Timeouts {
        Timeouts {
            idle: Some(10 * S),
            send: Some(6 * S),
        }
    }

    fn sample(reads: u64, writes: u64, requests: u64, in_flight: usize, blocked: bool) -> Sample {
        Sample {
            reads,
            writes,
            requests,
            in_flight,
            write_blocked: blocked,
        }
    }

    #[test]
    fn a_connection_with_no_request_is_idle_after_the_idle_timeout() {
        let start = Instant::now();
        let mut w = Watch::new(start);
        // An HTTP/2 preface and SETTINGS, then PINGs: bytes move, no request.
        assert_eq!(
            w.observe(sample(1, 1, 0, 0, false), start + 5 * S, &t()),
            None
        );
        assert_eq!(
            w.observe(sample(9, 9, 0, 0, false), start + 9 * S, &t()),
            None
        );
        assert_eq!(
            w.observe(sample(12, 12, 0, 0, false), start + 10 * S, &t()),
            Some(Verdict::Idle)
        );
    }

    #[test]
    fn a_request_in_flight_is_never_idle_and_a_new_one_restarts_the_clock() {
        let start = Instant::now();
        let mut w = Watch::new(start);
        assert_eq!(
            w.observe(sample(1, 0, 1, 1, false), start + 9 * S, &t()),
            None
        );
        // Served, then quiet: idle counts from the last time it was busy.
        assert_eq!(
            w.observe(sample(1, 5, 1, 0, false), start + 12 * S, &t()),
            None
        );
        assert_eq!(
            w.observe(sample(1, 5, 1, 0, false), start + 18 * S, &t()),
            None
        );
        assert_eq!(
            w.observe(sample(1, 5, 1, 0, false), start + 22 * S, &t()),
            Some(Verdict::Idle)
        );
    }

    #[test]
    fn a_blocked_write_with_no_progress_is_stalled_after_the_send_timeout() {
        let start = Instant::now();
        let mut w = Watch::new(start);
        assert_eq!(w.observe(sample(1, 3, 1, 1, true), start + S, &t()), None);
        // Reads keep coming (PINGs, a pipelined request): the write is still stuck.
        assert_eq!(
            w.observe(sample(4, 3, 1, 1, true), start + 4 * S, &t()),
            None
        );
        assert_eq!(
            w.observe(sample(8, 3, 1, 1, true), start + 7 * S, &t()),
            Some(Verdict::Stalled)
        );
    }

    #[test]
    fn a_slow_reader_that_takes_bytes_is_not_stalled() {
        let start = Instant::now();
        let mut w = Watch::new(start);
        for i in 1..20u32 {
            let at = start + i * 2 * S;
            assert_eq!(
                w.observe(sample(1, u64::from(i), 1, 1, true), at, &t()),
                None
            );
        }
    }

    #[test]
    fn a_request_in_flight_with_nothing_moving_is_stalled() {
        // An HTTP/2 client with a zero window: nothing written, nothing blocked.
        let start = Instant::now();
        let mut w = Watch::new(start);
        assert_eq!(w.observe(sample(2, 1, 1, 1, false), start + S, &t()), None);
        assert_eq!(
            w.observe(sample(2, 1, 1, 1, false), start + 6 * S, &t()),
            None
        );
        assert_eq!(
            w.observe(sample(2, 1, 1, 1, false), start + 7 * S, &t()),
            Some(Verdict::Stalled)
        );
    }

    #[test]
    fn silence_before_a_request_does_not_count_against_it() {
        let start = Instant::now();
        let mut w = Watch::new(start);
        assert_eq!(w.observe(sample(1, 1, 1, 0, false), start + S, &t()), None);
        // Idle for 8 s, then a request whose origin takes 5 s: neither idle nor stalled.
        assert_eq!(
            w.observe(sample(2, 1, 2, 1, false), start + 9 * S, &t()),
            None
        );
        assert_eq!(
            w.observe(sample(2, 1, 2, 1, false), start + 14 * S, &t()),
            None
        );
    }

    #[test]
    fn no_timeouts_means_no_period() {
        assert_eq!(Timeouts::default().period(), None);
        assert_eq!(t().period(), Some(S * 6 / 4));
        let tiny = Timeouts {
            idle: Some(Duration::from_millis(10)),
            send: None,
        };
        assert_eq!(tiny.period(), Some(Duration::from_millis(25)));
    }
}
