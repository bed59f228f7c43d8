//! An origin on 127.0.0.1:0 that records the exact bytes of every request it receives and
//! answers with bytes a test scripts, so tests can assert what reached it and send responses no
//! well-behaved server library would.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Responder = dyn Fn(&str) -> Vec<u8> + Send + Sync;

/// A running raw origin.
pub struct RawOrigin {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RawOrigin {
    /// Starts an origin answering each request with `respond(request head as text)`.
    pub async fn start(respond: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static) -> RawOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let respond: Arc<Responder> = Arc::new(respond);
        let r = Arc::clone(&received);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(connection(stream, Arc::clone(&r), Arc::clone(&respond)));
            }
        });
        RawOrigin {
            addr,
            received,
            task,
        }
    }

    /// A plain cacheable 200 for every request, whose body names the request line.
    pub async fn cacheable() -> RawOrigin {
        Self::start(|head| {
            let line = head.lines().next().unwrap_or("").to_string();
            let body = format!("answer to {line}");
            format!(
                "HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        })
        .await
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far (head and body), as text (lossy).
    pub fn requests(&self) -> Vec<String> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect()
    }

    /// Every request received so far, as bytes.
    pub fn raw(&self) -> Vec<Vec<u8>> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for RawOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn connection(mut s: TcpStream, received: Arc<Mutex<Vec<Vec<u8>>>>, respond: Arc<Responder>) {
    let mut buf = Vec::new();
    loop {
        // Read one request head.
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 8192];
            match tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let lower = head.to_ascii_lowercase();
        let body_len = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let chunked = lower.contains("transfer-encoding: chunked");
        let total = loop {
            let have = buf.len() - head_end;
            if chunked {
                if let Some(i) = find(&buf[head_end..], b"0\r\n\r\n") {
                    break head_end + i + 5;
                }
            } else if have >= body_len {
                break head_end + body_len;
            }
            let mut chunk = [0u8; 8192];
            match tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        };
        let request: Vec<u8> = buf.drain(..total).collect();
        received.lock().unwrap().push(request);
        let answer = respond(&head);
        if s.write_all(&answer).await.is_err() {
            return;
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
