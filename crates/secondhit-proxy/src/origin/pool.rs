//! One worker thread's keep-alive HTTP/1.1 connections to the origins, on hyper's connection
//! API: what hyper-util's pooled client did for us, without what the proxy does not need.
//!
//! Per request that client locked its pool, hashed the origin's scheme and authority byte by
//! byte, cloned the connector, boxed the response future and spawned a task to return the
//! connection once its body was read: 8-10 % of the miss path's CPU (`perf record -g`,
//! `scripts/bench-proxy.sh` miss_1k). Here the origins are known when the pool is built, so each
//! has its own shelf of idle connections found by one lookup; a connection goes back on the
//! shelf when the response body it carries has been read to the end ([`OriginBody`]), and is
//! closed if the body is dropped before (hyper cannot reuse it then either).
//!
//! What the client gave that is kept: a request that a reused connection never sent (the origin
//! closed it while idle) is sent again on another, at most once on a new one; idle connections
//! are closed after `origin_idle` (checked on every use, and by a sweep every half of it); the
//! connect timeout, `TCP_NODELAY` and TLS come from the same connector.
//!
//! Requests without a body (GET and HEAD: every miss of a cache) skip hyper's client and take
//! [`h1`](super::h1)'s lean exchange on connections of their own; requests with a body keep
//! hyper's, which sends the body while the response comes back.

use super::h1;
use crate::body::ProxyBody;
use crate::config::OriginUrl;
use http::{header, Method, Request, Response, Uri};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tower_service::Service;

/// Any error of the connector (TCP connect, its timeout, the TLS handshake).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a request got no response head.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The connection could not be made (refused, timed out, TLS failed).
    #[error("connecting: {0}")]
    Connect(BoxError),
    /// The connection failed while sending or before the response head.
    #[error(transparent)]
    Http(#[from] hyper::Error),
    /// The lean exchange of a bodyless request failed before the response head, or a response
    /// head broke its framing rules (checked on hyper's responses too: [`h1::check_head`]).
    #[error(transparent)]
    Lean(#[from] h1::H1Error),
}

/// One worker's connections, an idle shelf per origin.
pub struct Pool {
    connector: HttpsConnector<HttpConnector>,
    builder: http1::Builder,
    idle_timeout: Duration,
    /// The largest response head accepted, and the most read from a body at a time.
    max_head: usize,
    /// Keyed by authority, one map for `http` origins and one for `https` (foldhash: the keys
    /// are the operator's origins, not client input, so SipHash's flood resistance buys nothing
    /// on a lookup every miss makes).
    shelves: [foldhash::HashMap<Box<str>, Arc<Shelf>>; 2],
    sweeping: Arc<AtomicBool>,
}

/// The idle connections to one origin, the most recently used last: hyper's, for requests
/// with a body, and the lean exchange's.
#[derive(Default)]
struct Shelf {
    idle: Mutex<VecDeque<Idle>>,
    lean: Mutex<VecDeque<LeanIdle>>,
}

struct Idle {
    sender: SendRequest<ProxyBody>,
    since: Instant,
}

struct LeanIdle {
    conn: Box<h1::Conn>,
    since: Instant,
}

impl Shelf {
    /// Puts a connection whose last response has been read back for the next request.
    fn put(&self, sender: SendRequest<ProxyBody>) {
        if sender.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            idle.push_back(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }

    /// The most recently used idle connection that is ready for a request (older ones past
    /// `timeout`, and any the origin closed, are dropped on the way).
    fn take(&self, timeout: Duration) -> Option<SendRequest<ProxyBody>> {
        let mut idle = self.idle.lock().ok()?;
        let now = Instant::now();
        while idle
            .front()
            .is_some_and(|i| now.duration_since(i.since) >= timeout)
        {
            idle.pop_front();
        }
        while let Some(i) = idle.pop_back() {
            if i.sender.is_ready() {
                return Some(i.sender);
            }
        }
        None
    }

    /// Puts a lean connection whose last response has been read whole back for the next
    /// request.
    fn put_lean(&self, conn: Box<h1::Conn>) {
        if let Ok(mut lean) = self.lean.lock() {
            lean.push_back(LeanIdle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// The most recently used lean connection the origin has not closed (older ones past
    /// `timeout`, and closed ones, are dropped on the way).
    fn take_lean(&self, timeout: Duration) -> Option<Box<h1::Conn>> {
        let mut lean = self.lean.lock().ok()?;
        let now = Instant::now();
        while lean
            .front()
            .is_some_and(|i| now.duration_since(i.since) >= timeout)
        {
            lean.pop_front();
        }
        while let Some(mut i) = lean.pop_back() {
            if i.conn.usable() {
                return Some(i.conn);
            }
        }
        None
    }

    /// Closes the connections idle for `timeout` or more, and any the origin closed.
    fn sweep(&self, timeout: Duration) {
        let now = Instant::now();
        if let Ok(mut idle) = self.idle.lock() {
            idle.retain(|i| now.duration_since(i.since) < timeout && !i.sender.is_closed());
        }
        if let Ok(mut lean) = self.lean.lock() {
            lean.retain_mut(|i| now.duration_since(i.since) < timeout && i.conn.usable());
        }
    }
}

impl Pool {
    /// A pool for `origins` (all the origins requests may be routed to), connecting with
    /// `connector`, reading responses with `builder`'s settings (hyper's) and at most
    /// `max_head` bytes of response head (the lean exchange's).
    pub fn new<'a>(
        origins: impl IntoIterator<Item = &'a OriginUrl>,
        connector: HttpsConnector<HttpConnector>,
        builder: http1::Builder,
        idle_timeout: Duration,
        max_head: usize,
    ) -> Pool {
        let mut shelves: [foldhash::HashMap<Box<str>, Arc<Shelf>>; 2] = Default::default();
        for o in origins {
            shelves[usize::from(o.tls)]
                .entry(o.authority.as_str().into())
                .or_default();
        }
        Pool {
            connector,
            builder,
            idle_timeout,
            max_head,
            shelves,
            sweeping: Arc::default(),
        }
    }

    fn shelf(&self, origin: &OriginUrl) -> Option<&Arc<Shelf>> {
        self.shelves[usize::from(origin.tls)].get(origin.authority.as_str())
    }

    /// Sends `request` (origin-form, with its `Host`) to `origin` on an idle connection, or on
    /// a new one, and returns the response head; its body hands the connection back when read
    /// to the end.
    pub async fn send(
        &self,
        origin: &OriginUrl,
        request: Request<ProxyBody>,
    ) -> Result<Response<OriginBody>, PoolError> {
        let shelf = self.shelf(origin).cloned();
        if bodyless(&request) {
            return self.send_lean(origin, &request, shelf).await;
        }
        // Boxed: hyper's handshake and send make this path's future 1 KB larger than the lean
        // one's, and every future that awaits this one (up to the request's) would carry and
        // copy that kilobyte on every miss.
        Box::pin(self.send_hyper(origin, request, shelf)).await
    }

    /// [`send`](Pool::send) for a request with a body, on hyper's client connection.
    async fn send_hyper(
        &self,
        origin: &OriginUrl,
        mut request: Request<ProxyBody>,
        shelf: Option<Arc<Shelf>>,
    ) -> Result<Response<OriginBody>, PoolError> {
        let head_request = request.method() == Method::HEAD;
        loop {
            let idle = shelf.as_ref().and_then(|s| s.take(self.idle_timeout));
            let reused = idle.is_some();
            let mut sender = match idle {
                Some(s) => s,
                None => self.connect(origin).await?,
            };
            match sender.try_send_request(request).await {
                Ok(mut response) => {
                    self.sweep_in_background();
                    // Refused: the response (its body unread) drops, and its connection with it.
                    let close_delimited = h1::check_head(
                        response.status(),
                        response.version(),
                        response.headers_mut(),
                        head_request,
                    )?;
                    let lease = shelf.map(|home| Lease { sender, home });
                    return Ok(response.map(|body| OriginBody {
                        inner: Inner::Hyper { body, lease },
                        close_delimited,
                    }));
                }
                Err(mut e) => match e.take_message() {
                    // Never written: the origin closed the connection while it was idle.
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(PoolError::Http(e.into_error())),
                },
            }
        }
    }

    /// Sends a request without a body (GET or HEAD), whose head `request` writes, by the lean
    /// exchange; as [`send`](Pool::send) otherwise.
    pub async fn send_bodyless<R: h1::LeanRequest + ?Sized>(
        &self,
        origin: &OriginUrl,
        request: &R,
    ) -> Result<Response<OriginBody>, PoolError> {
        let shelf = self.shelf(origin).cloned();
        self.send_lean(origin, request, shelf).await
    }

    /// [`send`](Pool::send) for a request without a body, by the lean exchange: on an idle
    /// connection, or a new one. A reused connection that took the request and closed without
    /// a byte of answer (the origin timed it out as it was sent) costs one more try, on a new
    /// connection and only once: GET and HEAD are safe to send again, but a request that makes
    /// the origin drop connections must not go to every idle one in turn.
    async fn send_lean<R: h1::LeanRequest + ?Sized>(
        &self,
        origin: &OriginUrl,
        request: &R,
        shelf: Option<Arc<Shelf>>,
    ) -> Result<Response<OriginBody>, PoolError> {
        let mut retried = false;
        loop {
            let idle = match retried {
                false => shelf.as_ref().and_then(|s| s.take_lean(self.idle_timeout)),
                true => None,
            };
            let reused = idle.is_some();
            let mut conn = match idle {
                Some(c) => c,
                None => Box::new(h1::Conn::new(TokioIo::new(
                    self.connect_stream(origin).await?,
                ))),
            };
            match conn.exchange(request, self.max_head).await {
                Ok(head) => {
                    self.sweep_in_background();
                    let body = OriginBody {
                        close_delimited: head.close_delimited(),
                        inner: Inner::Lean {
                            conn: Some(conn),
                            state: head.body,
                            reuse: head.keep_alive,
                            home: shelf,
                            max_read: self.max_head,
                        },
                    };
                    let mut response = Response::new(body);
                    *response.status_mut() = head.status;
                    *response.version_mut() = head.version;
                    *response.headers_mut() = head.headers;
                    if let Some(reason) = head.reason {
                        response.extensions_mut().insert(reason);
                    }
                    return Ok(response);
                }
                Err((_, true)) if reused => retried = true,
                Err((e, _)) => return Err(PoolError::Lean(e)),
            }
        }
    }

    /// A new connection to `origin` from the connector (TCP, TLS over it for `https`).
    async fn connect_stream(
        &self,
        origin: &OriginUrl,
    ) -> Result<<HttpsConnector<HttpConnector> as Service<Uri>>::Response, PoolError> {
        let uri = Uri::builder()
            .scheme(origin.scheme())
            .authority(origin.authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|e| PoolError::Connect(Box::new(e)))?;
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(PoolError::Connect)?;
        connector.call(uri).await.map_err(PoolError::Connect)
    }

    async fn connect(&self, origin: &OriginUrl) -> Result<SendRequest<ProxyBody>, PoolError> {
        let stream = self.connect_stream(origin).await?;
        let (sender, connection) = self.builder.handshake(stream).await?;
        // On this worker's event loop, beside the requests that use it.
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "origin connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Starts, on this thread's event loop, the task that closes connections idle too long
    /// (once; again if that loop has gone).
    fn sweep_in_background(&self) {
        if self.sweeping.swap(true, Ordering::Relaxed) {
            return;
        }
        let shelves: Vec<Weak<Shelf>> = self
            .shelves
            .iter()
            .flat_map(|m| m.values().map(Arc::downgrade))
            .collect();
        let timeout = self.idle_timeout;
        let flag = Sweeping(Arc::clone(&self.sweeping));
        tokio::spawn(async move {
            let _flag = flag;
            let every = (timeout / 2).max(Duration::from_millis(100));
            loop {
                tokio::time::sleep(every).await;
                let mut alive = false;
                for s in shelves.iter().filter_map(Weak::upgrade) {
                    s.sweep(timeout);
                    alive = true;
                }
                if !alive {
                    return;
                }
            }
        });
    }

    /// Idle connections, all origins together, both kinds (for tests).
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.shelves
            .iter()
            .flat_map(|m| m.values())
            .map(|s| s.idle.lock().map_or(0, |i| i.len()) + s.lean.lock().map_or(0, |i| i.len()))
            .sum()
    }
}

/// Whether `request` has no body to send (GET or HEAD, nothing framed), and so takes the lean
/// exchange.
fn bodyless(request: &Request<ProxyBody>) -> bool {
    matches!(*request.method(), Method::GET | Method::HEAD)
        && request.body().is_end_stream()
        && !request.headers().contains_key(header::TRANSFER_ENCODING)
        && request
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_none_or(|v| v == "0")
}

/// Clears the pool's "sweeping" flag when the sweep task ends or its event loop drops it.
struct Sweeping(Arc<AtomicBool>);

impl Drop for Sweeping {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// A connection lent to one response, to go back on its shelf.
struct Lease {
    sender: SendRequest<ProxyBody>,
    home: Arc<Shelf>,
}

/// Why an origin response's body broke off.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// From hyper's client.
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
    /// From the lean exchange.
    #[error(transparent)]
    Lean(#[from] h1::H1Error),
}

/// An origin response's body. Read to the end, it hands its connection back to the pool.
pub struct OriginBody {
    inner: Inner,
    /// It runs to the close of the connection.
    close_delimited: bool,
}

enum Inner {
    /// From hyper's client, with the connection it came on (none from hyper-util's client).
    Hyper {
        body: Incoming,
        lease: Option<Lease>,
    },
    /// From the lean exchange, read off the connection as it is polled.
    Lean {
        /// None once the body failed (the connection is closed). Boxed: a connection holds
        /// TLS state inline (a few KiB), copied on every move of the response otherwise.
        conn: Option<Box<h1::Conn>>,
        state: h1::BodyState,
        /// Whether the response let the connection carry another request.
        reuse: bool,
        home: Option<Arc<Shelf>>,
        max_read: usize,
    },
}

impl OriginBody {
    /// A body from hyper-util's client (with `tls.origin_http2`), which returns its connections
    /// itself; `close_delimited` as [`h1::check_head`] found.
    pub fn unpooled(body: Incoming, close_delimited: bool) -> OriginBody {
        OriginBody {
            inner: Inner::Hyper { body, lease: None },
            close_delimited,
        }
    }

    /// Whether the body runs to the close of the origin's connection (HTTP/1, no length, not
    /// chunked): whole or cut short by the origin, it ends the same way, so it can never be
    /// shown complete, and is never stored.
    pub fn close_delimited(&self) -> bool {
        self.close_delimited
    }

    /// Hands the connection back. hyper's: at once if it is ready for another request (hyper's
    /// dispatcher goes idle in the poll that delivers the last bytes); else, when it is. A
    /// connection stays busy after its response while the request's body is still going up (an
    /// origin that answers a POST before reading all of it), and must not be lent meanwhile.
    /// A lean one: if its response allowed it and nothing followed the body.
    fn release(&mut self) {
        match &mut self.inner {
            Inner::Hyper { lease, .. } => {
                if let Some(Lease { sender, home }) = lease.take() {
                    release_hyper(sender, home);
                }
            }
            Inner::Lean {
                conn, reuse, home, ..
            } => {
                if let (Some(c), Some(home), true) = (conn.take(), home.take(), *reuse) {
                    if c.is_clean() {
                        home.put_lean(c);
                    }
                }
            }
        }
    }
}

fn release_hyper(mut sender: SendRequest<ProxyBody>, home: Arc<Shelf>) {
    if sender.is_ready() {
        home.put(sender);
        return;
    }
    // Off an event loop (a body dropped at shutdown) the connection just closes.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            if std::future::poll_fn(|cx| sender.poll_ready(cx))
                .await
                .is_ok()
            {
                home.put(sender);
            }
        });
    }
}

impl Body for OriginBody {
    type Data = bytes::Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = match &mut self.inner {
            Inner::Hyper { body, .. } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                let ended = match &polled {
                    Poll::Ready(None) => true,
                    Poll::Ready(Some(Ok(_))) => body.is_end_stream(),
                    _ => false,
                };
                if ended {
                    self.release();
                }
                return polled.map_err(BodyError::Hyper);
            }
            Inner::Lean {
                conn: None, state, ..
            } => {
                *state = h1::BodyState::Done;
                return Poll::Ready(None);
            }
            Inner::Lean {
                conn: Some(c),
                state,
                max_read,
                ..
            } => std::task::ready!(c.poll_body(cx, state, *max_read)),
        };
        match polled {
            None => {
                self.release();
                Poll::Ready(None)
            }
            Some(Ok(data)) => {
                if matches!(&self.inner, Inner::Lean { state, .. } if state.is_done()) {
                    self.release();
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Some(Err(e)) => {
                if let Inner::Lean { conn, state, .. } = &mut self.inner {
                    *conn = None; // closed: what it held no longer frames anything
                    *state = h1::BodyState::Done;
                }
                Poll::Ready(Some(Err(BodyError::Lean(e))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Hyper { body, .. } => body.is_end_stream(),
            Inner::Lean { state, .. } => state.is_done(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Hyper { body, .. } => body.size_hint(),
            Inner::Lean { state, .. } => match state {
                h1::BodyState::Length(n) => SizeHint::with_exact(*n),
                h1::BodyState::Done => SizeHint::with_exact(0),
                _ => SizeHint::default(),
            },
        }
    }
}

impl Drop for OriginBody {
    fn drop(&mut self) {
        // A body never polled because it has no bytes (HEAD, 304, Content-Length: 0) is done;
        // one dropped half read is not, and its connection closes.
        if self.is_end_stream() {
            self.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::empty;
    use http_body_util::BodyExt;
    use hyper_util::rt::TokioIo;
    use std::sync::atomic::AtomicUsize;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Connections accepted and connections ended, as the origin saw them.
    #[derive(Default)]
    struct Seen {
        opened: AtomicUsize,
        closed: AtomicUsize,
    }

    /// A keep-alive origin on 127.0.0.1: `/big` is 1 MiB, anything else `hello`.
    async fn origin() -> (OriginUrl, Arc<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let s = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                s.opened.fetch_add(1, Ordering::SeqCst);
                let s = Arc::clone(&s);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                        let body = if req.uri().path() == "/big" {
                            vec![b'x'; 1 << 20]
                        } else {
                            b"hello".to_vec()
                        };
                        Ok::<_, std::convert::Infallible>(Response::new(crate::body::full(
                            bytes::Bytes::from(body),
                        )))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    s.closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        (url.parse().unwrap(), seen)
    }

    fn pool(origin: &OriginUrl, idle: Duration) -> Pool {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        let tls = crate::tls::origin_client_config(None).unwrap();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Pool::new([origin], connector, http1::Builder::new(), idle, 64 * 1024)
    }

    fn get(origin: &OriginUrl, path: &str, method: http::Method) -> Request<ProxyBody> {
        Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, origin.authority.as_str())
            .body(empty())
            .unwrap()
    }

    async fn read(pool: &Pool, origin: &OriginUrl, path: &str) -> bytes::Bytes {
        let r = pool
            .send(origin, get(origin, path, http::Method::GET))
            .await
            .unwrap();
        r.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn a_connection_read_to_the_end_carries_the_next_request() {
        let (o, seen) = origin().await;
        let p = pool(&o, Duration::from_secs(60));
        for _ in 0..5 {
            assert_eq!(&read(&p, &o, "/").await[..], b"hello");
        }
        assert_eq!(read(&p, &o, "/big").await.len(), 1 << 20);
        assert_eq!(seen.opened.load(Ordering::SeqCst), 1);
        // A HEAD answer has no body to read, but an origin may send one anyway, even late: its
        // connection is closed, never lent again.
        let head = p.send(&o, get(&o, "/", http::Method::HEAD)).await.unwrap();
        drop(head);
        assert_eq!(p.idle(), 0);
        assert_eq!(&read(&p, &o, "/").await[..], b"hello");
        assert_eq!(seen.opened.load(Ordering::SeqCst), 2);
        assert_eq!(p.idle(), 1);
        // Requests with a body go by hyper's client, on connections of their own, also reused.
        for _ in 0..3 {
            let put = Request::builder()
                .method(http::Method::PUT)
                .uri("/")
                .header(http::header::HOST, o.authority.as_str())
                .body(crate::body::full("up"))
                .unwrap();
            let r = p.send(&o, put).await.unwrap();
            assert_eq!(
                &r.into_body().collect().await.unwrap().to_bytes()[..],
                b"hello"
            );
        }
        assert_eq!(seen.opened.load(Ordering::SeqCst), 3);
        assert_eq!(p.idle(), 2);
    }

    #[tokio::test]
    async fn a_body_dropped_half_read_closes_its_connection() {
        let (o, seen) = origin().await;
        let p = pool(&o, Duration::from_secs(60));
        let mut body = p
            .send(&o, get(&o, "/big", http::Method::GET))
            .await
            .unwrap()
            .into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert!(first.data_ref().is_some_and(|d| d.len() < 1 << 20));
        drop(body);
        assert_eq!(p.idle(), 0);
        assert_eq!(&read(&p, &o, "/").await[..], b"hello");
        assert_eq!(seen.opened.load(Ordering::SeqCst), 2);
        // The origin sees the first one go.
        for _ in 0..100 {
            if seen.closed.load(Ordering::SeqCst) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(seen.closed.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn idle_connections_are_closed_after_the_idle_timeout() {
        let (o, seen) = origin().await;
        let p = pool(&o, Duration::from_millis(200));
        assert_eq!(&read(&p, &o, "/").await[..], b"hello");
        assert_eq!(p.idle(), 1);
        // The sweep (every 100 ms here) closes it with no request to notice.
        for _ in 0..100 {
            if seen.closed.load(Ordering::SeqCst) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(seen.closed.load(Ordering::SeqCst), 1);
        assert_eq!(p.idle(), 0);
        assert_eq!(&read(&p, &o, "/").await[..], b"hello");
        assert_eq!(seen.opened.load(Ordering::SeqCst), 2);
    }

    /// An origin on 127.0.0.1 that serves each connection with `serve`, and the number of
    /// connections it has accepted.
    async fn raw_origin<F, Fut>(serve: F) -> (OriginUrl, Arc<AtomicUsize>)
    where
        F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let o: OriginUrl = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let opened = Arc::new(AtomicUsize::new(0));
        let n = Arc::clone(&opened);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream));
            }
        });
        (o, opened)
    }

    /// Reads up to the end of a request head (`None`: the connection ended first).
    async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(k) => got.extend_from_slice(&buf[..k]),
            }
        }
        Some(got)
    }

    #[tokio::test]
    async fn a_connection_the_origin_closed_while_idle_is_not_used() {
        // An origin that closes every connection after one response without saying so
        // (no `Connection: close`), as one whose keep-alive timeout is short does.
        let (o, opened) = raw_origin(|mut stream| async move {
            if read_head(&mut stream).await.is_some() {
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await;
            }
        })
        .await;
        let p = pool(&o, Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(&read(&p, &o, "/").await[..], b"ok");
            // Time for the close to reach the idle connection, which is then not lent (the
            // retry of a request a dead connection dropped would hide that it was).
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(p.idle(), 1);
            let shelf = p.shelf(&o).unwrap();
            assert!(shelf.take_lean(Duration::from_secs(60)).is_none());
            assert_eq!(p.idle(), 0);
        }
        assert_eq!(opened.load(Ordering::SeqCst), 3);
    }

    /// An origin on its own thread (it runs while the test's event loop is blocked) that
    /// answers each request with `ok` and, 5 ms after the first answer on a connection, sends a
    /// whole response no request asked for.
    fn threaded_stray_origin() -> (OriginUrl, Arc<AtomicUsize>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let o: OriginUrl = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let opened = Arc::new(AtomicUsize::new(0));
        let n = Arc::clone(&opened);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                n.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut first = true;
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                            match stream.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(k) => got.extend_from_slice(&buf[..k]),
                            }
                        }
                        got.clear();
                        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                        if std::mem::take(&mut first) {
                            std::thread::sleep(Duration::from_millis(5));
                            let _ = stream
                                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTRAY");
                        }
                    }
                });
            }
        });
        (o, opened)
    }

    #[tokio::test]
    async fn stray_bytes_the_event_loop_has_not_noticed_yet_still_unfit_a_connection() {
        let (o, opened) = threaded_stray_origin();
        let p = pool(&o, Duration::from_secs(60));
        assert_eq!(&body_of(&p, &o).await.unwrap()[..], b"ok");
        assert_eq!(p.idle(), 1);
        // The stray response arrives while this thread's event loop is blocked: tokio's
        // readiness for the idle connection still says "nothing to read" (the last read drained
        // the socket), but the bytes are there, and the socket says so.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(&body_of(&p, &o).await.unwrap()[..], b"ok");
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn bytes_on_a_new_connection_before_the_request_are_an_error() {
        // An origin that speaks first.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::Write;
            let (mut stream, _) = listener.accept().unwrap();
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTRAY");
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_secs(2));
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let stream = TokioIo::new(hyper_rustls::MaybeHttpsStream::Http(TokioIo::new(tcp)));
        let mut conn = h1::Conn::new(stream);
        let o: OriginUrl = format!("http://{addr}").parse().unwrap();
        let e = conn
            .exchange(&get(&o, "/", http::Method::GET), 1024)
            .await
            .err();
        assert!(
            matches!(e, Some((h1::H1Error::Unsolicited, false))),
            "{e:?}"
        );
    }

    /// An `https://localhost` origin with a certificate of a CA made for the test, whose
    /// connections answer every request with `ok` and, when `stray`, 5 ms later with a whole
    /// response no request asked for; a pool trusting the CA; and the connections accepted.
    async fn tls_origin(stray: bool) -> (OriginUrl, Pool, Arc<AtomicUsize>, std::path::PathBuf) {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let dir =
            std::env::temp_dir().join(format!("secondhit-pool-tls-{stray}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let (ca_file, cert_file, key_file) = (
            dir.join("ca.pem"),
            dir.join("cert.pem"),
            dir.join("key.pem"),
        );
        std::fs::write(&ca_file, ca.pem()).unwrap();
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let pair = crate::tls::CertPair {
            host: None,
            cert: cert_file,
            key: key_file,
        };
        let certs = Arc::new(crate::tls::SniCertificates::load(&pair, &[]).unwrap());
        let acceptor = tokio_rustls::TlsAcceptor::from(crate::tls::server_config(certs).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let o: OriginUrl = format!(
            "https://localhost:{}",
            listener.local_addr().unwrap().port()
        )
        .parse()
        .unwrap();
        let opened = Arc::new(AtomicUsize::new(0));
        let n = Arc::clone(&opened);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                            match tls.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(k) => got.extend_from_slice(&buf[..k]),
                            }
                        }
                        got.clear();
                        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if tls.write_all(ok).await.is_err() || tls.flush().await.is_err() {
                            return;
                        }
                        if stray {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            let stray = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTRAY";
                            let _ = tls.write_all(stray).await;
                            let _ = tls.flush().await;
                        }
                    }
                });
            }
        });
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        let tls = crate::tls::origin_client_config(Some(&ca_file)).unwrap();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let p = Pool::new(
            [&o],
            connector,
            http1::Builder::new(),
            Duration::from_secs(60),
            64 * 1024,
        );
        (o, p, opened, dir)
    }

    #[tokio::test]
    async fn tls_connections_are_reused_and_stray_records_unfit_them() {
        // The handshake's session tickets do not make a new connection look spoken to first,
        // nor a reused one unfit.
        let (o, p, opened, dir) = tls_origin(false).await;
        for _ in 0..4 {
            assert_eq!(&body_of(&p, &o).await.unwrap()[..], b"ok");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(opened.load(Ordering::SeqCst), 1);
        let _ = std::fs::remove_dir_all(dir);
        // Bytes after each answer, inside TLS records: each connection is used once.
        let (o, p, opened, dir) = tls_origin(true).await;
        for _ in 0..3 {
            assert_eq!(&body_of(&p, &o).await.unwrap()[..], b"ok");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(opened.load(Ordering::SeqCst), 3);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A request body that sends one chunk and then never ends (a slow upload).
    struct Stalled(bool);

    impl Body for Stalled {
        type Data = bytes::Bytes;
        type Error = crate::body::BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<bytes::Bytes>, Self::Error>>> {
            if self.0 {
                return Poll::Pending;
            }
            self.0 = true;
            Poll::Ready(Some(Ok(Frame::data(bytes::Bytes::from_static(b"part")))))
        }
    }

    #[tokio::test]
    async fn a_connection_still_carrying_an_upload_is_not_lent() {
        // An origin that answers a POST at once, before its body is in, and reads on; and
        // answers a GET with `ok`.
        let (o, opened) = raw_origin(|mut stream| async move {
            while let Some(head) = read_head(&mut stream).await {
                if head.starts_with(b"POST") {
                    let _ = stream
                        .write_all(b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n")
                        .await;
                    let mut rest = [0u8; 4096];
                    while matches!(stream.read(&mut rest).await, Ok(k) if k > 0) {}
                    return;
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await;
            }
        })
        .await;
        let p = pool(&o, Duration::from_secs(60));
        let post = Request::builder()
            .method(http::Method::POST)
            .uri("/upload")
            .header(http::header::HOST, o.authority.as_str())
            .body(Stalled(false).boxed())
            .unwrap();
        let answer = p.send(&o, post).await.unwrap();
        assert_eq!(answer.status(), http::StatusCode::PAYLOAD_TOO_LARGE);
        // Its (empty) body is done, but the upload is not: the connection stays off the shelf.
        drop(answer);
        assert_eq!(p.idle(), 0);
        // The next request with a body would take a hyper connection: it must get a new one.
        let put = Request::builder()
            .method(http::Method::PUT)
            .uri("/")
            .header(http::header::HOST, o.authority.as_str())
            .body(crate::body::full("x"))
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), async {
            let r = p.send(&o, put).await.unwrap();
            r.into_body().collect().await.unwrap().to_bytes()
        })
        .await
        .expect("a request must not wait behind the upload");
        assert_eq!(&got[..], b"ok");
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let o: OriginUrl = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        drop(listener);
        let p = pool(&o, Duration::from_secs(60));
        let e = p.send(&o, get(&o, "/", http::Method::GET)).await.err();
        assert!(matches!(e, Some(PoolError::Connect(_))), "{e:?}");
    }

    /// An origin that answers every request on a connection with the pieces of `reply`, each
    /// written and flushed apart after a pause (as slow networks split them), then keeps the
    /// connection open, or closes it if `close`.
    async fn scripted(
        reply: &'static [&'static [u8]],
        close: bool,
    ) -> (OriginUrl, Arc<AtomicUsize>) {
        raw_origin(move |mut stream| async move {
            while read_head(&mut stream).await.is_some() {
                for piece in reply {
                    if stream.write_all(piece).await.is_err() {
                        return;
                    }
                    let _ = stream.flush().await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                if close {
                    return;
                }
            }
        })
        .await
    }

    async fn body_of(p: &Pool, o: &OriginUrl) -> Result<bytes::Bytes, BodyError> {
        let r = p.send(o, get(o, "/", http::Method::GET)).await.unwrap();
        r.into_body().collect().await.map(|c| c.to_bytes())
    }

    #[tokio::test]
    async fn lean_chunked_bodies_split_across_reads_keep_their_connection() {
        let (o, opened) = scripted(
            &[
                b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-",
                b"Encoding: chunked\r\n\r\n4\r\nhel",
                b"l\r\n3;x=y\r\no, \r",
                b"\n6\r\nworld!\r\n0\r\nTrailer: t\r\n",
                b"\r\n",
            ],
            false,
        )
        .await;
        let p = pool(&o, Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(&body_of(&p, &o).await.unwrap()[..], b"hello, world!");
        }
        assert_eq!(opened.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn lean_bodies_to_the_close_end_with_it_and_short_ones_fail() {
        let (o, opened) = scripted(&[b"HTTP/1.1 200 OK\r\n\r\nuntil", b" the end"], true).await;
        let p = pool(&o, Duration::from_secs(60));
        for _ in 0..2 {
            assert_eq!(&body_of(&p, &o).await.unwrap()[..], b"until the end");
        }
        assert_eq!(opened.load(Ordering::SeqCst), 2);
        assert_eq!(p.idle(), 0);
        let (o, _) = scripted(
            &[b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nfour"],
            true,
        )
        .await;
        let p = pool(&o, Duration::from_secs(60));
        let e = body_of(&p, &o).await.unwrap_err();
        assert!(matches!(e, BodyError::Lean(h1::H1Error::Short(6))), "{e:?}");
        let (o, _) = scripted(
            &[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"],
            true,
        )
        .await;
        let p = pool(&o, Duration::from_secs(60));
        let e = body_of(&p, &o).await.unwrap_err();
        assert!(
            matches!(e, BodyError::Lean(h1::H1Error::Truncated)),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn a_reused_connection_closed_unanswered_is_retried_once_on_a_new_one() {
        // Each connection answers its first request and closes at the second without a byte
        // (an origin whose keep-alive timeout fired as the request came).
        let requests = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&requests);
        let (o, opened) = raw_origin(move |mut stream| {
            let seen = Arc::clone(&seen);
            async move {
                if read_head(&mut stream).await.is_some() {
                    seen.fetch_add(1, Ordering::SeqCst);
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .await;
                    if read_head(&mut stream).await.is_some() {
                        seen.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        })
        .await;
        let p = pool(&o, Duration::from_secs(60));
        // Two connections on the shelf.
        let (a, b) = tokio::join!(body_of(&p, &o), body_of(&p, &o));
        assert_eq!((&a.unwrap()[..], &b.unwrap()[..]), (&b"ok"[..], &b"ok"[..]));
        assert_eq!((opened.load(Ordering::SeqCst), p.idle()), (2, 2));
        // The next request goes to one of them, is dropped, and is sent again on a new
        // connection, not on the other idle one.
        assert_eq!(&body_of(&p, &o).await.unwrap()[..], b"ok");
        assert_eq!(opened.load(Ordering::SeqCst), 3);
        assert_eq!(requests.load(Ordering::SeqCst), 4);
        assert_eq!(p.idle(), 2);
        // A new connection that closes unanswered is an error, not a loop.
        let (o, opened) = raw_origin(|mut stream| async move {
            let _ = read_head(&mut stream).await;
        })
        .await;
        let p = pool(&o, Duration::from_secs(60));
        let e = p.send(&o, get(&o, "/", http::Method::GET)).await.err();
        assert!(
            matches!(e, Some(PoolError::Lean(h1::H1Error::Closed))),
            "{e:?}"
        );
        assert_eq!(opened.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn lean_reuse_follows_what_each_response_allows() {
        // (the response, connections two requests open: 1 if the first was reused)
        let cases: [(&'static [&'static [u8]], usize); 6] = [
            (&[b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"], 1),
            (&[b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"], 2),
            (&[b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"], 1),
            (&[b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"], 2),
            // Bytes past the body: whether they come in the body's read or later, not reused.
            (&[b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"], 2),
            (
                &[b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"],
                2,
            ),
        ];
        for (reply, connections) in cases {
            let (o, opened) = scripted(reply, false).await;
            let p = pool(&o, Duration::from_secs(60));
            for _ in 0..2 {
                assert_eq!(&body_of(&p, &o).await.unwrap()[..], b"ok", "{reply:?}");
            }
            assert_eq!(opened.load(Ordering::SeqCst), connections, "{reply:?}");
        }
        // A head cut off by the close fails on its new connection, with no second try.
        let (o, opened) = scripted(&[b"HTTP/1.1 200 OK\r\nContent-"], true).await;
        let p = pool(&o, Duration::from_secs(60));
        let e = p.send(&o, get(&o, "/", http::Method::GET)).await.err();
        assert!(
            matches!(e, Some(PoolError::Lean(h1::H1Error::Malformed(_)))),
            "{e:?}"
        );
        assert_eq!(opened.load(Ordering::SeqCst), 1);
    }
}
