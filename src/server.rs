//! Listeners: the public one (HTTP/1.1 keep-alive and cleartext HTTP/2, connection limit,
//! header-read timeout, graceful shutdown) and the admin one (`/metrics`, `/healthz`, purge).

use crate::clock::Clock;
use crate::config::{Config, ConfigError};
use crate::origin::ProxyBody;
use crate::proxy::Proxy;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// A running server. Dropping it does not stop it; call [`Running::shutdown`].
pub struct Running {
    /// The public listener's address (useful with port 0).
    pub addr: SocketAddr,
    /// The admin listener's address.
    pub admin_addr: SocketAddr,
    /// The proxy, for tests and embedding.
    pub proxy: Arc<Proxy>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish within `timeouts.shutdown_grace`, then
    /// returns.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Binds both listeners and starts serving.
pub async fn start(config: Config, clock: Arc<dyn Clock>) -> Result<Running, ServeError> {
    let proxy = Arc::new(Proxy::new(&config, clock)?);
    let public = TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
    let admin = TcpListener::bind(config.admin_listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.admin_listen,
            source,
        })?;
    let addr = public.local_addr().map_err(|source| ServeError::Bind {
        addr: config.listen,
        source,
    })?;
    let admin_addr = admin.local_addr().map_err(|source| ServeError::Bind {
        addr: config.admin_listen,
        source,
    })?;
    let (stop, stopped) = watch::channel(false);

    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.timeouts.client_header)
        .max_buf_size(config.limits.max_header_bytes)
        .max_headers(config.limits.max_headers)
        .keep_alive(true);
    builder.http2().timer(TokioTimer::new());

    let public_task = tokio::spawn(accept_public(
        public,
        Arc::clone(&proxy),
        builder,
        Arc::new(Semaphore::new(config.limits.max_connections)),
        stopped.clone(),
        config.timeouts.shutdown_grace,
    ));
    let admin_task = tokio::spawn(accept_admin(admin, Arc::clone(&proxy), stopped));
    tracing::info!(%addr, %admin_addr, "secondhit serving");
    Ok(Running {
        addr,
        admin_addr,
        proxy,
        stop,
        tasks: vec![public_task, admin_task],
    })
}

async fn accept_public(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    builder: auto::Builder<TokioExecutor>,
    slots: Arc<Semaphore>,
    mut stopped: watch::Receiver<bool>,
    grace: std::time::Duration,
) {
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
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped_signal(&mut stopped) => break,
        };
        let _ = stream.set_nodelay(true);
        let proxy = Arc::clone(&proxy);
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let proxy = Arc::clone(&proxy);
                async move { Ok::<_, Infallible>(proxy.handle(req, peer.ip()).await) }
            });
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "shutdown grace period over; closing the remaining connections"
        );
    }
}

/// Resolves once shutdown is asked for (or the sender is gone).
async fn stopped_signal(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await.map(|_| ());
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<ProxyBody> {
    let mut r = Response::new(Full::new(body.into()).map_err(|e| match e {}).boxed());
    *r.status_mut() = status;
    r
}

fn admin_response(proxy: &Proxy, req: &Request<Incoming>) -> Response<ProxyBody> {
    let path = req.uri().path();
    let query = req.uri().query().unwrap_or("");
    let purge_method = req.method() == Method::POST || req.method().as_str() == "PURGE";
    match (path, req.method()) {
        ("/metrics", &Method::GET) => {
            let mut r = text(StatusCode::OK, proxy.render_metrics());
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        ("/healthz", &Method::GET) => text(StatusCode::OK, "ok\n"),
        ("/purge", _) if purge_method => {
            let url = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("url="))
                .map(percent_decode);
            match url {
                None => text(StatusCode::BAD_REQUEST, "give ?url=http://host/path\n"),
                Some(url) => match proxy.purge(&url) {
                    Ok(found) => text(StatusCode::OK, format!("{{\"purged\":{found}}}\n")),
                    Err(e) => text(StatusCode::BAD_REQUEST, format!("{e}\n")),
                },
            }
        }
        ("/purge-all", _) if purge_method => {
            proxy.purge_all();
            text(StatusCode::OK, "{\"purged\":\"all\"}\n")
        }
        ("/metrics" | "/healthz", _) => text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n"),
        ("/purge" | "/purge-all", _) => text(StatusCode::METHOD_NOT_ALLOWED, "use POST or PURGE\n"),
        _ => text(
            StatusCode::NOT_FOUND,
            "admin: /metrics, /healthz, POST /purge?url=URL, POST /purge-all\n",
        ),
    }
}

/// Decodes `%XX` escapes and `+` in a query value.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn accept_admin(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped_signal(&mut stopped) => break,
        };
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let proxy = Arc::clone(&proxy);
                async move { Ok::<_, Infallible>(admin_response(&proxy, &req)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn decodes_query_values() {
        assert_eq!(
            percent_decode("http%3A%2F%2Fa%2Fb%3Fc%3D1"),
            "http://a/b?c=1"
        );
        assert_eq!(percent_decode("a+b%2"), "a b%2");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
