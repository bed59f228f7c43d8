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

use super::cached::{owned_headers, CachedObject, Entry};
use super::coalesce::{Fetched, Leader};
use super::{Live, Proxy};
use crate::body::{channel, ProxyBody};
use crate::http_cache::{variant_key, vary_fields, Freshness};
use crate::origin::OriginError;
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::StatusCode;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What the pump stores once the body is complete.
pub(super) struct StoreJob {
    /// The primary key.
    pub primary: String,
    /// The request's headers as the origin received them (for the variant key).
    pub request_headers: HeaderMap,
    /// The response's status and headers.
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// How fresh it is.
    pub freshness: Freshness,
    /// The coalesced fetch this is, whose followers get the object.
    pub leader: Option<Leader>,
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
    /// and, for a store job, stores it once complete. Returns the client's body.
    pub(super) fn pump(
        self: &Arc<Self>,
        mut body: Incoming,
        expected: Option<u64>,
        job: Option<StoreJob>,
        live: &Arc<Live>,
    ) -> ProxyBody {
        let (tx, client_body) = channel(CHANNEL_FRAMES, expected, Some(live.limits.stream_buffer));
        let proxy = Arc::clone(self);
        let live = Arc::clone(live);
        tokio::spawn(async move {
            let max_object = live.limits.max_object;
            // Sized from Content-Length when known, so a stored body holds no spare capacity.
            let initial = expected.unwrap_or(0).min(max_object) as usize;
            let mut stored = job.as_ref().map(|_| StoreBuffer::new(initial));
            let mut received = 0u64;
            let mut failed = false;
            let mut client_alive = true;
            loop {
                let frame = match tokio::time::timeout(live.timeouts.first_byte, body.frame()).await
                {
                    Ok(None) => break,
                    Ok(Some(Ok(f))) => f,
                    Ok(Some(Err(e))) => {
                        failed = true;
                        proxy.metrics.origin_error(OriginError::Body);
                        tracing::warn!(error = %e, "origin body broke off");
                        if client_alive {
                            tx.fail(Box::new(e)).await;
                        }
                        break;
                    }
                    Err(_) => {
                        failed = true;
                        proxy.metrics.origin_error(OriginError::Body);
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
                                proxy.metrics.store_over_budget();
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
            proxy.metrics.origin_bytes(received);
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

    fn store_object(&self, job: StoreJob, body: Bytes, live: &Live) {
        let now = self.clock.now();
        let fields = vary_fields(&job.headers);
        let key = if fields.is_empty() {
            job.primary.clone()
        } else {
            let key = variant_key(&job.primary, &fields, &job.request_headers);
            self.store
                .load()
                .insert(job.primary.clone(), Entry::Variants(Arc::from(fields)));
            key
        };
        let mut headers = owned_headers(&job.headers);
        headers.remove(header::AGE);
        if job.status != StatusCode::NO_CONTENT {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let len = body.len() as u64;
        let object = Arc::new(CachedObject::new(
            job.status,
            headers,
            body,
            now,
            &job.freshness,
            live.stale_keep,
        ));
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
