//! Listeners: the public one (HTTP/1.1 keep-alive and cleartext HTTP/2, connection limits,
//! header, idle and send timeouts, graceful shutdown) and the admin one (`/metrics`,
//! `/healthz`, purge), with the same bounds.

use crate::body::{text, ProxyBody};
use crate::clock::Clock;
use crate::config::{ConfigError, ValidConfig};
use crate::listener;
use crate::proxy::{Proxy, PurgeTarget};
use crate::state;
use crate::tls::SniCertificates;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// Connections the admin listener serves at once.
const ADMIN_MAX_CONNECTIONS: usize = 64;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The proxy could not be built (the admission filter, the origins' TLS trust).
    #[error(transparent)]
    Build(#[from] crate::proxy::BuildError),
    /// The clients' TLS could not be set up: a certificate or key file, named.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The flash tier could not open (its directory, named).
    #[error(transparent)]
    Disk(#[from] crate::disk::DiskError),
    /// The state directory could not be created.
    #[error("state_dir {path}: {source}")]
    StateDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
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
    /// The cleartext listener beside a TLS `listen` (`tls.plain_listen`), if any.
    pub plain_addr: Option<SocketAddr>,
    /// Whether `addr` speaks TLS.
    pub tls: bool,
    /// The proxy, for tests and embedding.
    pub proxy: Arc<Proxy>,
    /// Reloads the configuration (what SIGHUP and `POST /reload` call).
    pub reloader: Arc<Reloader>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    state_dir: Option<std::path::PathBuf>,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish within `timeouts.shutdown_grace`, then
    /// returns.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        // Every request is answered: its access log line goes out before the process does.
        let proxy = Arc::clone(&self.proxy);
        // And its sighting is in the recording, flushed, and taken by the shadows.
        let _ = tokio::task::spawn_blocking(move || {
            proxy.flush_access_log(std::time::Duration::from_secs(5));
            proxy.lab().settle(std::time::Duration::from_secs(5))
        })
        .await;
        // The last word on the filter's state, once no request can change it any more.
        if let Some(dir) = self.state_dir {
            write_state(Arc::clone(&self.proxy), dir).await;
        }
        // What the flash tier has queued goes out before the process does.
        if let Some(d) = self.proxy.disk() {
            d.tier.close().await;
        }
    }
}

/// Where a reload gets its configuration: the file and flags `serve` started with, read and
/// validated again.
pub type ConfigSource = Arc<dyn Fn() -> Result<ValidConfig, ConfigError> + Send + Sync>;

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// `serve` was started without a configuration file.
    #[error("nothing to reload: serve was started without --config")]
    NoSource,
    /// The file could not be read, parsed or validated.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The new settings could not be built (an origin CA file).
    #[error(transparent)]
    Build(#[from] crate::proxy::BuildError),
    /// A certificate or key file.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

/// Reloads: reads the configuration again, validates it, swaps it in; one at a time.
pub struct Reloader {
    source: Option<ConfigSource>,
    proxy: Arc<Proxy>,
    certs: Option<Arc<SniCertificates>>,
    current: std::sync::Mutex<ValidConfig>,
}

impl Reloader {
    /// Reads, validates and swaps in the configuration: everything `Proxy::reload` takes, and
    /// the clients' certificates (re-read, so renewals need no restart). An invalid file changes
    /// nothing. Returns notes on what needs a restart to take effect.
    pub fn reload(&self) -> Result<Vec<String>, ReloadError> {
        let result = self.try_reload();
        self.proxy.metrics().reloaded(result.is_ok());
        match &result {
            Ok(notes) => tracing::info!(notes = ?notes, "configuration reloaded"),
            Err(e) => {
                tracing::warn!(error = %e, "configuration not reloaded; the current one stays")
            }
        }
        result
    }

    fn try_reload(&self) -> Result<Vec<String>, ReloadError> {
        let source = self.source.as_ref().ok_or(ReloadError::NoSource)?;
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let config = source()?;
        // Every file is checked before anything is swapped.
        let pairs = config.tls.pairs();
        if let Some((default, sni)) = &pairs {
            SniCertificates::load(default, sni)?;
        }
        let mut notes = self.proxy.reload(&config)?;
        match (&self.certs, &pairs) {
            (Some(certs), Some((default, sni))) => certs.reload(default, sni)?,
            (None, Some(_)) | (Some(_), None) => {
                notes.push("tls on or off: takes effect at the next restart".into())
            }
            (None, None) => {}
        }
        notes.extend(restart_notes(&current, &config));
        *current = config;
        Ok(notes)
    }
}

/// The settings a reload cannot change in place (listeners and what is fixed per connection).
fn restart_notes(old: &ValidConfig, new: &ValidConfig) -> Vec<String> {
    let mut notes = Vec::new();
    let mut check = |changed: bool, what: &str| {
        if changed {
            notes.push(format!("{what} changed: takes effect at the next restart"));
        }
    };
    // Each field by its path in the file, compared old against new.
    macro_rules! fields {
        ($($first:ident $(. $rest:ident)*),* $(,)?) => {
            $(check(
                old.$first$(.$rest)* != new.$first$(.$rest)*,
                concat!(stringify!($first) $(, ".", stringify!($rest))*),
            );)*
        };
    }
    fields!(
        listen,
        workers,
        admin_listen,
        tls.plain_listen,
        limits.max_connections,
        limits.max_header_bytes,
        limits.max_headers,
        limits.max_connections_per_ip,
        limits.max_h2_streams,
        // Each connection's budget is sized when it is accepted, by the listener as started.
        limits.stream_buffer_bytes,
        timeouts.client_header,
        timeouts.client_send,
        timeouts.client_idle,
        timeouts.shutdown_grace,
        state_dir,
        cache.disk,
        admission.disk,
        log.level,
    );
    check(old.admin_token() != new.admin_token(), "admin_token");
    notes
}

#[cfg(test)]
mod restart_tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn fields_fixed_per_listener_are_named_by_their_path() {
        let parse = |t: &str| Config::from_toml(t).and_then(Config::validate).unwrap();
        let old = parse("origin = \"http://127.0.0.1:1\"");
        let new = parse(
            "origin = \"http://127.0.0.1:1\"\n[limits]\nmax_h2_streams = 8\nstream_buffer_bytes = \"64KiB\"\n[timeouts]\nclient_idle = \"5s\"",
        );
        assert_eq!(
            restart_notes(&old, &new),
            [
                "limits.max_h2_streams changed: takes effect at the next restart",
                "limits.stream_buffer_bytes changed: takes effect at the next restart",
                "timeouts.client_idle changed: takes effect at the next restart",
            ]
        );
        assert!(restart_notes(&old, &old).is_empty());
    }
}

/// Binds both listeners and starts serving (without a configuration file to reload).
pub async fn start(config: ValidConfig, clock: Arc<dyn Clock>) -> Result<Running, ServeError> {
    start_with_source(config, clock, None).await
}

/// Binds both listeners and starts serving; `source` is what SIGHUP and `POST /reload` read.
pub async fn start_with_source(
    config: ValidConfig,
    clock: Arc<dyn Clock>,
    source: Option<ConfigSource>,
) -> Result<Running, ServeError> {
    // Certificates first: a bad file is a one-line error before anything listens.
    let certs = match config.tls.pairs() {
        Some((default, sni)) => Some(Arc::new(SniCertificates::load(&default, &sni)?)),
        None => None,
    };
    let tls = match &certs {
        Some(c) => Some(TlsAcceptor::from(crate::tls::server_config(Arc::clone(c))?)),
        None => None,
    };
    let disk = match &config.cache.disk.dir {
        Some(dir) => {
            let d = &config.cache.disk;
            let tier = crate::disk::DiskTier::open(dir, d).await?;
            tracing::info!(dir = %dir.display(), capacity = d.capacity, "flash tier open");
            Some(Arc::new(tier))
        }
        None => None,
    };
    let proxy = Arc::new(Proxy::with_disk(&config, clock, disk)?);
    proxy.start_probes();
    let reloader = Arc::new(Reloader {
        source,
        proxy: Arc::clone(&proxy),
        certs,
        current: std::sync::Mutex::new(config.clone()),
    });
    if let Some(dir) = &config.state_dir {
        std::fs::create_dir_all(dir).map_err(|source| ServeError::StateDir {
            path: dir.clone(),
            source,
        })?;
        state::load_and_log(dir, proxy.admission(), proxy.now());
    }
    let bind = |addr: SocketAddr| async move {
        let l = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        let local = l
            .local_addr()
            .map_err(|source| ServeError::Bind { addr, source })?;
        Ok::<_, ServeError>((l, local))
    };
    let (public, addr) = bind(config.listen).await?;
    let (admin, admin_addr) = bind(config.admin_listen).await?;
    let plain = match config.tls.plain_listen {
        Some(a) => Some(bind(a).await?),
        None => None,
    };
    let (stop, stopped) = watch::channel(false);

    let builder = listener::http_builder(&config.timeouts, &config.limits);
    let limits = listener::Limits::from_config(&config.timeouts, &config.limits);
    let secure = tls.is_some();
    let handler = |secure: bool| {
        let p = Arc::clone(&proxy);
        move |req, peer: SocketAddr| p.handle(req, peer.ip(), secure)
    };
    let mut listeners = vec![(public, tls, handler(secure))];
    let plain_addr = plain.as_ref().map(|(_, a)| *a);
    if let Some((plain, _)) = plain {
        listeners.push((plain, None, handler(false)));
    }
    let mut tasks = listener::serve_on_threads(
        listeners,
        config.worker_threads(),
        builder.clone(),
        limits,
        stopped.clone(),
    )
    .map_err(|source| ServeError::Bind { addr, source })?;
    let p = Arc::clone(&proxy);
    // The admin listener gets the public one's bounds (header, idle and send timeouts, the
    // idlest closed when all its slots are taken), so that connections that never finish a
    // request cannot lock it, token or not; only fewer slots and no per-address limit (the
    // operator's scripts may share one address).
    let admin_limits = listener::Limits {
        max_connections: ADMIN_MAX_CONNECTIONS,
        max_per_ip: 0,
        ..limits
    };
    let token: Option<Arc<str>> = config.admin_token().map(Arc::from);
    let r = Arc::clone(&reloader);
    tasks.push(tokio::spawn(listener::serve(
        admin,
        builder,
        None,
        admin_limits,
        stopped,
        move |req, _| {
            let p = Arc::clone(&p);
            let token = token.clone();
            let r = Arc::clone(&r);
            async move {
                if req.uri().path() != "/healthz" && !authorized(&req, token.as_deref()) {
                    let mut r = text(
                        StatusCode::UNAUTHORIZED,
                        "give Authorization: Bearer <admin_token>\n",
                    );
                    r.headers_mut().insert(
                        http::header::WWW_AUTHENTICATE,
                        http::HeaderValue::from_static("Bearer realm=\"secondhit admin\""),
                    );
                    return Ok(r);
                }
                Ok(admin_response(&p, &r, &req))
            }
        },
    )));
    if let Some(dir) = config.state_dir.clone() {
        tasks.push(tokio::spawn(snapshot_every(
            Arc::clone(&proxy),
            dir,
            config.state_snapshot_interval,
            stop.subscribe(),
        )));
    }
    tasks.push(tokio::spawn(warn_of_an_undersized_filter(
        Arc::clone(&proxy),
        std::time::Duration::from_secs(60),
        std::time::Duration::from_secs(3600),
        stop.subscribe(),
    )));
    tracing::info!(%addr, %admin_addr, tls = secure, "secondhit serving");
    let lab = proxy.lab();
    if let Some(s) = lab.shadows() {
        let names: Vec<String> = s.figures().into_iter().map(|f| f.policy).collect();
        tracing::info!(shadows = ?names, "shadow policies fed every lookup (secondhit_shadow_* in /metrics)");
    }
    if let Some(r) = lab.recorder() {
        tracing::info!(file = %r.path().display(), "recording every lookup as oracleGeneral");
    }
    Ok(Running {
        addr,
        admin_addr,
        plain_addr,
        tls: secure,
        proxy,
        reloader,
        stop,
        tasks,
        state_dir: config.state_dir.clone(),
    })
}

/// Looks every `every` for rotations on count (a generation filled before its window ended:
/// `admission.expected_items` is too small, and sightings are forgotten early) and says so in
/// the log, at most once per `quiet`, with the size that would fit.
async fn warn_of_an_undersized_filter(
    proxy: Arc<Proxy>,
    every: std::time::Duration,
    quiet: std::time::Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = proxy.admission().stats().rotations_on_count;
    let mut warned: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = listener::stopped_signal(&mut stopped) => break,
        }
        let st = proxy.admission().stats();
        if st.rotations_on_count > seen && st.keys_per_window > 0 {
            if warned.is_none_or(|t| t.elapsed() >= quiet) {
                tracing::warn!(
                    rotations_on_count = st.rotations_on_count,
                    keys_per_window = st.keys_per_window,
                    suggested_expected_items = crate::admission::Settings::expected_items_for(st.keys_per_window),
                    "the admission filter filled before its window ended: sightings are forgotten early; raise admission.expected_items"
                );
                warned = Some(tokio::time::Instant::now());
            }
            seen = st.rotations_on_count;
        }
    }
}

/// Writes the filter's state every `every` until shutdown (the final write is shutdown's).
async fn snapshot_every(
    proxy: Arc<Proxy>,
    dir: std::path::PathBuf,
    every: std::time::Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate: nothing to save yet
    loop {
        tokio::select! {
            _ = tick.tick() => write_state(Arc::clone(&proxy), dir.clone()).await,
            _ = listener::stopped_signal(&mut stopped) => break,
        }
    }
}

/// Snapshots the filter and writes it on a blocking thread (a large filter is hundreds of MB).
async fn write_state(proxy: Arc<Proxy>, dir: std::path::PathBuf) {
    let written = tokio::task::spawn_blocking(move || {
        state::snapshot_to(&dir, proxy.admission(), proxy.now()).map_err(|e| (dir, e))
    })
    .await;
    match written {
        Ok(Ok(_)) => {}
        Ok(Err((dir, e))) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot write the admission filter state")
        }
        Err(e) => tracing::warn!(error = %e, "the state writer panicked"),
    }
}

/// Whether an admin request carries the token (always, when none is configured). The
/// comparison takes the same time whatever the bytes, so the token cannot be guessed byte by
/// byte from response times.
fn authorized(req: &Request<Incoming>, token: Option<&str>) -> bool {
    let Some(token) = token else {
        return true;
    };
    let given = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    constant_time_eq(given.trim().as_bytes(), token.as_bytes())
}

/// Byte-string equality whose time depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

fn admin_response(
    proxy: &Proxy,
    reloader: &Reloader,
    req: &Request<Incoming>,
) -> Response<ProxyBody> {
    let path = req.uri().path();
    let query = req.uri().query().unwrap_or("");
    let purge_method = req.method() == Method::POST || req.method().as_str() == "PURGE";
    match (path, req.method()) {
        ("/metrics", &Method::GET) => {
            let mut r = text(StatusCode::OK, proxy.render_metrics());
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
            );
            r
        }
        ("/healthz", &Method::GET) => text(StatusCode::OK, "ok\n"),
        ("/origins", &Method::GET) => {
            let mut r = text(StatusCode::OK, format!("{:#}\n", proxy.origins_view()));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            r
        }
        ("/purge", _) if purge_method => {
            let param = |name: &str| {
                query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .map(percent_decode)
            };
            let soft = param("soft").is_some_and(|v| v == "1" || v == "true");
            let what = match (param("url"), param("prefix"), param("tag")) {
                (Some(u), None, None) => PurgeTarget::Url(u),
                (None, Some(p), None) => PurgeTarget::Prefix(p),
                (None, None, Some(t)) => PurgeTarget::Tag(t),
                _ => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        "give one of ?url=http://host/path, ?prefix=http://host/path or ?tag=T (and &soft=1 to mark stale instead of removing)\n",
                    )
                }
            };
            let soft_field = if soft { ",\"soft\":true" } else { "" };
            match proxy.purge_target(&what, soft) {
                // A URL purge answers whether anything was there; the others, how many objects.
                Ok(n) if matches!(what, PurgeTarget::Url(_)) => text(
                    StatusCode::OK,
                    format!("{{\"purged\":{}{soft_field}}}\n", n > 0),
                ),
                Ok(n) => text(StatusCode::OK, format!("{{\"purged\":{n}{soft_field}}}\n")),
                Err(e) => text(StatusCode::BAD_REQUEST, format!("{e}\n")),
            }
        }
        ("/purge-all", _) if purge_method => {
            proxy.purge_all();
            text(StatusCode::OK, "{\"purged\":\"all\"}\n")
        }
        ("/reload", &Method::POST) => match reloader.reload() {
            Ok(notes) => text(
                StatusCode::OK,
                format!(
                    "{}\n",
                    serde_json::json!({ "reloaded": true, "notes": notes })
                ),
            ),
            Err(e) => text(StatusCode::BAD_REQUEST, format!("{e}\n")),
        },
        ("/reload", _) => text(StatusCode::METHOD_NOT_ALLOWED, "use POST\n"),
        ("/metrics" | "/healthz" | "/origins", _) => {
            text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n")
        }
        ("/purge" | "/purge-all", _) => text(StatusCode::METHOD_NOT_ALLOWED, "use POST or PURGE\n"),
        _ => text(
            StatusCode::NOT_FOUND,
            "admin: /metrics, /healthz, /origins, POST /purge?url=URL|prefix=URL|tag=T[&soft=1], POST /purge-all, POST /reload\n",
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

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn tokens_compare_on_every_byte() {
        use super::constant_time_eq;
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

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
