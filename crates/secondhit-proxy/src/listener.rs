//! The one accept loop: every server here (the proxy's public and admin listeners, the synthetic
//! origin) accepts connections through [`serve`], which bounds the connections served at once
//! (making room by closing the idlest when all are taken, see [`registry`]) and per client
//! address, closes connections that send nothing, completes the TLS handshake when the listener
//! has TLS, serves HTTP/1.1 and HTTP/2 (cleartext, or by ALPN over TLS) with hyper-util, closes
//! connections left idle or whose client stops taking its response (see [`activity`]), and on
//! shutdown stops accepting and gives in-flight requests a grace period. [`http_builder`] is
//! the hyper configuration the proxy's listeners share.

use crate::body::ProxyBody;
use activity::{Activity, Tracked, Watched};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use registry::Registry;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

pub mod activity;
pub mod registry;
pub mod timer;

/// The number of request fields hyper accepts when not told otherwise.
const HYPER_MAX_HEADERS: usize = 100;

/// Bytes an HTTP/2 client may send on one stream before the proxy reads them (the stream's
/// flow-control window), and on all the streams of a connection together. The connection's
/// window is what bounds the request bytes one connection can have buffered in the proxy: at
/// most 1 MiB, however many streams it opens. A stream's own is a quarter of that, so that one
/// upload cannot take the whole connection's.
pub const H2_STREAM_WINDOW: u32 = 256 * 1024;
/// See [`H2_STREAM_WINDOW`].
pub const H2_CONNECTION_WINDOW: u32 = 1024 * 1024;
/// Bytes of a response hyper's HTTP/2 layer buffers per stream ahead of the socket (hyper's
/// default is 400 KiB). The body behind it holds at most `limits.stream_buffer_bytes` more.
pub const H2_SEND_BUFFER: usize = 64 * 1024;

/// The hyper configuration of the proxy's listeners (public and admin): HTTP/1.1 with the
/// header-read timeout and the head's size and field limits; HTTP/2 with at most
/// `max_h2_streams` streams, the flow-control windows above, and the head's size limit.
pub fn http_builder(
    timeouts: &crate::config::Timeouts,
    limits: &crate::config::Limits,
) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        // Arms the header-read timeout of every request head without tokio's timer wheel.
        .timer(timer::Coarse)
        .header_read_timeout(timeouts.client_header)
        .max_buf_size(limits.max_header_bytes)
        .keep_alive(true);
    // hyper parses into stack arrays of its default size (100 fields) unless given a number,
    // and then builds arrays of that size element by element for every request head: the
    // default is only passed on when it differs.
    if limits.max_headers != HYPER_MAX_HEADERS {
        builder.http1().max_headers(limits.max_headers);
    }
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_h2_streams)
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        .max_send_buf_size(H2_SEND_BUFFER)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// How a listener treats its connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once. When all are taken, a new connection asks the idlest one
    /// to close (see [`registry`]) and waits for its slot.
    pub max_connections: usize,
    /// Connections served at once for one client address (0: no limit); past it a new
    /// connection from that address is closed at once.
    pub max_per_ip: usize,
    /// A connection that sends no byte within this is closed (hyper's own header timeout
    /// only starts once the first byte is in). Also the longest TLS handshake, and the grace
    /// a new connection has before it may be closed to make room (at most 1 s).
    pub first_byte: Option<Duration>,
    /// The idle and send timeouts (`client_idle`, `client_send`).
    pub watch: activity::Timeouts,
    /// On shutdown, in-flight requests get this long to finish.
    pub grace: Duration,
    /// Bytes of response bodies a connection has not yet taken, all its requests together
    /// (`limits.stream_buffer_bytes`): put in each request's extensions as a
    /// [`ConnectionBudget`](crate::body::ConnectionBudget).
    pub connection_buffer: u32,
}

impl Limits {
    /// The limits of the proxy's public listener, from its configuration.
    pub fn from_config(t: &crate::config::Timeouts, l: &crate::config::Limits) -> Limits {
        Limits {
            max_connections: l.max_connections,
            max_per_ip: l.max_connections_per_ip,
            first_byte: Some(t.client_header),
            watch: activity::Timeouts {
                idle: Some(t.client_idle),
                send: Some(t.client_send),
            },
            grace: t.shutdown_grace,
            connection_buffer: l.stream_buffer_bytes,
        }
    }

    /// The least age at which a connection may be closed to make room for another.
    fn evict_grace(&self) -> Duration {
        self.first_byte
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1))
    }
}

/// Resolves once shutdown is asked for (or the sender is gone).
pub async fn stopped_signal(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await.map(|_| ());
}

/// Accepts on `listener` until `stopped`, serving each connection with `builder` and each
/// request with `handler(request, peer)`. The handler's future is handed to hyper as it is, so
/// its size is what every connection holds and copies per request: keep it small.
pub async fn serve<H, Fut>(
    listener: TcpListener,
    builder: auto::Builder<TokioExecutor>,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    stopped: watch::Receiver<bool>,
    handler: H,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<ProxyBody>, Infallible>> + Send + 'static,
{
    let shared = Shared::new(&limits);
    serve_with_slots(listener, shared, builder, tls, limits, stopped, handler).await;
}

/// What the threads accepting on one listener share: its connection slots and its registry.
#[derive(Clone)]
struct Shared {
    slots: Arc<Semaphore>,
    registry: Arc<Registry>,
}

impl Shared {
    fn new(limits: &Limits) -> Shared {
        Shared {
            slots: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            registry: Registry::new(limits.max_per_ip),
        }
    }
}

/// Serves each of `listeners` (a socket, its TLS, its handler) as [`serve`] does, all of them
/// on the same `workers` threads of their own, each thread a single-threaded event loop
/// accepting from every socket, so that a connection, the tasks it spawns and the timers it
/// sets stay on the thread that accepted it (no wake-ups across threads; the kernel hands each
/// connection to whichever thread is waiting). Thread `i` is marked
/// [`crate::origin::set_worker`]`(i)` for its own origin pool. Each listener's connection
/// limits are shared by the threads. Each returned task ends when its thread has stopped
/// serving (after `stopped` and the grace period).
pub fn serve_on_threads<H, Fut>(
    listeners: Vec<(TcpListener, Option<TlsAcceptor>, H)>,
    workers: usize,
    builder: auto::Builder<TokioExecutor>,
    limits: Limits,
    stopped: watch::Receiver<bool>,
) -> std::io::Result<Vec<tokio::task::JoinHandle<()>>>
where
    H: Fn(Request<Incoming>, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<ProxyBody>, Infallible>> + Send + 'static,
{
    // Taken off this runtime's reactor; each thread registers its copies with its own.
    let mut sockets = Vec::with_capacity(listeners.len());
    for (listener, tls, handler) in listeners {
        sockets.push((listener.into_std()?, tls, handler, Shared::new(&limits)));
    }
    let mut done = Vec::with_capacity(workers);
    for i in 0..workers.max(1) {
        let mut mine = Vec::with_capacity(sockets.len());
        for (socket, tls, handler, shared) in &sockets {
            mine.push((
                socket.try_clone()?,
                tls.clone(),
                handler.clone(),
                shared.clone(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (builder, stopped) = (builder.clone(), stopped.clone());
        let (finished, finish) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("secondhit-w{i}"))
            .spawn(move || {
                crate::origin::set_worker(i);
                runtime.block_on(async move {
                    // Spawned on this thread's own loop: every listener is served here.
                    let mut serving = tokio::task::JoinSet::new();
                    for (socket, tls, handler, shared) in mine {
                        match TcpListener::from_std(socket) {
                            Ok(l) => {
                                let (builder, stopped) = (builder.clone(), stopped.clone());
                                serving.spawn(serve_with_slots(
                                    l, shared, builder, tls, limits, stopped, handler,
                                ));
                            }
                            Err(e) => tracing::error!(error = %e, "worker {i} cannot listen"),
                        }
                    }
                    while serving.join_next().await.is_some() {}
                });
                // Tasks still running (background revalidations) end with the runtime.
                drop(runtime);
                let _ = finished.send(());
            })?;
        done.push(tokio::spawn(async move {
            let _ = finish.await;
        }));
    }
    Ok(done)
}

/// A free slot; when there is none, the idlest connection is asked to make room (again every
/// little while, as the one asked may have been a connection that was closing anyway), and
/// the first slot freed is taken. `None` once `stopped`.
async fn take_slot(
    shared: &Shared,
    grace: Duration,
    stopped: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    if let Ok(p) = Arc::clone(&shared.slots).try_acquire_owned() {
        return Some(p);
    }
    let acquire = Arc::clone(&shared.slots).acquire_owned();
    tokio::pin!(acquire);
    let retry = (grace / 4).clamp(Duration::from_millis(25), Duration::from_millis(250));
    loop {
        if shared
            .registry
            .evict_idlest(tokio::time::Instant::now(), grace)
        {
            tracing::debug!("every connection slot taken; the idlest connection asked to close");
        }
        tokio::select! {
            p = &mut acquire => return p.ok(),
            _ = tokio::time::sleep(retry) => {}
            _ = stopped_signal(stopped) => return None,
        }
    }
}

async fn serve_with_slots<H, Fut>(
    listener: TcpListener,
    shared: Shared,
    builder: auto::Builder<TokioExecutor>,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    mut stopped: watch::Receiver<bool>,
    handler: H,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<ProxyBody>, Infallible>> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let grace = limits.evict_grace();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped_signal(&mut stopped) => break,
        };
        let activity = Arc::new(Activity::default());
        let now = tokio::time::Instant::now();
        let Some(registered) = shared
            .registry
            .register(peer.ip(), Arc::clone(&activity), now)
        else {
            tracing::debug!(%peer, "connections per address at their limit; closed");
            continue;
        };
        let Some(permit) = take_slot(&shared, grace, &mut stopped).await else {
            break;
        };
        registered.serving(tokio::time::Instant::now());
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let handler = handler.clone();
        let tls = tls.clone();
        // A connection that has not sent its first byte (or finished its TLS handshake) is
        // closed at once on shutdown: its graceful watcher would otherwise hold the shutdown
        // for the whole header timeout.
        let mut stop = stopped.clone();
        tokio::spawn(async move {
            // Both held until the connection ends.
            let _slot = (permit, registered);
            // Asked to make room before any request came: closed as it is.
            let evicted = activity.evict.notified();
            tokio::pin!(evicted);
            // hyper-util reads the first bytes to tell HTTP/1 from HTTP/2 with no timeout: a
            // connection that never sends a byte would hold its slot for ever.
            if let Some(wait) = limits.first_byte {
                let mut probe = [0u8; 1];
                let sent = tokio::select! {
                    r = tokio::time::timeout(wait, stream.peek(&mut probe)) => matches!(r, Ok(Ok(_))),
                    _ = &mut evicted => false,
                    _ = stopped_signal(&mut stop) => false,
                };
                if !sent {
                    tracing::debug!(%peer, "no request within the header timeout; closed");
                    return;
                }
            }
            // The handler's own future, as it is: no per-request clone of the handler and no
            // async block around its future (each layer would be copied into the connection);
            // only the counter of requests in flight around it.
            let counted = Arc::clone(&activity);
            let budget = crate::body::ConnectionBudget::new(limits.connection_buffer);
            let service = service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(budget.clone());
                Tracked::new(handler(req, peer), counted.begin())
            });
            let io = Watched::new(stream, Arc::clone(&activity));
            let ended = match tls {
                None => {
                    let conn = builder.serve_connection(TokioIo::new(io), service);
                    watched(watcher.watch(conn), &activity, evicted, limits.watch).await
                }
                Some(acceptor) => {
                    // The handshake gets the same bound as a request head.
                    let wait = limits.first_byte.unwrap_or(Duration::from_secs(10));
                    let handshake = tokio::select! {
                        r = tokio::time::timeout(wait, acceptor.accept(io)) => Some(r),
                        _ = &mut evicted => None,
                        _ = stopped_signal(&mut stop) => None,
                    };
                    match handshake {
                        Some(Ok(Ok(tls_stream))) => {
                            let conn = builder.serve_connection(TokioIo::new(tls_stream), service);
                            watched(watcher.watch(conn), &activity, evicted, limits.watch).await
                        }
                        Some(Ok(Err(e))) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            Ok(())
                        }
                        Some(Err(_)) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            Ok(())
                        }
                        None => Ok(()),
                    }
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace = ?limits.grace,
            "shutdown grace period over; closing the remaining connections"
        );
    }
}

/// Drives `conn` until it ends, or until its watchdog finds it idle or stalled, or it is
/// asked to make room (`evicted`): then it is dropped, which closes the socket and drops
/// what was buffered for it.
async fn watched<C, E>(
    conn: C,
    activity: &Activity,
    evicted: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    t: activity::Timeouts,
) -> Result<(), E>
where
    C: Future<Output = Result<(), E>>,
{
    tokio::select! {
        r = conn => r,
        v = activity::watchdog(activity, t) => {
            tracing::debug!(why = v.as_str(), "connection closed");
            Ok(())
        }
        _ = evicted => {
            tracing::debug!(why = activity::Verdict::Evicted.as_str(), "connection closed");
            Ok(())
        }
    }
}
