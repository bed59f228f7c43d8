//! The one accept loop: every server here (the proxy's public and admin listeners, the synthetic
//! origin) accepts connections through [`serve`], which bounds the connections served at once,
//! closes connections that send nothing, completes the TLS handshake when the listener has
//! TLS, serves HTTP/1.1 and HTTP/2 (cleartext, or by ALPN over TLS) with hyper-util, and on
//! shutdown stops accepting and gives in-flight requests a grace period.

use crate::body::ProxyBody;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

pub mod timer;

/// How a listener treats its connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// A connection that sends no byte within this is closed (hyper's own header timeout
    /// only starts once the first byte is in).
    pub first_byte: Option<Duration>,
    /// On shutdown, in-flight requests get this long to finish.
    pub grace: Duration,
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
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    serve_with_slots(listener, slots, builder, tls, limits, stopped, handler).await;
}

/// Serves each of `listeners` (a socket, its TLS, its handler) as [`serve`] does, all of them
/// on the same `workers` threads of their own, each thread a single-threaded event loop
/// accepting from every socket, so that a connection, the tasks it spawns and the timers it
/// sets stay on the thread that accepted it (no wake-ups across threads; the kernel hands each
/// connection to whichever thread is waiting). Thread `i` is marked
/// [`crate::origin::set_worker`]`(i)` for its own origin pool. Each listener's connection
/// limit is shared by the threads. Each returned task ends when its thread has stopped serving
/// (after `stopped` and the grace period).
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
        let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
        sockets.push((listener.into_std()?, tls, handler, slots));
    }
    let mut done = Vec::with_capacity(workers);
    for i in 0..workers.max(1) {
        let mut mine = Vec::with_capacity(sockets.len());
        for (socket, tls, handler, slots) in &sockets {
            mine.push((
                socket.try_clone()?,
                tls.clone(),
                handler.clone(),
                Arc::clone(slots),
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
                    for (socket, tls, handler, slots) in mine {
                        match TcpListener::from_std(socket) {
                            Ok(l) => {
                                let (builder, stopped) = (builder.clone(), stopped.clone());
                                serving.spawn(serve_with_slots(
                                    l, slots, builder, tls, limits, stopped, handler,
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

async fn serve_with_slots<H, Fut>(
    listener: TcpListener,
    slots: Arc<Semaphore>,
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
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&slots).acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = stopped_signal(&mut stopped) => break,
        };
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
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let handler = handler.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            // hyper-util reads the first bytes to tell HTTP/1 from HTTP/2 with no timeout: a
            // connection that never sends a byte would hold its slot for ever.
            if let Some(wait) = limits.first_byte {
                let mut probe = [0u8; 1];
                if !matches!(
                    tokio::time::timeout(wait, stream.peek(&mut probe)).await,
                    Ok(Ok(_))
                ) {
                    tracing::debug!(%peer, "no request within the header timeout; closed");
                    drop(permit);
                    return;
                }
            }
            // The handler's own future, as it is: no per-request clone of the handler and no
            // async block around its future (each layer would be copied into the connection).
            let service = service_fn(move |req: Request<Incoming>| handler(req, peer));
            let ended = match tls {
                None => {
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(conn).await
                }
                Some(acceptor) => {
                    // The handshake gets the same bound as a request head.
                    let wait = limits.first_byte.unwrap_or(Duration::from_secs(10));
                    match tokio::time::timeout(wait, acceptor.accept(stream)).await {
                        Ok(Ok(tls_stream)) => {
                            let conn = builder.serve_connection(TokioIo::new(tls_stream), service);
                            watcher.watch(conn).await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            Ok(())
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            Ok(())
                        }
                    }
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
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
