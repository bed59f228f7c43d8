//! A body being fetched to be stored, read by any number of clients, each at its own pace: the
//! leader's client and the followers of its coalesced fetch (as Varnish and Pingora stream a
//! fetch to every waiter). The fetch runs at the origin's pace: nobody's slow reading holds it,
//! and a follower gets each byte as soon as the origin's arrives.
//!
//! Memory: the chunks of one body, shared by every reader and at most the announced length
//! (which the caller has reserved from the store budget). Once the body is whole, the chunks
//! give way to the stored body itself, and a reader still behind reads a slice of it.

use crate::body::BoxError;
use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// The shared body. The fetch pushes; readers ([`GrowingBody`]) take.
pub struct Growing {
    /// The announced length.
    expected: u64,
    state: Mutex<State>,
}

struct State {
    chunks: Vec<Bytes>,
    end: End,
    /// Readers waiting for the next chunk or the end.
    wakers: Vec<Waker>,
}

enum End {
    /// Still arriving.
    Open,
    /// Whole: the stored body (the chunks are gone).
    Whole(Bytes),
    /// Broke off, stalled or came short: readers get an error (their response is cut, never
    /// completed with other bytes).
    Failed(&'static str),
}

impl Growing {
    /// An empty body that will be `expected` bytes long.
    pub fn new(expected: u64) -> Arc<Growing> {
        Arc::new(Growing {
            expected,
            state: Mutex::new(State {
                chunks: Vec::new(),
                end: End::Open,
                wakers: Vec::new(),
            }),
        })
    }

    /// The announced length.
    pub fn expected(&self) -> u64 {
        self.expected
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(state: &mut State) {
        for w in state.wakers.drain(..) {
            w.wake();
        }
    }

    /// Appends a chunk that arrived.
    pub fn push(&self, data: Bytes) {
        let mut s = self.state();
        if matches!(s.end, End::Open) && !data.is_empty() {
            s.chunks.push(data);
            Self::wake(&mut s);
        }
    }

    /// The body so far and then `last` (a chunk not pushed: readers have not seen it), as one
    /// buffer (copied once unless it is one chunk). A fetch holds its last chunk back and
    /// stores the whole body before [`Growing::finish`] gives readers its end, so that a
    /// client that has the whole response finds it stored.
    pub fn assemble(&self, last: Bytes, seal: bool) -> Bytes {
        let s = self.state();
        match (s.chunks.as_slice(), last.is_empty()) {
            ([], _) => last,
            ([one], true) => one.clone(),
            (chunks, _) => {
                let len = chunks.iter().map(Bytes::len).sum::<usize>() + last.len();
                if seal && len >= crate::pages::MIN_BODY {
                    // Large: straight into a sealed memory file, the one copy either way (the
                    // store then finds it sealed: `Tiers::stored_body`).
                    let mut parts: Vec<&[u8]> = chunks.iter().map(|c| &c[..]).collect();
                    parts.push(&last);
                    if let Some(sealed) = crate::pages::seal_parts(&parts) {
                        return sealed;
                    }
                }
                let mut b = Vec::with_capacity(len);
                for c in chunks {
                    b.extend_from_slice(c);
                }
                b.extend_from_slice(&last);
                Bytes::from(b)
            }
        }
    }

    /// The body is whole: `body` (what [`Growing::assemble`] gave, as stored) replaces the
    /// chunks.
    pub fn finish(&self, body: Bytes) {
        let mut s = self.state();
        s.chunks = Vec::new();
        s.end = End::Whole(body);
        Self::wake(&mut s);
    }

    /// The body will not be whole: every reader's response is cut. No effect once it is whole.
    pub fn fail(&self, why: &'static str) {
        let mut s = self.state();
        if matches!(s.end, End::Open) {
            s.chunks = Vec::new();
            s.end = End::Failed(why);
            Self::wake(&mut s);
        }
    }

    /// A handle for the fetch that fills this body: if it is dropped before the body ends
    /// (the task cancelled, the runtime shutting down), readers are cut rather than left
    /// waiting.
    pub fn filler(self: &Arc<Self>) -> Filler {
        Filler(Arc::clone(self))
    }

    /// A reader from the first byte.
    pub fn reader(self: &Arc<Self>) -> GrowingBody {
        GrowingBody {
            shared: Arc::clone(self),
            chunk: 0,
            offset: 0,
        }
    }
}

/// The fetch's end of a [`Growing`] body (see [`Growing::filler`]).
pub struct Filler(Arc<Growing>);

impl std::ops::Deref for Filler {
    type Target = Growing;

    fn deref(&self) -> &Growing {
        &self.0
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.0.fail("the fetch was abandoned");
    }
}

/// One client's reading of a [`Growing`] body.
pub struct GrowingBody {
    shared: Arc<Growing>,
    /// The next chunk to take while the body is arriving.
    chunk: usize,
    /// Bytes taken so far.
    offset: u64,
}

impl Body for GrowingBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let shared = Arc::clone(&self.shared);
        let mut s = shared.state();
        match &s.end {
            End::Whole(body) => {
                let from = usize::try_from(self.offset).unwrap_or(usize::MAX);
                if from >= body.len() {
                    return Poll::Ready(None);
                }
                let rest = body.slice(from..);
                self.offset = body.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(rest))))
            }
            End::Failed(why) => Poll::Ready(Some(Err((*why).into()))),
            End::Open => {
                if let Some(c) = s.chunks.get(self.chunk) {
                    let c = c.clone();
                    self.chunk += 1;
                    self.offset += c.len() as u64;
                    return Poll::Ready(Some(Ok(Frame::data(c))));
                }
                if !s.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    s.wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.offset >= self.shared.expected
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.shared.expected.saturating_sub(self.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn read_all(mut b: GrowingBody) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        while let Some(f) = b.frame().await {
            let f = f.map_err(|e| e.to_string())?;
            if let Ok(d) = f.into_data() {
                out.extend_from_slice(&d);
            }
        }
        Ok(out)
    }

    #[tokio::test]
    async fn readers_at_any_point_get_every_byte_once() {
        let g = Growing::new(6);
        let early = g.reader();
        g.push(Bytes::from_static(b"ab"));
        let mut middle = g.reader();
        // The middle reader takes the first chunk before the rest arrives.
        let first = middle.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"ab");
        g.push(Bytes::from_static(b"cd"));
        g.push(Bytes::from_static(b"ef"));
        let whole = g.assemble(Bytes::new(), false);
        assert_eq!(&whole[..], b"abcdef");
        g.finish(whole);
        let late = g.reader();
        assert_eq!(read_all(early).await.unwrap(), b"abcdef");
        assert_eq!(read_all(middle).await.unwrap(), b"cdef");
        assert_eq!(read_all(late).await.unwrap(), b"abcdef");
    }

    #[tokio::test]
    async fn a_chunk_held_back_reaches_readers_only_with_the_end() {
        let g = Growing::new(4);
        let mut r = g.reader();
        g.push(Bytes::from_static(b"ab"));
        let first = r.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"ab");
        let whole = g.assemble(Bytes::from_static(b"cd"), false);
        assert_eq!(&whole[..], b"abcd");
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(20), r.frame());
        assert!(waiting.await.is_err(), "the held-back chunk was not pushed");
        g.finish(whole);
        assert_eq!(read_all(r).await.unwrap(), b"cd");
        // A body of one chunk, held back: no copy.
        let g = Growing::new(2);
        let one = Bytes::from_static(b"ok");
        assert_eq!(g.assemble(one.clone(), false).as_ptr(), one.as_ptr());
    }

    #[tokio::test]
    async fn a_waiting_reader_is_woken_by_the_next_chunk() {
        let g = Growing::new(4);
        let r = g.reader();
        let reading = tokio::spawn(read_all(r));
        tokio::task::yield_now().await;
        g.push(Bytes::from_static(b"wx"));
        tokio::task::yield_now().await;
        g.push(Bytes::from_static(b"yz"));
        let b = g.assemble(Bytes::new(), false);
        g.finish(b);
        assert_eq!(reading.await.unwrap().unwrap(), b"wxyz");
    }

    #[tokio::test]
    async fn a_failed_body_cuts_every_reader_and_never_completes() {
        let g = Growing::new(10);
        let mut r = g.reader();
        g.push(Bytes::from_static(b"12345"));
        let first = r.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"12345");
        g.fail("origin body broke off");
        // A later push (a late frame) is not taken.
        g.push(Bytes::from_static(b"67890"));
        assert!(read_all(r).await.is_err());
        assert!(read_all(g.reader()).await.is_err());
    }

    #[tokio::test]
    async fn readers_are_cut_when_the_fetch_is_abandoned_and_not_after_it_ended() {
        let g = Growing::new(4);
        let r = g.reader();
        let filler = g.filler();
        filler.push(Bytes::from_static(b"ab"));
        drop(filler);
        assert!(
            read_all(r).await.is_err(),
            "a waiting reader is not left hanging"
        );
        let g = Growing::new(2);
        let filler = g.filler();
        filler.push(Bytes::from_static(b"ok"));
        let whole = filler.assemble(Bytes::new(), false);
        filler.finish(whole);
        drop(filler);
        assert_eq!(read_all(g.reader()).await.unwrap(), b"ok");
    }
}
