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

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Request, Response};
use std::cell::RefCell;
use std::convert::Infallible;
use std::io::ErrorKind;
use std::rc::Rc;
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
}

thread_local! {
    /// The `worker` mode's read buffer, one per thread.
    static WORKER_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; 8192]);
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

async fn with_hyper(s: TcpStream, body: Bytes) {
    let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
        let mut r = Response::new(Full::new(body.clone()));
        let h = r.headers_mut();
        // Inserted by `HeaderName`, as the proxy does (a `&str` name is parsed on every insert).
        h.insert(header::SERVER, HeaderValue::from_static("floor"));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=3600"),
        );
        h.insert(X_CACHE, HeaderValue::from_static("HIT"));
        async move { Ok::<_, Infallible>(r) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(s), service)
        .await;
}

fn run(port: u16, mode: Mode, workers: usize) -> Result<(), String> {
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
            };
        }
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: hit_floor PORT conn|worker|hyper [WORKERS]";
    let parsed = (|| {
        let port = args.first().ok_or(usage)?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("bad PORT {port:?}: {usage}"))?;
        let mode = match args.get(1).map(String::as_str) {
            Some("conn") => Mode::Conn,
            Some("worker") => Mode::Worker,
            Some("hyper") => Mode::Hyper,
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
