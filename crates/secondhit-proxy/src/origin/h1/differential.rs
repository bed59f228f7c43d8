//! The lean exchange's reading of a response against httparse's and hyper's on the same bytes:
//! the `origin_h1` fuzz target's check, and a unit test's over generated responses.
//!
//! [`read_whole`] reads a response as [`Conn`](super::Conn) does (the same head parser, framing
//! and body decoder, fed a few bytes a read, then the origin's close); [`check`] reads the same
//! bytes with httparse (the head) and with hyper's HTTP/1 client (head, framing and body, over an
//! in-memory pipe) and panics where they disagree:
//! - the read does not depend on how the bytes were split across reads;
//! - a head read is the head httparse parses (status, version, every field in order);
//! - what both read gets the same status, version, fields, reason phrase and body;
//! - what hyper refuses, the lean exchange refuses too: it is never the more lenient;
//! - what the lean exchange refuses and hyper reads is one of its deliberate refusals
//!   ([`STRICTER`]): a transfer coding other than `chunked` alone, a 101, more than 16 interim
//!   responses, a malformed length on a response without a body, the size limits of chunk lines
//!   and trailers.

use super::{body_at_close, body_step, decimal, parse, BodyStep, H1Error, Scratch};
use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, StatusCode, Version};
use std::collections::BTreeMap;
use std::time::Duration;

/// The largest head read (and hyper's read buffer).
pub const MAX_HEAD: usize = 64 * 1024;

/// A response read whole by the lean exchange.
#[derive(Debug, PartialEq)]
pub struct Whole {
    /// Status code.
    pub status: StatusCode,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// The reason phrase, when not the status code's usual one.
    pub reason: Option<Bytes>,
    /// The fields, as the proxy gets them.
    pub headers: HeaderMap,
    /// The body, decoded.
    pub body: Vec<u8>,
    /// Whether the connection could carry another request (before checking the socket).
    pub keep_alive: bool,
    /// Whether the body ran to the close.
    pub close_delimited: bool,
    /// Bytes left after the response.
    pub left: usize,
}

/// Reads a response to a GET (or a HEAD) from `wire`, `step` bytes a read (at least one), then
/// the origin's close, as the lean exchange does.
pub fn read_whole(wire: &[u8], head_request: bool, step: usize) -> Result<Whole, H1Error> {
    let step = step.max(1);
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut feed = |buf: &mut BytesMut| {
        if fed == wire.len() {
            return false;
        }
        let end = (fed + step).min(wire.len());
        buf.extend_from_slice(&wire[fed..end]);
        fed = end;
        true
    };
    let mut interim = 0;
    let mut scratch = Scratch::default();
    let head = loop {
        if let Some(head) = parse(&mut buf, MAX_HEAD, head_request, &mut interim, &mut scratch)? {
            break head;
        }
        if !feed(&mut buf) {
            return Err(if wire.is_empty() {
                H1Error::Closed
            } else {
                H1Error::Malformed("closed inside the response head")
            });
        }
    };
    let close_delimited = head.close_delimited();
    let mut state = head.body;
    let mut body = Vec::new();
    loop {
        match body_step(&mut buf, &mut state, MAX_HEAD) {
            BodyStep::Ready(Some(Ok(piece))) => body.extend_from_slice(&piece),
            BodyStep::Ready(Some(Err(e))) => return Err(e),
            BodyStep::Ready(None) => break,
            BodyStep::Read(_) => {
                if !feed(&mut buf) {
                    match body_at_close(&mut state) {
                        Some(Err(e)) => return Err(e),
                        _ => break,
                    }
                }
            }
        }
    }
    Ok(Whole {
        status: head.status,
        version: head.version,
        reason: head.reason.map(|r| Bytes::copy_from_slice(r.as_bytes())),
        headers: head.headers,
        body,
        keep_alive: head.keep_alive,
        close_delimited,
        left: buf.len() + wire.len() - fed,
    })
}

/// The lean exchange's refusals of what hyper reads, each deliberate (by its error's text).
pub const STRICTER: [&str; 8] = [
    // hyper de-chunks `gzip, chunked` and passes the gzip bytes on as the content.
    "a transfer coding other than chunked",
    // hyper hands a 101 on as an upgrade no request of ours asked for.
    "101 to a request that asked for no upgrade",
    "more than 16 interim responses",
    // hyper reads no length on a HEAD answer, a 204 or a 304, and passes a broken one on.
    "Content-Length",
    "differing Content-Length values",
    // Limits of the lean exchange's chunked decoder.
    "chunk-size line too long",
    "chunk extensions over 16 KiB",
    // In the trailer section hyper lets httparse take a bare LF as a line's end.
    "chunked line not ended by CRLF",
];

/// Whether the lean exchange's refusal `e` of bytes hyper reads is one of its deliberate ones.
fn deliberate(e: &H1Error, hyper: &Read) -> bool {
    match e {
        H1Error::Malformed(m) => {
            let lengths = ["Content-Length", "differing Content-Length values"];
            // A broken length is only hyper's to pass on where it reads none.
            let bodiless = hyper.status == StatusCode::NO_CONTENT
                || hyper.status == StatusCode::NOT_MODIFIED
                || hyper.head_request;
            STRICTER.contains(m) && (!lengths.contains(m) || bodiless)
        }
        // The trailer section's limit.
        H1Error::TooLarge(_) => true,
        _ => false,
    }
}

/// A response as hyper's client read it.
#[derive(Debug)]
struct Read {
    status: StatusCode,
    version: Version,
    reason: Option<Bytes>,
    headers: HeaderMap,
    body: Vec<u8>,
    head_request: bool,
}

/// Reads `wire` as the answer to a GET (or a HEAD) with hyper's HTTP/1 client, then the close.
async fn hyper_reads(wire: &[u8], head_request: bool) -> Result<Read, String> {
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (client, mut server) = tokio::io::duplex(wire.len() + 64 * 1024);
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD)
        .handshake::<_, http_body_util::Empty<Bytes>>(hyper_util::rt::TokioIo::new(client))
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let method = if head_request {
        http::Method::HEAD
    } else {
        http::Method::GET
    };
    let request = http::Request::builder()
        .method(method)
        .uri("/")
        .header(header::HOST, "origin.test")
        .body(http_body_util::Empty::new())
        .map_err(|e| e.to_string())?;
    let origin = async {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match server.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(k) => got.extend_from_slice(&buf[..k]),
            }
        }
        let _ = server.write_all(wire).await;
        let _ = server.shutdown().await;
    };
    let (response, ()) = tokio::join!(sender.send_request(request), origin);
    let response = response.map_err(|e| e.to_string())?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    driver.abort();
    Ok(Read {
        status: parts.status,
        version: parts.version,
        reason: parts
            .extensions
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| Bytes::copy_from_slice(r.as_bytes())),
        headers: parts.headers,
        body: body.to_vec(),
        head_request,
    })
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for hyper's side");
}

/// The fields as the proxy treats them: hop-by-hop ones out (the lean exchange leaves
/// `Connection` out when it names nothing else), `Content-Length` compared apart; each name's
/// values in order (the order of different names means nothing).
fn comparable(headers: &HeaderMap) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut h = headers.clone();
    crate::http_cache::strip_hop_by_hop(&mut h);
    h.remove(header::CONTENT_LENGTH);
    let mut by_name: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for (n, v) in &h {
        by_name
            .entry(n.as_str().to_owned())
            .or_default()
            .push(v.as_bytes().to_vec());
    }
    by_name
}

/// The one length all `Content-Length` fields say, if they say one.
fn one_length(headers: &HeaderMap) -> Option<u64> {
    let mut all = headers
        .get_all(header::CONTENT_LENGTH)
        .into_iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(|e| decimal(e.trim_ascii()));
    let first = all.next()??;
    all.all(|n| n == Some(first)).then_some(first)
}

/// The final head httparse parses out of `wire` (interim ones skipped, as long as they parse):
/// its status code, version and every field. Panics on a field `http` would not take.
fn httparse_head(wire: &[u8]) -> Option<(u16, Version, HeaderMap)> {
    let mut at = 0;
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 100];
        let mut r = httparse::Response::new(&mut fields);
        let len = match r.parse(&wire[at..]) {
            Ok(httparse::Status::Complete(len)) => len,
            _ => return None,
        };
        let code = r.code?;
        if (100..200).contains(&code) && code != 101 {
            at += len;
            continue;
        }
        let mut all = HeaderMap::new();
        for f in r.headers.iter() {
            all.append(
                http::HeaderName::from_bytes(f.name.as_bytes())
                    .expect("a field name httparse read"),
                http::HeaderValue::from_bytes(f.value).expect("a value httparse read"),
            );
        }
        let version = match r.version? {
            0 => Version::HTTP_10,
            _ => Version::HTTP_11,
        };
        return Some((code, version, all));
    }
}

/// Reads `wire` (the origin's bytes, then its close) as the answer to a GET, or a HEAD, with the
/// lean exchange, httparse and hyper, and panics where they disagree (see the module's
/// description). Returns whether the lean exchange read a response, and whether hyper did.
pub fn check(wire: &[u8], head_request: bool) -> (bool, bool) {
    let ours = read_whole(wire, head_request, wire.len());
    // However the reads split the bytes, the same reading.
    for step in [1, 2, 7, 64] {
        let split = read_whole(wire, head_request, step);
        match (&ours, &split) {
            (Ok(a), Ok(b)) => assert_eq!(
                a,
                b,
                "{step} bytes a read: {:?}",
                String::from_utf8_lossy(wire)
            ),
            (Err(_), Err(_)) => {}
            _ => panic!(
                "{step} bytes a read: {ours:?} then {split:?}: {:?}",
                String::from_utf8_lossy(wire)
            ),
        }
    }
    // The head is httparse's.
    if let Ok(w) = &ours {
        let (code, version, all) = httparse_head(wire).expect("httparse parses what we read");
        assert_eq!(
            w.status.as_u16(),
            code,
            "{:?}",
            String::from_utf8_lossy(wire)
        );
        assert_eq!(w.version, version, "{:?}", String::from_utf8_lossy(wire));
        assert_eq!(
            comparable(&w.headers),
            comparable(&all),
            "{:?}",
            String::from_utf8_lossy(wire)
        );
        // One length field, whatever the repeats (beside chunked it is no length: the proxy
        // drops it).
        if w.headers.contains_key(header::CONTENT_LENGTH)
            && !w.headers.contains_key(header::TRANSFER_ENCODING)
        {
            let fields = w.headers.get_all(header::CONTENT_LENGTH).iter().count();
            assert_eq!(fields, 1, "{:?}", String::from_utf8_lossy(wire));
            assert_eq!(
                one_length(&w.headers),
                one_length(&all),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
    }
    let hyper = RUNTIME.with(|rt| {
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), hyper_reads(wire, head_request))
                .await
                .unwrap_or_else(|_| Err("hyper hung".into()))
        })
    });
    match (&ours, &hyper) {
        (Ok(w), Ok(h)) => {
            assert_eq!(w.status, h.status, "{:?}", String::from_utf8_lossy(wire));
            assert_eq!(w.version, h.version, "{:?}", String::from_utf8_lossy(wire));
            // An empty phrase is none (the status code's usual one goes out).
            let phrase = |r: &Option<Bytes>| r.clone().filter(|r| !r.is_empty());
            assert_eq!(
                phrase(&w.reason),
                phrase(&h.reason),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
            assert_eq!(
                comparable(&w.headers),
                comparable(&h.headers),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
            if !h.headers.contains_key(header::TRANSFER_ENCODING) {
                assert_eq!(
                    one_length(&w.headers),
                    one_length(&h.headers),
                    "{:?}",
                    String::from_utf8_lossy(wire)
                );
            }
            assert_eq!(w.body, h.body, "{:?}", String::from_utf8_lossy(wire));
        }
        (Ok(w), Err(e)) => panic!(
            "read {w:?} where hyper refused ({e}): {:?}",
            String::from_utf8_lossy(wire)
        ),
        (Err(e), Ok(h)) => assert!(
            deliberate(e, h),
            "refused ({e}) what hyper read as {h:?}: {:?}",
            String::from_utf8_lossy(wire)
        ),
        (Err(_), Err(_)) => {}
    }
    (ours.is_ok(), hyper.is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    /// One of `good`, or now and then (one time in eight) one of `bad`.
    fn mostly<'a>(rng: &mut StdRng, good: &[&'a str], bad: &[&'a str]) -> &'a [u8] {
        let from = if bad.is_empty() || rng.random_range(0..8) > 0 {
            good
        } else {
            bad
        };
        from[rng.random_range(0..from.len())].as_bytes()
    }

    /// A response an origin might send, well formed or broken in the ways that matter to
    /// framing: interim answers, odd status lines, repeated and malformed lengths, transfer
    /// codings, `Connection` options, chunked bodies with extensions, trailers and bad line
    /// ends, bytes after the body; then, now and then, a byte changed, added or removed.
    fn response(rng: &mut StdRng) -> Vec<u8> {
        let mut w = Vec::new();
        if rng.random_bool(0.2) {
            let interim = [
                "HTTP/1.1 100 Continue\r\n\r\n",
                "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
            ];
            let bad = ["HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n"];
            w.extend_from_slice(mostly(rng, &interim, &bad));
        }
        let version = ["HTTP/1.1 ", "HTTP/1.1 ", "HTTP/1.0 "];
        w.extend_from_slice(mostly(
            rng,
            &version,
            &["HTTP/2.0 ", "http/1.1 ", "HTTP/1.1"],
        ));
        let status = ["200", "200", "200", "204", "304", "404", "599"];
        w.extend_from_slice(mostly(rng, &status, &["199", "20", "1000", "2x0"]));
        let reason = [" OK", " OK", " ", " Fine Thanks", " \u{e9}t\u{e9}"];
        w.extend_from_slice(mostly(rng, &reason, &["", "  two", " a\x7fb"]));
        let eol: &[u8] = if rng.random_range(0..20) == 0 {
            b"\n"
        } else {
            b"\r\n"
        };
        w.extend_from_slice(eol);
        let mut chunked = false;
        let mut length = None;
        for _ in 0..rng.random_range(0..6) {
            let field: Vec<u8> = match rng.random_range(0..10) {
                0 | 1 => {
                    let good = ["5", "5", "0", "5, 5", "5,5", " 5 ", "05"];
                    let bad = ["5, 6", "+5", "", "5,", "18446744073709551616", "x"];
                    let v = mostly(rng, &good, &bad);
                    if let Some(n) =
                        decimal(v.trim_ascii()).or_else(|| v.starts_with(b"5").then_some(5))
                    {
                        length = Some(n);
                    }
                    [&b"Content-Length: "[..], v].concat()
                }
                2 | 3 => {
                    let good = ["chunked", "chunked", "Chunked", " chunked "];
                    let bad = [
                        "gzip, chunked",
                        "chunked, gzip",
                        "gzip",
                        "chunked,",
                        ", chunked",
                        "identity",
                        "chunked, chunked",
                    ];
                    let v = mostly(rng, &good, &bad);
                    chunked = true;
                    [&b"Transfer-Encoding: "[..], v].concat()
                }
                4 => {
                    let v = mostly(
                        rng,
                        &["close", "keep-alive", "x-a, close", "Upgrade"],
                        &["caf\u{e9}"],
                    );
                    [&b"Connection: "[..], v].concat()
                }
                5 => b"Keep-Alive: timeout=5".to_vec(),
                6 => b"Cache-Control: max-age=60".to_vec(),
                7 => {
                    let mut v = b"X-Any: ".to_vec();
                    for _ in 0..rng.random_range(0..12) {
                        v.extend_from_slice(mostly(
                            rng,
                            &["a", " ", "\t", "\u{e9}", ",", ":"],
                            &["\x7f", "\0"],
                        ));
                    }
                    v
                }
                8 => mostly(
                    rng,
                    &[
                        "X-Dup: 1",
                        "x-dup: 2",
                        "X-Empty:",
                        "Trailer: x",
                        "Proxy-Connection: keep-alive",
                    ],
                    &["Bad Name: 1", " X-Fold: 1"],
                )
                .to_vec(),
                _ => b"Server: origin".to_vec(),
            };
            w.extend_from_slice(&field);
            w.extend_from_slice(eol);
        }
        w.extend_from_slice(eol);
        if chunked && rng.random_bool(0.9) {
            for _ in 0..rng.random_range(0..4) {
                let n = rng.random_range(1..20);
                let data: Vec<u8> = (0..n).map(|i| b'a' + i as u8).collect();
                let size = if rng.random_bool(0.5) {
                    format!("{n:x}")
                } else {
                    format!("{n:X}")
                };
                w.extend_from_slice(mostly(rng, &["", "", "0", "00"], &[" ", "-"]));
                w.extend_from_slice(size.as_bytes());
                w.extend_from_slice(mostly(
                    rng,
                    &["", "", ";ext=1", " ;e", "\t;e=\"q\""],
                    &[" x", ";\r", ";a\nb"],
                ));
                w.extend_from_slice(mostly(rng, &["\r\n"], &["\n", "\r"]));
                w.extend_from_slice(&data);
                w.extend_from_slice(mostly(rng, &["\r\n"], &["\n", "XX", ""]));
            }
            let last = [
                "0\r\n\r\n",
                "0\r\n\r\n",
                "0\r\nX-T: t\r\n\r\n",
                "0;e\r\n\r\n",
                "0\r\nA: 1\r\nB:\r\n\r\n",
            ];
            let bad = [
                "0\r\n",
                "0\n\n",
                "0\r\nbad trailer\r\n\r\n",
                "0\r\nX: a\nY: b\r\n\r\n",
                "0\r\nX\x01: 1\r\n\r\n",
                "",
            ];
            w.extend_from_slice(mostly(rng, &last, &bad));
        } else if let Some(n) = length {
            let n = n.min(64) as usize;
            let body: Vec<u8> = (0..n + 2).map(|i| b'0' + (i % 10) as u8).collect();
            // Whole, now and then cut, or longer.
            let len = match rng.random_range(0..8) {
                0 => rng.random_range(0..=n),
                1 => n + 2,
                _ => n,
            };
            w.extend_from_slice(&body[..len]);
        } else {
            w.extend_from_slice(mostly(rng, &["", "to the close", "\x1f\u{8b}"], &[]));
        }
        if rng.random_range(0..6) == 0 {
            let stray = [
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTRAY",
                "garbage",
            ];
            w.extend_from_slice(mostly(rng, &stray, &[]));
        }
        if !w.is_empty() && rng.random_range(0..6) == 0 {
            let at = rng.random_range(0..w.len());
            match rng.random_range(0..3) {
                0 => w[at] = rng.random(),
                1 => w.insert(at, *b"\r\n :,0\x80".get(rng.random_range(0..7)).unwrap()),
                _ => {
                    w.remove(at);
                }
            }
        }
        w
    }

    #[test]
    fn the_lean_exchange_reads_responses_as_httparse_and_hyper_do() {
        let mut rng = StdRng::seed_from_u64(35);
        let (mut read, mut hyper_read) = (0, 0);
        for _ in 0..5_000 {
            let wire = response(&mut rng);
            let head_request = rng.random_range(0..8) == 0;
            let (ours, hyper) = check(&wire, head_request);
            read += usize::from(ours);
            hyper_read += usize::from(hyper);
        }
        // Not a test of refusals only, nor of good responses only.
        assert!(
            (1_500..4_500).contains(&read) && hyper_read >= read,
            "{read} read, {hyper_read} by hyper"
        );
    }

    #[test]
    fn known_responses_pass_the_differential() {
        for wire in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\nto the close",
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x\r\nhello\r\n0\r\nT: 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n",
            b"",
            b"HTTP/1.1 200",
        ] {
            check(wire, false);
            check(wire, true);
        }
    }
}
