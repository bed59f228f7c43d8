//! Phase 7, `pump` and store: a task reads the origin's body, forwards it to the client as it
//! arrives and, for an admitted response, stores it once complete and of the announced length.
//!
//! Memory is bounded per response and overall:
//! - what the client has not yet taken is at most `limits.stream_buffer_bytes` (the pump then
//!   waits, so the origin is read no faster than the client reads: backpressure);
//! - a body being stored is at most `cache.max_object_size`, and all bodies being stored at once
//!   at most `limits.store_buffer_bytes`; past either the response is still served, not stored;
//! - when the client is gone and nothing is being stored, the fetch is dropped at once (the
//!   origin connection closes and the origin stops sending).
//!
//! A client that goes away does not cancel the store of an object others wait for; a body that
//! stalls, breaks off or has the wrong length is never stored.
//!
//! A body of known length that is being stored, and whose length the store budget can reserve
//! at once, is not paced by any client: the pump reads it at the origin's pace into a
//! [`Growing`] body that the client and every coalesced follower read at their own pace (so one
//! client that stops reading holds nobody else up). Its memory is the body's chunks, shared by
//! every reader, and at the end the stored copy: twice its length, reserved from the store
//! budget before it starts, within `max_object_size`.
//!
//! A body announced at no more than [`READ_AHEAD`] bytes skips the task: it is read whole in the
//! request's own task (within `first_byte` per frame, as the pump would) and answered as one
//! buffer. The profile of the miss path showed the task's cost was not its work but its
//! hand-offs: a spawn, a channel and a semaphore per response, wake-ups across threads, and the
//! response head written alone because the body was not ready when the head went out (three
//! writes a request where two do). Read ahead, head and body leave in one write. Two differences:
//! a body that breaks off before it is whole is answered 502 (nothing had gone out yet) instead
//! of a response cut short; and a client that leaves within those few kilobytes cancels that
//! store.

use super::cached::{CachedObject, Entry};
use super::coalesce::{Fetched, Leader, Streaming};
use super::growing::Growing;
use super::{Live, Proxy};
use crate::body::{channel, channel_within, BoxError, ConnectionBudget, ProxyBody, Sender};
use crate::http_cache::{variant_key, vary_fields, Freshness};
use crate::origin::{OriginBody, OriginError};
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::StatusCode;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What the pump stores once the body is complete.
pub(super) struct StoreJob {
    /// The primary key.
    pub primary: String,
    /// The request's headers as the origin received them (for the variant key).
    pub request_headers: HeaderMap,
    /// The response's status.
    pub status: StatusCode,
    /// The response's headers.
    pub headers: HeaderMap,
    /// How fresh it is.
    pub freshness: Freshness,
    /// The coalesced fetch this is, whose followers get the object.
    pub leader: Option<Leader>,
    /// Where it goes.
    pub tiers: Tiers,
}

/// Where a stored object goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Tiers {
    /// Memory only.
    #[default]
    Memory,
    /// Memory, and to disk when memory evicts it (the flash policy admitted it too).
    MemoryThenDisk,
    /// Disk at once: the flash policy admitted it, the memory policy did not.
    DiskOnly,
}

impl Tiers {
    /// Memory, and disk after it if the flash policy admitted the object.
    pub fn memory(disk: bool) -> Tiers {
        if disk {
            Tiers::MemoryThenDisk
        } else {
            Tiers::Memory
        }
    }

    /// Whether a body stored to these tiers is sealed ([`crate::pages`], `cache.sendfile`): it
    /// stays in memory, where its hits send its pages. A body bound for flash only does not.
    pub fn seals(self, sendfile: bool) -> bool {
        sendfile && self != Tiers::DiskOnly
    }

    /// `body` as these tiers store it: sealed when [`Tiers::seals`] (as it is when already
    /// sealed, or when sealing is refused), else as it is.
    pub fn stored_body(self, sendfile: bool, body: Bytes) -> Bytes {
        if self.seals(sendfile) {
            crate::pages::seal(&body).unwrap_or(body)
        } else {
            body
        }
    }
}

/// Bodies announced at up to this many bytes are read whole before the response goes out.
/// Within the per-response bound a slow reader may hold anyway (`stream_buffer_bytes`).
pub(super) const READ_AHEAD: u64 = 64 * 1024;

/// A body read ahead, whole.
struct ReadAhead {
    frames: VecDeque<Frame<Bytes>>,
    len: u64,
}

impl Body for ReadAhead {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.frames.pop_front().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

/// Frames the client's channel holds at most (the byte budget is the real bound).
const CHANNEL_FRAMES: usize = 64;

/// A body being stored, within its two budgets: `max_object` bytes for itself, and its share of
/// the permits of all bodies being stored at once (given back when it is dropped).
struct StoreBuffer {
    buf: BytesMut,
    held: Option<OwnedSemaphorePermit>,
}

/// Why a body stopped being buffered for the store.
enum Overflow {
    /// Larger than `max_object_size`.
    TooLarge,
    /// The bodies being stored at once filled `store_buffer_bytes`.
    OverBudget,
}

impl StoreBuffer {
    fn new(capacity: usize) -> Self {
        StoreBuffer {
            buf: BytesMut::with_capacity(capacity),
            held: None,
        }
    }

    /// Appends `data` if both budgets allow it.
    fn push(
        &mut self,
        data: &Bytes,
        max_object: u64,
        budget: &Arc<Semaphore>,
    ) -> Result<(), Overflow> {
        if (self.buf.len() + data.len()) as u64 > max_object {
            return Err(Overflow::TooLarge);
        }
        let share = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let permit = Arc::clone(budget)
            .try_acquire_many_owned(share)
            .map_err(|_| Overflow::OverBudget)?;
        match self.held.as_mut() {
            Some(h) => h.merge(permit),
            None => self.held = Some(permit),
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    /// The body, copied to its size if it grew by doubling (no Content-Length).
    fn into_body(self) -> Bytes {
        let b = self.buf;
        if b.capacity() > b.len() + b.len() / 8 {
            Bytes::copy_from_slice(&b)
        } else {
            b.freeze()
        }
    }
}

impl Proxy {
    /// Spawns the task that reads the origin's body, forwards it to the client as it arrives
    /// and, for a store job, stores it once complete; with `sight` (an object id and whether
    /// its response is storable), hands the lab the object's size when the body ends. Returns
    /// the client's body.
    pub(super) fn pump(
        self: &Arc<Self>,
        mut body: OriginBody,
        expected: Option<u64>,
        job: Option<StoreJob>,
        sight: Option<(u64, bool)>,
        budget: Option<&ConnectionBudget>,
        live: &Arc<Live>,
    ) -> ProxyBody {
        // Stored with a known length that the budget can reserve now: not paced by the client.
        // Twice the length: the chunks readers share, and the one buffer stored at the end.
        let job = match (job, expected) {
            (Some(job), Some(n)) if n <= live.limits.max_object => {
                match u32::try_from(n.saturating_mul(2)).ok().and_then(|n| {
                    Arc::clone(&live.store_budget)
                        .try_acquire_many_owned(n)
                        .ok()
                }) {
                    Some(permit) => return self.pump_shared(body, n, job, permit, live),
                    None => Some(job),
                }
            }
            (job, _) => job,
        };
        // What the client has not taken counts in its connection's budget (all its streams
        // together), or in one of this response's own.
        let (tx, client_body) = match budget {
            Some(b) => channel_within(CHANNEL_FRAMES, expected, b),
            None => channel(CHANNEL_FRAMES, expected, Some(live.limits.stream_buffer)),
        };
        let proxy = Arc::clone(self);
        let live = Arc::clone(live);
        tokio::spawn(async move {
            let max_object = live.limits.max_object;
            // Sized from Content-Length when known, so a stored body holds no spare capacity.
            let initial = expected.unwrap_or(0).min(max_object) as usize;
            let stored = job.as_ref().map(|_| StoreBuffer::new(initial));
            let Relayed {
                stored,
                received,
                failed,
                whole,
            } = proxy.relay(&mut body, &tx, stored, &live).await;
            proxy.metrics.origin_bytes(received);
            // A body of unknown length: the lab sees its object when it ends (storable only if
            // it came whole; a client that left early leaves the size counted so far).
            if let Some((id, storable)) = sight {
                proxy.sight(id, received, storable && whole);
            }
            if let Some(job) = job {
                let complete = !failed && expected.is_none_or(|n| n == received);
                match stored {
                    Some(s) if complete => proxy.store_object(job, s.into_body(), &live),
                    _ => proxy.metrics.store_aborted(),
                }
            }
        });
        client_body.boxed()
    }

    /// The body of [`Proxy::pump`]'s task: relays the origin's frames to the client and into
    /// `stored` (dropped past either budget) until the body ends, breaks off, stalls for
    /// `first_byte`, or has nobody left to serve and nothing to store. `body` and `tx` stay the
    /// caller's: the client's body ends when the task does, after the object is stored.
    async fn relay(
        &self,
        body: &mut OriginBody,
        tx: &Sender,
        mut stored: Option<StoreBuffer>,
        live: &Live,
    ) -> Relayed {
        let max_object = live.limits.max_object;
        let mut received = 0u64;
        let mut failed = false;
        let mut whole = false;
        let mut client_alive = true;
        loop {
            let frame = match tokio::time::timeout(live.timeouts.first_byte, body.frame()).await {
                Ok(None) => {
                    whole = true;
                    break;
                }
                Ok(Some(Ok(f))) => f,
                Ok(Some(Err(e))) => {
                    failed = true;
                    self.metrics.origin_error(OriginError::Body);
                    tracing::warn!(error = %e, "origin body broke off");
                    if client_alive {
                        tx.fail(Box::new(e)).await;
                    }
                    break;
                }
                Err(_) => {
                    failed = true;
                    self.metrics.origin_error(OriginError::Body);
                    tracing::warn!("origin body stalled");
                    if client_alive {
                        tx.fail("origin body stalled".into()).await;
                    }
                    break;
                }
            };
            if let Some(data) = frame.data_ref() {
                received += data.len() as u64;
                if let Some(s) = stored.as_mut() {
                    // Past either budget: serve it, do not store it.
                    if let Err(overflow) = s.push(data, max_object, &live.store_budget) {
                        if matches!(overflow, Overflow::OverBudget) {
                            self.metrics.store_over_budget();
                        }
                        stored = None;
                    }
                }
            }
            if client_alive && tx.send(frame).await.is_err() {
                client_alive = false;
            }
            if !client_alive && stored.is_none() {
                break; // nobody to serve and nothing to store: drop the fetch
            }
        }
        Relayed {
            stored,
            received,
            failed,
            whole,
        }
    }

    /// [`Proxy::pump`] for a body of `n` bytes being stored, `2n` reserved from the store budget:
    /// read at the origin's pace into a [`Growing`] body; the client's body and the leader's
    /// followers read from it.
    fn pump_shared(
        self: &Arc<Self>,
        mut body: OriginBody,
        n: u64,
        job: StoreJob,
        permit: OwnedSemaphorePermit,
        live: &Arc<Live>,
    ) -> ProxyBody {
        let growing = Growing::new(n);
        if let Some(leader) = job.leader.as_ref() {
            let head = self.head_object(&job, n, live);
            leader.streaming(Arc::new(Streaming {
                head,
                primary: job.primary.clone(),
                key: stored_key(&job),
                body: Arc::clone(&growing),
            }));
        }
        let client_body = growing.reader();
        let growing = growing.filler();
        let proxy = Arc::clone(self);
        let live = Arc::clone(live);
        tokio::spawn(async move {
            match proxy
                .fill(&mut body, &growing, live.timeouts.first_byte)
                .await
            {
                Ok(last) => {
                    let whole = growing.assemble(last, job.tiers.seals(live.sendfile));
                    proxy.store_object(job, whole.clone(), &live);
                    growing.finish(whole);
                }
                Err(why) => {
                    proxy.metrics.origin_error(OriginError::Body);
                    growing.fail(why);
                    proxy.metrics.store_aborted();
                }
            }
            drop(permit);
        });
        client_body.boxed()
    }

    /// Reads `body` at the origin's pace into `growing` (which announced its length), within
    /// `stall` a frame, and counts the origin bytes. Once it is whole, the chunk that made it
    /// whole, held back for [`Growing::assemble`]; else why it is not (the caller fails `growing` and counts
    /// the origin's error).
    pub(super) async fn fill(
        &self,
        body: &mut OriginBody,
        growing: &Growing,
        stall: std::time::Duration,
    ) -> Result<Bytes, &'static str> {
        let n = growing.expected();
        let mut received = 0u64;
        let mut last = Bytes::new();
        let result = loop {
            match tokio::time::timeout(stall, body.frame()).await {
                Ok(None) if received == n => break Ok(last),
                Ok(None) => break Err("origin body came short"),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        received += data.len() as u64;
                        if received > n {
                            break Err("origin body longer than announced");
                        }
                        if received == n {
                            last = data;
                        } else {
                            growing.push(data);
                        }
                    }
                }
                Ok(Some(Err(e))) => {
                    tracing::warn!(error = %e, "origin body broke off");
                    break Err("origin body broke off");
                }
                Err(_) => {
                    tracing::warn!("origin body stalled");
                    break Err("origin body stalled");
                }
            }
        };
        self.metrics.origin_bytes(received);
        result
    }

    /// The object `job` will store, without its body (`n` bytes): what a follower streaming
    /// it is answered with.
    fn head_object(&self, job: &StoreJob, n: u64, live: &Live) -> Arc<CachedObject> {
        let mut headers = job.headers.clone();
        headers.remove(header::AGE);
        if job.status != StatusCode::NO_CONTENT {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        Arc::new(CachedObject::new(
            job.status,
            headers,
            Bytes::new(),
            self.clock.now(),
            &job.freshness,
            live.stale_keep,
        ))
    }

    /// The body of `expected` (at most [`READ_AHEAD`]) bytes, read whole here instead of by a
    /// pump task, and stored for a store job. `None` when it broke off, stalled or came short:
    /// nothing of the response has gone out yet, so the caller answers 502 rather than a
    /// response cut short (and counts the origin error).
    pub(super) async fn read_ahead(
        &self,
        mut body: OriginBody,
        expected: u64,
        job: Option<StoreJob>,
        live: &Live,
    ) -> Option<ProxyBody> {
        let mut frames = VecDeque::new();
        let mut stored = job.as_ref().map(|_| StoreBuffer::new(expected as usize));
        let mut received = 0u64;
        let failed = loop {
            match tokio::time::timeout(live.timeouts.first_byte, body.frame()).await {
                Ok(None) => break received != expected,
                Ok(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        received += data.len() as u64;
                        if let Some(s) = stored.as_mut() {
                            if let Err(overflow) =
                                s.push(data, live.limits.max_object, &live.store_budget)
                            {
                                if matches!(overflow, Overflow::OverBudget) {
                                    self.metrics.store_over_budget();
                                }
                                stored = None;
                            }
                        }
                    }
                    frames.push_back(frame);
                }
                Ok(Some(Err(e))) => {
                    tracing::warn!(error = %e, "origin body broke off");
                    break true;
                }
                Err(_) => {
                    tracing::warn!("origin body stalled");
                    break true;
                }
            }
        };
        self.metrics.origin_bytes(received);
        if let Some(job) = job {
            match stored {
                Some(s) if !failed => self.store_object(job, s.into_body(), live),
                _ => self.metrics.store_aborted(),
            }
        }
        (!failed).then(|| {
            ReadAhead {
                frames,
                len: expected,
            }
            .boxed()
        })
    }

    pub(super) fn store_object(&self, job: StoreJob, body: Bytes, live: &Live) {
        let now = self.clock.now();
        let fields = vary_fields(&job.headers);
        let key = stored_key(&job);
        if !fields.is_empty() {
            self.store
                .load()
                .insert(job.primary.clone(), Entry::Variants(Arc::from(fields)));
        }
        // Copied into the object's own buffer, never kept as slices of the read buffer.
        let mut headers = job.headers;
        headers.remove(header::AGE);
        if job.status != StatusCode::NO_CONTENT {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let len = body.len() as u64;
        let body = job.tiers.stored_body(live.sendfile, body);
        let object = Arc::new(CachedObject::new(
            job.status,
            headers,
            body,
            now,
            &job.freshness,
            live.stale_keep,
        ));
        match (job.tiers, self.disk()) {
            (Tiers::DiskOnly, Some(d)) => {
                // `respond` reserved it (size, budget).
                d.tier.write_reserved(&key, &object);
                if let Some(leader) = job.leader {
                    leader.complete(Arc::new(Fetched {
                        object,
                        primary: job.primary,
                        key,
                    }));
                }
                return;
            }
            (Tiers::MemoryThenDisk, _) => object
                .bound_for_disk
                .store(true, std::sync::atomic::Ordering::Relaxed),
            _ => {}
        }
        self.store
            .load()
            .insert(key.clone(), Entry::Object(Arc::clone(&object)));
        self.metrics.stored(len);
        if let Some(leader) = job.leader {
            leader.complete(Arc::new(Fetched {
                object,
                primary: job.primary,
                key,
            }));
        }
    }
}

/// The key `job`'s object is stored under: its primary key, or the variant its request selects.
fn stored_key(job: &StoreJob) -> String {
    let fields = vary_fields(&job.headers);
    if fields.is_empty() {
        job.primary.clone()
    } else {
        variant_key(&job.primary, &fields, &job.request_headers)
    }
}

/// What [`Proxy::relay`] saw of an origin body.
struct Relayed {
    /// The body as stored, if it stayed within both budgets.
    stored: Option<StoreBuffer>,
    /// Bytes received from the origin.
    received: u64,
    /// The body broke off or stalled.
    failed: bool,
    /// The body ended (all of it came).
    whole: bool,
}
