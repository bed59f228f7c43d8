//! The floor under the proxy's HIT path: servers that answer every request on a keep-alive
//! connection with the same 1 KiB response and do nothing else, to tell what the load
//! generator, the kernel and the runtime cost from what secondhit costs
//! (`scripts/bench-c1000-floor.sh` runs them beside `secondhit serve` and nginx).
//!
//! ```text
//! cargo run --profile production --example hit_floor -- PORT MODE [WORKERS]
//! ```
//!
//! Every mode runs WORKERS (default 2) threads, each a single-threaded tokio runtime accepting
//! from one shared socket on 127.0.0.1:PORT, as `secondhit serve` does. MODE:
//!
//! - `conn`: a request head is counted by its blank line and answered with one write; each
//!   connection reads into an 8 KiB buffer of its own (hyper's shape).
//! - `worker`: the same, reading into one buffer per worker thread, so that an idle connection
//!   holds no buffer (nginx's shape).
//! - `hyper`: hyper's HTTP/1 server with a service that returns the response (four fields and
//!   the body), the stack `secondhit serve` is built on.
//! - `own`: the same service behind an HTTP/1 loop of the shape nginx has: the request is read
//!   into one buffer per worker thread, parsed with httparse into a fresh `http::Request` (its
//!   field values copied out), and the response head is encoded into one buffer per worker and
//!   sent with the body in one `writev`; a connection keeps nothing between requests but its
//!   socket (and the part of a head that arrived alone, if one does).
//! - `stack`: the same service behind `secondhit serve`'s own stack, configured as `serve`
//!   configures it with the default limits: `secondhit::listener::serve_on_threads` (a
//!   connection slot, the first-byte wait, the graceful-shutdown watcher) and hyper-util's
//!   automatic HTTP/1 or HTTP/2 builder with the coarse header-read timer. Against `hyper`, it
//!   tells what the stack adds; against `secondhit serve`, what the proxy's work adds.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Request, Response};
use std::cell::RefCell;
use std::convert::Infallible;
use std::io::{ErrorKind, IoSlice, Write};
use std::rc::Rc;
use std::time::SystemTime;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// The `x-cache` field name.
const X_CACHE: HeaderName = HeaderName::from_static("x-cache");

/// The body every mode sends.
const BODY: [u8; 1024] = [b'x'; 1024];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Conn,
    Worker,
    Hyper,
    Own,
    Stack,
}

thread_local! {
    /// The `worker` mode's read buffer, one per thread.
    static WORKER_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; 8192]);
    /// The `own` mode's buffers, one of each per thread: what is read, what is written.
    static OWN_BUFS: RefCell<(Vec<u8>, Vec<u8>)> =
        RefCell::new((vec![0; 8192], Vec::with_capacity(1024)));
    /// The `own` mode's `Date` value and the second it is for.
    static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Request heads ended in `bytes` (wrk sends one at a time: a head never spans two reads here).
fn heads(bytes: &[u8]) -> usize {
    bytes.windows(4).filter(|w| w == b"\r\n\r\n").count()
}

/// Answers `heads` requests; false if the connection broke.
async fn answer(s: &mut TcpStream, response: &[u8], heads: usize) -> bool {
    for _ in 0..heads {
        if s.write_all(response).await.is_err() {
            return false;
        }
    }
    true
}

async fn own_buffer(mut s: TcpStream, response: Rc<Vec<u8>>) {
    let mut buf = vec![0u8; 8192];
    loop {
        if s.readable().await.is_err() {
            return;
        }
        let n = match s.try_read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
            Err(_) => return,
        };
        if !answer(&mut s, &response, heads(&buf[..n])).await {
            return;
        }
    }
}

async fn worker_buffer(mut s: TcpStream, response: Rc<Vec<u8>>) {
    loop {
        if s.readable().await.is_err() {
            return;
        }
        // The buffer is only borrowed between the readiness and the read: never across an await.
        let read = WORKER_BUF.with(|b| {
            let mut b = b.borrow_mut();
            s.try_read(&mut b).map(|n| (n, heads(&b[..n])))
        });
        let n = match read {
            Ok((0, _)) => return,
            Ok((_, n)) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
            Err(_) => return,
        };
        if !answer(&mut s, &response, n).await {
            return;
        }
    }
}

/// The response both the `hyper` and the `own` modes build for every request.
fn respond<B>(body: B) -> Response<B> {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    // Inserted by `HeaderName`, as the proxy does (a `&str` name is parsed on every insert).
    h.insert(header::SERVER, HeaderValue::from_static("floor"));
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    h.insert(X_CACHE, HeaderValue::from_static("HIT"));
    r
}

async fn with_hyper(s: TcpStream, body: Bytes) {
    let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
        let r = respond(Full::new(body.clone()));
        async move { Ok::<_, Infallible>(r) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(s), service)
        .await;
}

/// The longest unfinished head the `own` loop keeps before it closes the connection.
const MAX_HEAD: usize = 16 * 1024;

/// What one pass of the `own` loop left to do.
enum Step {
    /// Nothing left to do until the socket is readable again: all answered and written, or
    /// nothing was readable, or no head is whole yet.
    Again,
    /// The peer closed, or sent what is not HTTP/1.
    Close,
    /// Answered, but the socket took only part: the rest, to write in the background.
    Rest(Vec<u8>),
}

/// A request as the `own` loop hands it on: parsed out of the worker's buffer into a
/// `Request` of its own, as a service needs it.
fn request(parsed: &httparse::Request<'_, '_>) -> Option<Request<()>> {
    let mut request = Request::builder()
        .method(parsed.method?)
        .uri(parsed.path?)
        .body(())
        .ok()?;
    let headers = request.headers_mut();
    headers.reserve(parsed.headers.len());
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).ok()?;
        headers.append(name, HeaderValue::from_bytes(field.value).ok()?);
    }
    Some(request)
}

/// Appends the head of `response` to `out`, with its `content-length` and this second's `date`.
fn encode(response: &Response<Bytes>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(response.status().as_str().as_bytes());
    out.push(b' ');
    let reason = response.status().canonical_reason().unwrap_or("");
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in response.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // Writing to a `Vec` cannot fail.
    let _ = write!(out, "content-length: {}\r\ndate: ", response.body().len());
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        let now = SystemTime::now();
        let secs = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |t| t.as_secs());
        if d.0 != secs {
            *d = (secs, httpdate::fmt_http_date(now));
        }
        out.extend_from_slice(d.1.as_bytes());
    });
    out.extend_from_slice(b"\r\n\r\n");
}

/// Reads what the socket has, answers every whole head in it and writes the answers, without
/// an await: the worker's buffers are borrowed for this pass only.
fn own_pass(s: &TcpStream, partial: &mut Vec<u8>, body: &Bytes) -> Step {
    OWN_BUFS.with(|bufs| {
        let (buf, out) = &mut *bufs.borrow_mut();
        let n = match s.try_read(buf) {
            Ok(0) => return Step::Close,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Again,
            Err(_) => return Step::Close,
        };
        let joined;
        let input: &[u8] = if partial.is_empty() {
            &buf[..n]
        } else {
            partial.extend_from_slice(&buf[..n]);
            joined = std::mem::take(partial);
            &joined
        };
        out.clear();
        let (mut at, mut answered) = (0, 0);
        while at < input.len() {
            let mut fields = [httparse::EMPTY_HEADER; 32];
            let mut parsed = httparse::Request::new(&mut fields);
            match parsed.parse(&input[at..]) {
                Ok(httparse::Status::Complete(len)) => {
                    let Some(_request) = request(&parsed) else {
                        return Step::Close;
                    };
                    if answered > 0 {
                        // Pipelined: the previous answer's body goes into the buffer after it.
                        out.extend_from_slice(body);
                    }
                    encode(&respond(body.clone()), out);
                    answered += 1;
                    at += len;
                }
                Ok(httparse::Status::Partial) => break,
                Err(_) => return Step::Close,
            }
        }
        if input.len() - at > MAX_HEAD {
            return Step::Close;
        }
        partial.extend_from_slice(&input[at..]);
        let parts: &[IoSlice<'_>] = match answered {
            0 => return Step::Again,
            1 => &[IoSlice::new(out), IoSlice::new(body)],
            _ => {
                out.extend_from_slice(body);
                &[IoSlice::new(out)]
            }
        };
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let sent = s.try_write_vectored(parts).unwrap_or(0);
        if sent == total {
            return Step::Again;
        }
        let mut rest = Vec::with_capacity(total - sent);
        let mut skip = sent;
        for p in parts {
            let k = skip.min(p.len());
            rest.extend_from_slice(&p[k..]);
            skip -= k;
        }
        Step::Rest(rest)
    })
}

async fn own_loop(mut s: TcpStream, body: Bytes) {
    // The part of a head that arrived without its end; empty (no allocation) otherwise.
    let mut partial = Vec::new();
    loop {
        if s.readable().await.is_err() {
            return;
        }
        match own_pass(&s, &mut partial, &body) {
            Step::Again => {}
            Step::Close => return,
            Step::Rest(rest) => {
                if s.write_all(&rest).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The `stack` mode: `serve_on_threads`, with the builder and limits `secondhit serve` uses
/// by default, and a handler that answers every request with [`respond`].
fn with_stack(port: u16, workers: usize) -> Result<(), String> {
    use secondhit::config;
    use secondhit::listener::{http_builder, serve_on_threads, Limits};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
        // `serve`'s defaults, read from the configuration's own.
        let (timeouts, sizes) = (config::Timeouts::default(), config::Limits::default());
        let builder = http_builder(&timeouts, &sizes);
        let limits = Limits::from_config(&timeouts, &sizes);
        let handler = |_req: Request<Incoming>, _peer| async {
            Ok::<_, Infallible>(respond(secondhit::body::full(Bytes::from_static(&BODY))))
        };
        // Never asked to stop: the process is killed.
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        let done = serve_on_threads(
            vec![(listener, None, handler)],
            workers,
            builder,
            limits,
            stopped,
        )
        .map_err(|e| e.to_string())?;
        for d in done {
            let _ = d.await;
        }
        Ok(())
    })
}

fn run(port: u16, mode: Mode, workers: usize) -> Result<(), String> {
    if let Mode::Stack = mode {
        return with_stack(port, workers);
    }
    // Bound by tokio for its backlog (1,024, as `secondhit serve`'s), then shared by the workers.
    let listener = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .and_then(|rt| {
            rt.block_on(TcpListener::bind(("127.0.0.1", port)))?
                .into_std()
        })
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let mut response = b"HTTP/1.1 200 OK\r\nserver: floor\r\ncontent-type: text/plain\r\n\
        cache-control: public, max-age=3600\r\nx-cache: HIT\r\ncontent-length: 1024\r\n\r\n"
        .to_vec();
    response.extend_from_slice(&BODY);
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let listener = listener.try_clone().map_err(|e| e.to_string())?;
            let response = response.clone();
            Ok(std::thread::spawn(move || worker(listener, response, mode)))
        })
        .collect::<Result<_, String>>()?;
    for t in threads {
        t.join().map_err(|_| "a worker panicked".to_string())??;
    }
    Ok(())
}

fn worker(listener: std::net::TcpListener, response: Vec<u8>, mode: Mode) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| e.to_string())?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::from_std(listener).map_err(|e| e.to_string())?;
        let response = Rc::new(response);
        let body = Bytes::from_static(&BODY);
        loop {
            let Ok((s, _)) = listener.accept().await else {
                continue;
            };
            let _ = s.set_nodelay(true);
            match mode {
                Mode::Conn => tokio::task::spawn_local(own_buffer(s, Rc::clone(&response))),
                Mode::Worker => tokio::task::spawn_local(worker_buffer(s, Rc::clone(&response))),
                Mode::Hyper => tokio::task::spawn_local(with_hyper(s, body.clone())),
                Mode::Own => tokio::task::spawn_local(own_loop(s, body.clone())),
                Mode::Stack => return Err("the stack mode has a loop of its own".into()),
            };
        }
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: hit_floor PORT conn|worker|hyper|own|stack [WORKERS]";
    let parsed = (|| {
        let port = args.first().ok_or(usage)?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("bad PORT {port:?}: {usage}"))?;
        let mode = match args.get(1).map(String::as_str) {
            Some("conn") => Mode::Conn,
            Some("worker") => Mode::Worker,
            Some("hyper") => Mode::Hyper,
            Some("own") => Mode::Own,
            Some("stack") => Mode::Stack,
            other => return Err(format!("bad MODE {other:?}: {usage}")),
        };
        let workers = match args.get(2) {
            None => 2,
            Some(w) => w
                .parse::<usize>()
                .ok()
                .filter(|&w| w > 0)
                .ok_or(format!("bad WORKERS {w:?}: {usage}"))?,
        };
        Ok::<_, String>((port, mode, workers))
    })();
    if let Err(e) = parsed.and_then(|(port, mode, workers)| run(port, mode, workers)) {
        eprintln!("hit_floor: {e}");
        std::process::exit(2);
    }
}
