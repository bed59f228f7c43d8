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
