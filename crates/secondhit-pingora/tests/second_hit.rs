//! Second-hit admission through Pingora's cache hooks, end to end on loopback.
//!
//! Each test starts a counting origin on `127.0.0.1` (plain `std` sockets, one thread per
//! connection), a Pingora `Server` running [`SecondHitProxy`] in front of it on another
//! `127.0.0.1` port, and sends hand-written HTTP/1.1 requests. Every socket operation has a
//! timeout, and the proxy and origin are stopped at the end (or, if an assertion fails first,
//! when the harness is dropped). Run with `-- --nocapture` to see the sequence each test observes.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora_core::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch};
use secondhit_admission::admission::{Admission, Policy, Settings};
use secondhit_pingora::SecondHitProxy;
use tokio::sync::Notify;

/// Bound on every connect, read and write.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on waiting for the proxy to accept connections, and for either server to stop.
const START_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The cacheable object: 8 KiB that is not text, so bodies are compared byte for byte.
fn object_body() -> Vec<u8> {
    (0..8192u32).map(|i| (i * 7 % 251) as u8).collect()
}

const NO_STORE_BODY: &[u8] = b"personal; never store me\n";

// ---------------------------------------------------------------------------------------------
// Origin: counts the requests it serves, by request target.

struct Origin {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Origin {
    fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            let seen = seen.clone();
                            thread::spawn(move || {
                                if let Err(e) = serve_origin_connection(conn, &seen) {
                                    eprintln!("origin: connection error: {e}");
                                }
                            });
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            thread::sleep(Duration::from_millis(2))
                        }
                        Err(e) => {
                            eprintln!("origin: accept failed: {e}");
                            thread::sleep(Duration::from_millis(2));
                        }
                    }
                }
            })
        };
        Origin {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// Requests the origin has answered for `target`.
    fn count(&self, target: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|t| *t == target)
            .count()
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            join_within(thread, "origin");
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Answers one request and closes the connection.
fn serve_origin_connection(conn: TcpStream, seen: &Mutex<Vec<String>>) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(conn);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line)? == 0 {
        return Ok(()); // connected and closed without a request
    }
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
    }
    let target = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    seen.lock().unwrap().push(target.clone());

    let (status, cache_control, body) = if target.starts_with("/obj") {
        ("200 OK", "public, max-age=60", object_body())
    } else if target == "/no-store" {
        ("200 OK", "no-store", NO_STORE_BODY.to_vec())
    } else {
        ("404 Not Found", "no-store", b"not found\n".to_vec())
    };
    let mut conn = reader.into_inner();
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {}\r\nCache-Control: {cache_control}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    conn.write_all(&body)?;
    conn.flush()
}

// ---------------------------------------------------------------------------------------------
// Proxy: a Pingora server on its own thread, stopped through a custom shutdown signal.

struct StopOnNotify(Arc<Notify>);

#[async_trait]
impl ShutdownSignalWatch for StopOnNotify {
    async fn recv(&self) -> ShutdownSignal {
        self.0.notified().await;
        ShutdownSignal::FastShutdown
    }
}

struct Proxy {
    addr: SocketAddr,
    stop: Arc<Notify>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    fn start(proxy: SecondHitProxy) -> Proxy {
        // Pingora does not report the port it bound, so pick a free one and hand it over.
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let stop = Arc::new(Notify::new());
        let thread = {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut server = Server::new(None).expect("pingora server");
                server.bootstrap();
                let mut service = pingora_proxy::http_proxy_service(&server.configuration, proxy);
                service.add_tcp(&addr.to_string());
                server.add_service(service);
                server.run(RunArgs {
                    shutdown_signal: Box::new(StopOnNotify(stop)),
                });
            })
        };
        let deadline = Instant::now() + START_STOP_TIMEOUT;
        while TcpStream::connect_timeout(&addr, IO_TIMEOUT).is_err() {
            assert!(
                Instant::now() < deadline && !thread.is_finished(),
                "the proxy did not start listening on {addr} within {START_STOP_TIMEOUT:?}"
            );
            thread::sleep(Duration::from_millis(20));
        }
        Proxy {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn stop(&mut self) {
        // `notify_one` keeps a permit if the server is not waiting yet.
        self.stop.notify_one();
        if let Some(thread) = self.thread.take() {
            join_within(thread, "pingora server");
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Joins `thread`, failing the test (or, during a panic, just reporting) if it takes longer
/// than [`START_STOP_TIMEOUT`].
fn join_within(thread: JoinHandle<()>, what: &str) {
    let deadline = Instant::now() + START_STOP_TIMEOUT;
    while !thread.is_finished() {
        if Instant::now() >= deadline {
            if thread::panicking() {
                eprintln!(
                    "{what} did not stop within {START_STOP_TIMEOUT:?}; leaving it to process exit"
                );
                return;
            }
            panic!("{what} did not stop within {START_STOP_TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
    if thread.join().is_err() && !thread::panicking() {
        panic!("{what} thread panicked");
    }
}

// ---------------------------------------------------------------------------------------------
// Client: one HTTP/1.1 GET per connection.

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn http_get(proxy: SocketAddr, target: &str) -> Response {
    let mut conn = TcpStream::connect_timeout(&proxy, IO_TIMEOUT).unwrap();
    conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    conn.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    write!(
        conn,
        "GET {target} HTTP/1.1\r\nHost: cdn.test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();

    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("header line");
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let mut response = Response {
        status,
        headers,
        body: Vec::new(),
    };
    if let Some(len) = response.header("content-length") {
        let mut body = vec![0; len.parse().unwrap()];
        reader.read_exact(&mut body).unwrap();
        response.body = body;
    } else if response
        .header("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
    {
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            let size_field = line.trim_end().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_field, 16).unwrap();
            if size == 0 {
                break; // ignore trailers: the connection closes
            }
            let start = response.body.len();
            response.body.resize(start + size, 0);
            reader.read_exact(&mut response.body[start..]).unwrap();
            line.clear();
            reader.read_line(&mut line).unwrap(); // CRLF after the chunk
        }
    } else {
        reader.read_to_end(&mut response.body).unwrap();
    }
    response
}

// ---------------------------------------------------------------------------------------------
// The harness: origin + proxy + the policy, and one printed line per request.

struct Harness {
    name: &'static str,
    policy: Arc<dyn Admission>,
    // Field order: the proxy stops before the origin.
    proxy: Proxy,
    origin: Origin,
}

impl Harness {
    fn start(name: &'static str, policy: Policy) -> Harness {
        let policy: Arc<dyn Admission> = Arc::from(Settings::default().build(policy).unwrap());
        let origin = Origin::start();
        let proxy = Proxy::start(SecondHitProxy::new(origin.addr, policy.clone()));
        eprintln!(
            "[{name}] origin {} <- pingora proxy {} (policy {})",
            origin.addr,
            proxy.addr,
            policy.name()
        );
        Harness {
            name,
            policy,
            proxy,
            origin,
        }
    }

    /// GETs `target` through the proxy; returns its `x-cache` value and how many requests for
    /// `target` the origin has answered so far. Checks the status and that the body is exactly
    /// the origin's.
    fn get(&self, target: &str, origin_body: &[u8]) -> (String, usize) {
        let response = http_get(self.proxy.addr, target);
        let x_cache = response.header("x-cache").unwrap_or("(none)").to_string();
        let origin_count = self.origin.count(target);
        let stats = self.policy.stats();
        eprintln!(
            "[{}] GET {target:<10} -> {} x-cache: {x_cache:<8} body {} B {} | origin requests {origin_count} | policy admitted {} deferred {}",
            self.name,
            response.status,
            response.body.len(),
            if response.body == origin_body { "== origin" } else { "!= ORIGIN" },
            stats.admitted,
            stats.deferred,
        );
        assert_eq!(response.status, 200);
        assert!(
            response.body == origin_body,
            "body differs from the origin's"
        );
        (x_cache, origin_count)
    }

    fn admitted_deferred(&self) -> (u64, u64) {
        let stats = self.policy.stats();
        (stats.admitted, stats.deferred)
    }

    fn shutdown(mut self) {
        self.proxy.stop();
        self.origin.stop();
        eprintln!("[{}] proxy and origin stopped", self.name);
    }
}

// ---------------------------------------------------------------------------------------------

#[test]
fn second_hit_defers_then_stores_then_hits() {
    let h = Harness::start("second-hit", Policy::SecondHit);
    let body = object_body();

    // First sighting: fetched and served, but the policy defers, so nothing is stored.
    assert_eq!(h.get("/obj", &body), ("DEFERRED".to_string(), 1));
    assert_eq!(h.admitted_deferred(), (0, 1));

    // Second sighting: not in the cache (so the first was not stored); admitted and stored.
    assert_eq!(h.get("/obj", &body), ("MISS".to_string(), 2));
    assert_eq!(h.admitted_deferred(), (1, 1));

    // Third: served from the cache; neither the origin nor the policy is asked.
    assert_eq!(h.get("/obj", &body), ("HIT".to_string(), 2));
    assert_eq!(h.admitted_deferred(), (1, 1));

    // Another key is a first sighting of its own; the stored one keeps hitting.
    assert_eq!(h.get("/obj?v=2", &body), ("DEFERRED".to_string(), 1));
    assert_eq!(h.get("/obj", &body), ("HIT".to_string(), 2));
    assert_eq!(h.admitted_deferred(), (1, 2));

    h.shutdown();
}

#[test]
fn no_store_response_bypasses_the_policy_and_is_never_stored() {
    let h = Harness::start("no-store", Policy::SecondHit);
    for n in 1..=3 {
        assert_eq!(h.get("/no-store", NO_STORE_BODY), ("BYPASS".to_string(), n));
    }
    // Not cacheable by the origin's own rules: the policy was never consulted.
    assert_eq!(h.admitted_deferred(), (0, 0));
    h.shutdown();
}

#[test]
fn admit_all_stores_on_the_first_miss() {
    let h = Harness::start("admit-all", Policy::AdmitAll);
    let body = object_body();
    assert_eq!(h.get("/obj", &body), ("MISS".to_string(), 1));
    assert_eq!(h.get("/obj", &body), ("HIT".to_string(), 1));
    assert_eq!(h.admitted_deferred(), (1, 0));
    h.shutdown();
}
