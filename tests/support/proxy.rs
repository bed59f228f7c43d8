//! Starting the proxy on 127.0.0.1:0 with a manual clock, and a small HTTP client.
#![allow(dead_code)]

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use secondhit::clock::ManualClock;
use secondhit::config::Config;
use secondhit::server::{self, Running};

#[allow(unused_imports)]
pub use secondhit::server::Running as RunningProxy;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A proxy in front of `origin`, with `extra` TOML appended to the configuration.
pub async fn start(origin: &str, extra: &str) -> (Running, Arc<ManualClock>) {
    let toml = format!(
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\norigin = \"{origin}\"\n{extra}"
    );
    let config = Config::from_toml(&toml)
        .and_then(Config::validate)
        .unwrap_or_else(|e| panic!("{e}"));
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_000)));
    let running = server::start(config, clock.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (running, clock)
}

/// A response as the test sees it.
#[derive(Debug)]
pub struct Got {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body, or the error that cut it off.
    pub body: Result<Bytes, String>,
}

impl Got {
    pub fn x_cache(&self) -> &str {
        self.headers
            .get("x-cache")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn bytes(&self) -> &[u8] {
        self.body.as_ref().map(|b| b.as_ref()).unwrap_or(b"")
    }
}

/// A keep-alive client to the proxy.
pub struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
}

impl Http {
    pub fn new(addr: SocketAddr) -> Self {
        Http {
            client: Client::builder(TokioExecutor::new()).build_http(),
            addr,
        }
    }

    pub async fn send(&self, method: Method, path: &str, headers: &[(&str, &str)]) -> Got {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("http://{}{}", self.addr, path));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(Full::new(Bytes::new())).unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(20), self.client.request(req))
            .await
            .expect("the proxy answered within 20 s")
            .expect("a response");
        got(resp).await
    }

    pub async fn get(&self, path: &str) -> Got {
        self.send(Method::GET, path, &[]).await
    }
}

/// Sends raw bytes on a fresh connection and returns what came back until the server closed
/// it or 3 s passed.
pub async fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// A GET of `path` with `headers` on a fresh connection (`Connection: close`), read until the
/// response's head and at least `n` bytes of its body have arrived (each read within 10 s);
/// the connection is returned unread past that, with what was read.
pub async fn get_until(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    n: usize,
) -> (tokio::net::TcpStream, Vec<u8>) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The authority the other clients here send: it is part of the cache key.
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 16_384];
    while body_of(&got).is_none_or(|b| b.len() < n) {
        let k = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("bytes within 10 s")
            .unwrap();
        assert!(k > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..k]);
    }
    (s, got)
}

/// The body in what was read of a response (after its head), if the head is whole.
pub fn body_of(response: &[u8]) -> Option<&[u8]> {
    let split = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    Some(&response[split + 4..])
}

/// The rest of a response [`get_until`] began, read to the connection's end (20 s at most):
/// (its whole body, whether the connection ended cleanly).
pub async fn read_rest(mut s: tokio::net::TcpStream, got: Vec<u8>) -> (Vec<u8>, bool) {
    let mut all = got;
    let clean = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut all))
        .await
        .is_ok_and(|r| r.is_ok());
    let body = body_of(&all).expect("a response head").to_vec();
    (body, clean)
}

/// GET on the admin listener, or POST when `post`.
pub async fn admin(addr: SocketAddr, path: &str, post: bool) -> (StatusCode, String) {
    admin_with(addr, path, post, None).await
}

/// The same with `Authorization: Bearer <token>`.
pub async fn admin_with(
    addr: SocketAddr,
    path: &str,
    post: bool,
    token: Option<&str>,
) -> (StatusCode, String) {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut b = Request::builder()
        .method(if post { Method::POST } else { Method::GET })
        .uri(format!("http://{addr}{path}"));
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    let req = b.body(Full::new(Bytes::new())).unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Sends one request over a fresh cleartext HTTP/2 connection (prior knowledge), exactly as
/// built: a URI without an authority sends no `:authority`.
pub async fn h2(addr: SocketAddr, req: Request<Full<Bytes>>) -> Got {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let resp = tokio::time::timeout(Duration::from_secs(10), send.send_request(req))
        .await
        .expect("answered within 10 s")
        .expect("a response");
    got(resp).await
}

/// A response with its whole body (or the error that cut it off), read within 20 s.
async fn got(resp: http::Response<hyper::body::Incoming>) -> Got {
    let (parts, body) = resp.into_parts();
    let body = match tokio::time::timeout(Duration::from_secs(20), body.collect()).await {
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("body timed out".into()),
    };
    Got {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}
