//! Response bodies: the one body type every server here sends ([`ProxyBody`]), the helpers for a
//! whole body ([`full`], [`empty`], [`text`]) and the one body fed by a task through a channel
//! ([`channel`]), with an optional byte budget that gives the producer backpressure.
//!
//! The budget is how a slow reader is kept from holding memory: every data frame takes as many
//! permits of a semaphore as it has bytes, and gives them back when the client's connection
//! takes the frame. A producer that finds the budget spent waits, so it stops reading its own
//! source (the origin) until the client catches up.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// Errors inside bodies: boxed, as hyper and our own producers raise different ones.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type the proxy, the admin listener and the synthetic origin send.
pub type ProxyBody = BoxBody<Bytes, BoxError>;

/// A whole body.
pub fn full(body: impl Into<Bytes>) -> ProxyBody {
    Full::new(body.into()).map_err(|e| match e {}).boxed()
}

/// No body.
pub fn empty() -> ProxyBody {
    Empty::new().map_err(|e| match e {}).boxed()
}

/// A plain-text response.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<ProxyBody> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

type Piece = (Result<Frame<Bytes>, BoxError>, Option<OwnedSemaphorePermit>);

/// A body fed by a [`Sender`].
pub struct ChannelBody {
    rx: mpsc::Receiver<Piece>,
    len: Option<u64>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // The permit (if any) is dropped here: the frame now belongs to the connection.
        self.rx
            .poll_recv(cx)
            .map(|piece| piece.map(|(frame, _permit)| frame))
    }

    fn size_hint(&self) -> SizeHint {
        self.len
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

/// The producing end of a [`ChannelBody`].
pub struct Sender {
    tx: mpsc::Sender<Piece>,
    budget: Option<Arc<Semaphore>>,
    budget_size: u32,
}

/// The client's end is gone: nobody will read what is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl Sender {
    /// Sends a frame. With a budget, waits until the reader has taken enough of the earlier
    /// frames for this one to fit (a frame larger than the whole budget waits for all of it).
    /// Returns [`Closed`] as soon as the reader is gone, also while waiting.
    pub async fn send(&self, frame: Frame<Bytes>) -> Result<(), Closed> {
        let permit = match &self.budget {
            Some(sem) => {
                let want = frame
                    .data_ref()
                    .map_or(0, |d| u32::try_from(d.len()).unwrap_or(u32::MAX))
                    .min(self.budget_size);
                tokio::select! {
                    p = Arc::clone(sem).acquire_many_owned(want) => Some(p.map_err(|_| Closed)?),
                    _ = self.tx.closed() => return Err(Closed),
                }
            }
            None => None,
        };
        self.tx.send((Ok(frame), permit)).await.map_err(|_| Closed)
    }

    /// Ends the body with an error (the client sees a cut-off response).
    pub async fn fail(&self, error: BoxError) {
        let _ = self.tx.send((Err(error), None)).await;
    }

    /// Whether the reader is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// The bytes of response bodies one client connection has not yet taken, all its requests
/// together: HTTP/2 multiplexes many on one connection, and a client that opens many streams
/// and reads none must hold no more than one that opens one. The listener puts one in each
/// request's extensions; a response body's channel draws from it ([`channel_within`]).
#[derive(Clone, Debug)]
pub struct ConnectionBudget {
    sem: Arc<Semaphore>,
    size: u32,
}

impl ConnectionBudget {
    /// A budget of `bytes` (at least 1).
    pub fn new(bytes: u32) -> Self {
        let size = bytes.max(1);
        ConnectionBudget {
            sem: Arc::new(Semaphore::new(size as usize)),
            size,
        }
    }

    /// Bytes not taken by any of this connection's bodies now.
    pub fn available(&self) -> usize {
        self.sem.available_permits()
    }
}

/// A channel-fed body of `len` bytes when known, holding up to `frames` frames, whose bytes not
/// yet taken count in the connection's `budget` (shared with its other responses).
pub fn channel_within(
    frames: usize,
    len: Option<u64>,
    budget: &ConnectionBudget,
) -> (Sender, ChannelBody) {
    let (tx, rx) = mpsc::channel(frames.max(1));
    let sender = Sender {
        tx,
        budget: Some(Arc::clone(&budget.sem)),
        budget_size: budget.size,
    };
    (sender, ChannelBody { rx, len })
}

/// A channel-fed body of `len` bytes when known (sent as `Content-Length`), holding up to
/// `frames` frames and, with `budget_bytes`, at most that many bytes not yet taken by the client.
pub fn channel(
    frames: usize,
    len: Option<u64>,
    budget_bytes: Option<u32>,
) -> (Sender, ChannelBody) {
    let (tx, rx) = mpsc::channel(frames.max(1));
    let budget_size = budget_bytes.unwrap_or(0).max(1);
    let sender = Sender {
        tx,
        budget: budget_bytes.map(|b| Arc::new(Semaphore::new(b.max(1) as usize))),
        budget_size,
    };
    (sender, ChannelBody { rx, len })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_budget_holds_the_producer_back_until_the_reader_takes_frames() {
        let (tx, mut body) = channel(64, None, Some(10));
        tx.send(Frame::data(Bytes::from_static(b"12345678")))
            .await
            .unwrap();
        // 8 of 10 bytes are out: a 4-byte frame must wait.
        let blocked = tokio::time::timeout(
            Duration::from_millis(50),
            tx.send(Frame::data(Bytes::from_static(b"abcd"))),
        )
        .await;
        assert!(blocked.is_err(), "sent beyond the budget");
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "12345678");
        tokio::time::timeout(
            Duration::from_secs(1),
            tx.send(Frame::data(Bytes::from_static(b"abcd"))),
        )
        .await
        .expect("sent once the reader took the first frame")
        .unwrap();
        // A frame larger than the whole budget still goes (it takes all of it).
        drop(body.frame().await);
        tx.send(Frame::data(Bytes::from(vec![0u8; 100])))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn bodies_of_one_connection_share_its_budget() {
        let budget = ConnectionBudget::new(10);
        let (a, mut body_a) = channel_within(64, None, &budget);
        let (b, _body_b) = channel_within(64, None, &budget);
        a.send(Frame::data(Bytes::from_static(b"123456")))
            .await
            .unwrap();
        b.send(Frame::data(Bytes::from_static(b"abcd")))
            .await
            .unwrap();
        assert_eq!(budget.available(), 0);
        // Another stream of the connection waits for the first to be read.
        let blocked = tokio::time::timeout(
            Duration::from_millis(50),
            b.send(Frame::data(Bytes::from_static(b"e"))),
        )
        .await;
        assert!(blocked.is_err(), "sent beyond the connection's budget");
        drop(body_a.frame().await);
        assert_eq!(budget.available(), 6);
        b.send(Frame::data(Bytes::from_static(b"e"))).await.unwrap();
    }

    #[tokio::test]
    async fn a_waiting_producer_learns_the_reader_is_gone() {
        let (tx, body) = channel(64, None, Some(4));
        tx.send(Frame::data(Bytes::from_static(b"1234")))
            .await
            .unwrap();
        let waiting =
            tokio::spawn(async move { tx.send(Frame::data(Bytes::from_static(b"5"))).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(body);
        let r = tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r, Err(Closed));
    }
}
