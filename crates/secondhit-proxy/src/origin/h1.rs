//! A lean HTTP/1.1 exchange for origin requests without a body (GET and HEAD, the whole of a
//! CDN's miss traffic): the request head written in one buffer, the response head parsed with
//! httparse and the body framed (Content-Length, chunked, or to the close) as it is read, all
//! in the task of the request that asked for it.
//!
//! hyper's client, which the pool still uses for requests with a body, drives each connection
//! from its own task and reaches it through channels: per request an mpsc send and a oneshot
//! for the head, another channel for the body, and the task's wake-ups in between: most of
//! what a miss cost beyond a HIT in the benchmarks. A request without a body needs none of it:
//! nothing goes up while the response comes down, so the request's own task can write the head
//! and then read the answer.
//!
//! The framing follows RFC 9112 §6.3: no body for HEAD, 1xx, 204 and 304; `Transfer-Encoding`
//! wins over `Content-Length` (then the connection is not reused); differing, empty or malformed
//! `Content-Length` values are an error, never a guess, and equal ones (`5, 5`, or the field
//! twice) are one value, kept as one field (RFC 9110 §8.6); `Transfer-Encoding` in an HTTP/1.0
//! response is an error (as hyper has it). The only transfer coding read is `chunked`, alone:
//! any other (`gzip, chunked`, `gzip`) is an error rather than bytes served as if they were the
//! content, which is stricter than RFC 9112 §6.3 (a body to the close) and hyper. A body that
//! runs to the close is read, but [`Head::close_delimited`] says so: its end cannot be told from
//! a cut, and the proxy never stores it. Interim (1xx) responses are skipped, up to 16 of them; a
//! 101 is refused, as no request of ours asks to upgrade. Chunk lines allow only spaces and tabs
//! before their extensions, which may add up to 16 KiB a body. A reason phrase other than the
//! status code's usual one is kept (hyper's [`ReasonPhrase`] extension), so clients see what the
//! origin said.
//!
//! A connection carries another request only when it is provably at a message boundary: its
//! response was read whole by its framing, nothing was left in the read buffer, and nothing is
//! readable on the socket when it is lent again ([`Conn::usable`], which asks the socket itself:
//! tokio's readiness flags lag behind what arrived since its event loop last polled the OS).
//! Bytes no request asked for (a body after a HEAD answer, garbage after a 204) would otherwise
//! be read as the answer to the next request, for another key. A HEAD answer, and a 204 or 304
//! that announces a body (a length other than 0, a transfer coding), never leave their
//! connection reusable: an origin that sends the body anyway may send it late, after the next
//! request went out, when no check can tell its bytes from that request's answer.

use crate::body::ProxyBody;
use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Version};
use hyper::ext::ReasonPhrase;
use hyper_rustls::MaybeHttpsStream;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// What the connector gives: TCP, or TLS over it for `https://` origins.
pub type Stream = TokioIo<MaybeHttpsStream<TokioIo<TcpStream>>>;

/// Header fields a response head may have (hyper's limit too).
const MAX_HEADERS: usize = 100;
/// Bytes asked of the socket per read, unless a body's known remainder is smaller.
const READ_SIZE: usize = 8 * 1024;
/// The longest chunk-size line (size and extensions) accepted.
const MAX_CHUNK_LINE: usize = 4 * 1024;
/// Chunk-size lines' bytes accepted beyond their sizes, all chunks of a body together.
const MAX_CHUNK_EXTENSIONS: usize = 16 * 1024;
/// The most bytes of trailer section read (and dropped), whatever `max_origin_header_bytes`
/// says: half of hyper's limit, so that none is read that hyper's client would refuse.
const MAX_TRAILER_BYTES: usize = 8 * 1024;
/// Interim (1xx) responses accepted before the final one.
const MAX_INTERIM: usize = 16;

/// Why an exchange or its body failed.
#[derive(Debug, thiserror::Error)]
pub enum H1Error {
    /// The origin closed the connection without a byte of response.
    #[error("origin closed the connection before answering")]
    Closed,
    /// Reading or writing the connection failed.
    #[error("origin connection: {0}")]
    Io(#[from] io::Error),
    /// The response head did not fit in `limits.max_origin_header_bytes`.
    #[error("origin response head over {0} bytes")]
    TooLarge(usize),
    /// The response head had more than 100 fields.
    #[error("origin response head with more than {MAX_HEADERS} fields")]
    TooManyFields,
    /// The response broke HTTP/1.1's syntax or framing.
    #[error("malformed origin response: {0}")]
    Malformed(&'static str),
    /// The connection closed before the body's `Content-Length` was read.
    #[error("origin closed the connection {0} bytes before the end of the body")]
    Short(u64),
    /// The connection closed inside a chunked body.
    #[error("origin closed the connection inside a chunked body")]
    Truncated,
    /// Bytes arrived on a new connection before the request was written: they answer no
    /// request of ours.
    #[error("origin sent bytes before the request was written")]
    Unsolicited,
}

/// A response head, with how its body is framed and whether the connection may carry another
/// request after it.
pub struct Head {
    /// Status code.
    pub status: StatusCode,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// The reason phrase, when it is not the status code's usual one.
    pub reason: Option<ReasonPhrase>,
    /// The header fields, values sharing one buffer with the head's bytes.
    pub headers: HeaderMap,
    /// How the body is read.
    pub body: BodyState,
    /// Whether the connection may be reused once the body is read.
    pub keep_alive: bool,
}

impl Head {
    /// Whether the body runs to the close of the connection (no length, not chunked): whole or
    /// cut short by the origin, it ends the same way, so it can never be shown complete.
    pub fn close_delimited(&self) -> bool {
        matches!(self.body, BodyState::Close)
    }
}

/// Where a response body stands.
#[derive(Debug)]
pub enum BodyState {
    /// This many bytes still to come (`Content-Length`).
    Length(u64),
    /// A chunked body, decoded as it arrives.
    Chunked(Chunked),
    /// To the close of the connection.
    Close,
    /// All read (or none to read).
    Done,
}

impl BodyState {
    /// Whether nothing more is to come.
    pub fn is_done(&self) -> bool {
        matches!(self, BodyState::Done | BodyState::Length(0))
    }
}

/// One connection to an origin, idle or carrying one exchange.
pub struct Conn {
    io: Stream,
    /// Bytes read and not yet consumed.
    buf: BytesMut,
    /// The request head being written, kept for the next one.
    out: Vec<u8>,
    /// What parsing the last head left for the next one.
    scratch: Scratch,
    /// No request has been written on it yet.
    fresh: bool,
}

/// What parsing a response head leaves for the next one on the same connection.
#[derive(Default)]
struct Scratch {
    /// Where the head's fields lie (a table on the stack would be zeroed for every response,
    /// however few fields it has).
    spans: Vec<Span>,
    /// The head's field names by position, as received and as parsed. An origin sends the
    /// same fields in the same order response after response, and a name found here is not
    /// parsed again (`HeaderName::from_bytes` checks every byte of every name, every miss).
    names: Vec<Option<(Vec<u8>, HeaderName)>>,
}

/// Field names remembered by position, for the first this many fields.
const MEMO_FIELDS: usize = 32;

/// The field name `raw` at position `i` of a head: the one remembered there if it was received
/// byte for byte the same, else parsed (and remembered).
fn field_name(
    names: &mut Vec<Option<(Vec<u8>, HeaderName)>>,
    i: usize,
    raw: &[u8],
) -> Result<HeaderName, H1Error> {
    if let Some(Some((seen, name))) = names.get(i) {
        if seen.as_slice() == raw {
            return Ok(name.clone());
        }
    }
    let name = HeaderName::from_bytes(raw).map_err(|_| H1Error::Malformed("header field name"))?;
    if i < MEMO_FIELDS {
        if names.len() <= i {
            names.resize_with(i + 1, || None);
        }
        match &mut names[i] {
            Some((seen, memo)) => {
                seen.clear();
                seen.extend_from_slice(raw);
                *memo = name.clone();
            }
            slot => *slot = Some((raw.to_vec(), name.clone())),
        }
    }
    Ok(name)
}

/// Where a field's name and value lie in a response head: name start and end, value start and
/// end.
type Span = [usize; 4];

impl Conn {
    /// A connection over `io`, fresh from the connector.
    pub fn new(io: Stream) -> Conn {
        Conn {
            io,
            buf: BytesMut::new(),
            out: Vec::with_capacity(512),
            scratch: Scratch {
                spans: Vec::with_capacity(16),
                names: Vec::new(),
            },
            fresh: true,
        }
    }

    /// Whether an idle connection can carry a request: no stray bytes arrived and the origin
    /// has not closed it (checked without waiting). Bytes here answer no request (a body after
    /// a HEAD answer, garbage after a 204, anything on an idle connection): a connection that
    /// has them is dropped, never read for the next request's answer.
    pub fn usable(&mut self) -> bool {
        self.nothing_buffered() && self.socket_quiet()
    }

    /// Nothing in the read buffer, and nothing readable through the stream (TLS included: its
    /// decrypted bytes, its close) as far as tokio knows, checked without waiting.
    fn nothing_buffered(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut probe = [0u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        // Pending: nothing to read and not closed. Anything else (a close, bytes no request
        // asked for, an error) makes it unfit.
        Pin::new(&mut self.io)
            .poll_read(&mut cx, &mut probe)
            .is_pending()
    }

    /// The TCP socket under the stream.
    fn tcp(&self) -> &TcpStream {
        match self.io.inner() {
            MaybeHttpsStream::Http(tcp) => tcp.inner(),
            MaybeHttpsStream::Https(tls) => tls.inner().get_ref().0.inner().inner(),
        }
    }

    /// Nothing readable on the socket itself, and not closed: a non-blocking `MSG_PEEK`.
    /// tokio's readiness, which [`nothing_buffered`](Conn::nothing_buffered) relies on, is
    /// updated only when its event loop polls the OS, and was cleared by the last read that
    /// found the socket drained: bytes that came since (a HEAD answer's body written a moment
    /// after its head) are in the socket and unknown to it. Over TLS, any byte makes the
    /// connection unfit, even a record that would decrypt to nothing (a late session ticket):
    /// a new connection is the price of not knowing.
    fn socket_quiet(&self) -> bool {
        let mut byte = [MaybeUninit::<u8>::uninit()];
        match socket2::SockRef::from(self.tcp()).peek(&mut byte) {
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
            // A byte, or the origin's close.
            Ok(_) => false,
        }
    }

    /// Whether the connection has no bytes beyond the last response (an origin that sent more
    /// than it framed cannot be trusted with another request).
    pub fn is_clean(&self) -> bool {
        self.buf.is_empty()
    }

    /// Writes `request`'s head (origin-form, with its `Host`; a bodyless request, so nothing
    /// follows it) and reads the response head, skipping interim responses. On failure, also
    /// says whether the origin sent nothing at all, so that a request on a reused connection the
    /// origin had closed can be sent again.
    pub async fn exchange<R: LeanRequest + ?Sized>(
        &mut self,
        request: &R,
        max_head: usize,
    ) -> Result<Head, (H1Error, bool)> {
        if std::mem::take(&mut self.fresh) {
            // An origin that speaks first answers no request of ours. (A reused connection was
            // checked the same way as it was lent: `usable`.) Over TLS the handshake's last
            // records (session tickets) may still be on the socket: only what decrypts counts.
            let tls = matches!(self.io.inner(), MaybeHttpsStream::Https(_));
            if !self.nothing_buffered() || (!tls && !self.socket_quiet()) {
                return Err((H1Error::Unsolicited, false));
            }
        }
        self.out.clear();
        request.write_head(&mut self.out);
        let sent = async {
            self.io.write_all(&self.out).await?;
            self.io.flush().await
        };
        sent.await.map_err(|e| (H1Error::Io(e), true))?;
        let head_request = request.is_head();
        let mut received = false;
        let mut interim = 0;
        loop {
            match parse(
                &mut self.buf,
                max_head,
                head_request,
                &mut interim,
                &mut self.scratch,
            ) {
                Ok(Some(head)) => return Ok(head),
                Ok(None) => {}
                Err(e) => return Err((e, false)),
            }
            if self.buf.capacity() - self.buf.len() < READ_SIZE / 2 {
                self.buf.reserve(READ_SIZE);
            }
            match self.io.read_buf(&mut self.buf).await {
                Ok(0) if !received => return Err((H1Error::Closed, true)),
                Ok(0) => {
                    return Err((H1Error::Malformed("closed inside the response head"), false))
                }
                Ok(_) => received = true,
                Err(e) => return Err((H1Error::Io(e), !received)),
            }
        }
    }

    /// The next piece of the body `state` describes, the read buffer growing by at most
    /// `max_read` bytes at a time; `None` once it is whole.
    pub fn poll_body(
        &mut self,
        cx: &mut Context<'_>,
        state: &mut BodyState,
        max_read: usize,
    ) -> Poll<Option<Result<Bytes, H1Error>>> {
        loop {
            let want = match body_step(&mut self.buf, state, max_read) {
                BodyStep::Ready(piece) => return Poll::Ready(piece),
                BodyStep::Read(want) => want,
            };
            if self.buf.capacity() - self.buf.len() < want.min(READ_SIZE) {
                self.buf.reserve(want.max(READ_SIZE / 8));
            }
            let read = pin!(self.io.read_buf(&mut self.buf)).poll(cx);
            match read {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(H1Error::Io(e)))),
                Poll::Ready(Ok(0)) => return Poll::Ready(body_at_close(state)),
                Poll::Ready(Ok(_)) => {}
            }
        }
    }
}

/// What the read buffer alone gives of a body.
enum BodyStep {
    /// A piece, an error, or the end (`None`).
    Ready(Option<Result<Bytes, H1Error>>),
    /// Nothing until more is read: about this many bytes are wanted.
    Read(usize),
}

/// The next piece of the body `state` describes out of `buf`, or how much to read for one.
fn body_step(buf: &mut BytesMut, state: &mut BodyState, max_read: usize) -> BodyStep {
    let want = match state {
        BodyState::Done | BodyState::Length(0) => {
            *state = BodyState::Done;
            return BodyStep::Ready(None);
        }
        BodyState::Length(n) => {
            if !buf.is_empty() {
                let k = (*n).min(buf.len() as u64);
                *n -= k;
                // k <= buf.len(), a usize.
                return BodyStep::Ready(Some(Ok(buf.split_to(k as usize).freeze())));
            }
            usize::try_from(*n).unwrap_or(usize::MAX).min(max_read)
        }
        BodyState::Chunked(c) => match c.decode(buf, max_read) {
            Err(e) => return BodyStep::Ready(Some(Err(e))),
            Ok(Step::Data(data)) => return BodyStep::Ready(Some(Ok(data))),
            Ok(Step::Done) => {
                *state = BodyState::Done;
                return BodyStep::Ready(None);
            }
            Ok(Step::More) => READ_SIZE,
        },
        BodyState::Close => {
            if !buf.is_empty() {
                return BodyStep::Ready(Some(Ok(buf.split().freeze())));
            }
            max_read.min(READ_SIZE * 2)
        }
    };
    BodyStep::Read(want)
}

/// What the origin's close means for a body `state` describes, the read buffer drained: the
/// end of one that runs to the close, else an error.
fn body_at_close(state: &mut BodyState) -> Option<Result<Bytes, H1Error>> {
    let e = match state {
        BodyState::Length(n) => H1Error::Short(*n),
        BodyState::Chunked(_) => H1Error::Truncated,
        _ => {
            *state = BodyState::Done;
            return None;
        }
    };
    Some(Err(e))
}

/// `request`'s head as HTTP/1.1 puts it on the wire.
/// A bodyless request as the lean exchange sends it: a whole [`Request`], or a description the
/// proxy writes without building one (`proxy::fetch::OriginHead`).
pub trait LeanRequest: Sync {
    /// Appends the request head (request line, fields, the empty line) to `out`.
    fn write_head(&self, out: &mut Vec<u8>);
    /// Whether the method is HEAD (the response then has no body, whatever it announces).
    fn is_head(&self) -> bool;
}

impl LeanRequest for Request<ProxyBody> {
    fn write_head(&self, out: &mut Vec<u8>) {
        let target = self.uri().path_and_query().map_or("/", |pq| pq.as_str());
        write_request_line(self.method(), target, out);
        for (name, value) in self.headers() {
            write_field(name.as_str().as_bytes(), value.as_bytes(), out);
        }
        out.extend_from_slice(b"\r\n");
    }

    fn is_head(&self) -> bool {
        self.method() == Method::HEAD
    }
}

/// Appends `METHOD target HTTP/1.1\r\n`.
pub fn write_request_line(method: &Method, target: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// Appends `name: value\r\n`.
pub fn write_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Parses a response head off the front of `buf`, skipping interim responses (counted in
/// `interim`); `None` when more bytes are needed.
fn parse(
    buf: &mut BytesMut,
    max_head: usize,
    head_request: bool,
    interim: &mut usize,
    scratch: &mut Scratch,
) -> Result<Option<Head>, H1Error> {
    let Scratch { spans, names } = scratch;
    loop {
        if buf.is_empty() {
            return Ok(None);
        }
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut response,
            buf,
            &mut fields,
        );
        let Some(len) = head_len(parsed, buf.len(), max_head)? else {
            return Ok(None);
        };
        if len > max_head {
            return Err(H1Error::TooLarge(max_head));
        }
        let code = response.code.unwrap_or(0);
        let status = StatusCode::from_u16(code).map_err(|_| H1Error::Malformed("status code"))?;
        if status.is_informational() {
            if status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(H1Error::Malformed(
                    "101 to a request that asked for no upgrade",
                ));
            }
            *interim += 1;
            if *interim > MAX_INTERIM {
                return Err(H1Error::Malformed("more than 16 interim responses"));
            }
            let _ = buf.split_to(len);
            continue;
        }
        let reason = match response.reason {
            Some(r) if Some(r) != status.canonical_reason() && !r.is_empty() => {
                ReasonPhrase::try_from(r.as_bytes()).ok()
            }
            _ => None,
        };
        let version = if response.version == Some(0) {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        let base = buf.as_ptr() as usize;
        let offset = |s: &[u8]| s.as_ptr() as usize - base;
        // Where each field's name and value lie in the head, to slice them out of it once it
        // is split off the read buffer.
        spans.clear();
        spans.extend(response.headers.iter().map(|h| {
            let (name, value) = (h.name.as_bytes(), h.value);
            [
                offset(name),
                offset(name) + name.len(),
                offset(value),
                offset(value) + value.len(),
            ]
        }));
        let head = buf.split_to(len).freeze();
        let (mut headers, connection) = head_fields(&head, spans, names)?;
        let (body, keep_alive) = framing(status, version, connection, &mut headers, head_request)?;
        return Ok(Some(Head {
            status,
            version,
            reason,
            headers,
            body,
            keep_alive,
        }));
    }
}

/// The fields of a response `head` split off the read buffer, at `spans`, as a map without the
/// hop-by-hop fields when `Connection` names nothing else; and what `Connection` says.
fn head_fields(
    head: &Bytes,
    spans: &[Span],
    names: &mut Vec<Option<(Vec<u8>, HeaderName)>>,
) -> Result<(HeaderMap, ConnectionOptions), H1Error> {
    let mut headers = HeaderMap::with_capacity(spans.len());
    // `Connection` (and the older `Keep-Alive` and `Proxy-Connection`) are hop-by-hop: the
    // proxy removes them before anything else reads the head. When `Connection` names
    // nothing but `close` and `keep-alive` (nearly every response), they are left out here,
    // which spares the map an insertion and later a search and a removal of each, on every
    // miss; otherwise they go in, and are removed with the fields `Connection` names.
    let mut connection = ConnectionOptions::default();
    let mut set_aside = 0u128; // by field index (MAX_HEADERS < 128)
    for (i, &[n0, n1, v0, v1]) in spans.iter().enumerate() {
        // Told apart by length first: few other fields have 10 or 16 bytes.
        let raw = &head[n0..n1];
        let hop_by_hop = match raw.len() {
            10 if raw.eq_ignore_ascii_case(b"connection") => {
                connection.read(&head[v0..v1]);
                true
            }
            10 => raw.eq_ignore_ascii_case(b"keep-alive"),
            16 => raw.eq_ignore_ascii_case(b"proxy-connection"),
            _ => false,
        };
        if hop_by_hop {
            set_aside |= 1 << i;
            continue;
        }
        let name = field_name(names, i, raw)?;
        // httparse (default `ParserConfig`: no obs-fold, no skipping of invalid lines) ends
        // a value at the first byte outside HTAB and 0x20..=0xFF but DEL and fails the parse
        // unless that byte starts the line's end, so every value it returns is made of
        // valid value bytes (`values_httparse_returns_are_valid_values` checks all 256).
        let value = prevalidated_value(head.slice(v0..v1))
            .ok_or(H1Error::Malformed("header field value"))?;
        headers.append(name, value);
    }
    if connection.names_others && set_aside != 0 {
        // Fields named in `Connection`: put the set-aside fields back, for
        // `http_cache::strip_hop_by_hop` to remove them and what they name.
        for (i, &[n0, n1, v0, v1]) in spans.iter().enumerate() {
            if set_aside & (1 << i) != 0 {
                if let (Ok(name), Some(value)) = (
                    HeaderName::from_bytes(&head[n0..n1]),
                    prevalidated_value(head.slice(v0..v1)),
                ) {
                    headers.append(name, value);
                }
            }
        }
    }
    Ok((headers, connection))
}

/// The length of a response head httparse `parsed` off a buffer of `buffered` bytes; `None`
/// when more bytes are needed, an error when they would be more than `max_head`.
fn head_len(
    parsed: Result<httparse::Status<usize>, httparse::Error>,
    buffered: usize,
    max_head: usize,
) -> Result<Option<usize>, H1Error> {
    match parsed {
        Ok(httparse::Status::Complete(len)) => Ok(Some(len)),
        Ok(httparse::Status::Partial) if buffered >= max_head => Err(H1Error::TooLarge(max_head)),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(H1Error::TooManyFields),
        Err(httparse::Error::Status) => Err(H1Error::Malformed("status line")),
        Err(httparse::Error::Version) => Err(H1Error::Malformed("HTTP version")),
        Err(_) => Err(H1Error::Malformed("header field")),
    }
}

/// What a response's `Connection` fields say, all of them together.
#[derive(Clone, Copy, Debug, Default)]
struct ConnectionOptions {
    close: bool,
    keep_alive: bool,
    /// An option other than `close` and `keep-alive`: a field to remove too.
    names_others: bool,
}

impl ConnectionOptions {
    /// Takes the options of one `Connection` field value.
    fn read(&mut self, value: &[u8]) {
        let options = value
            .split(|&b| b == b',')
            .map(<[u8]>::trim_ascii)
            .filter(|t| !t.is_empty());
        for option in options {
            if option.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if option.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else {
                self.names_others = true;
            }
        }
    }
}

/// How a response's body is framed (RFC 9112 §6.3) and whether its connection may be reused.
/// A `Content-Length` repeated with one value is left as one field.
fn framing(
    status: StatusCode,
    version: Version,
    connection: ConnectionOptions,
    headers: &mut HeaderMap,
    head_request: bool,
) -> Result<(BodyState, bool), H1Error> {
    // `close` wins wherever it is; else `keep-alive` keeps an HTTP/1.0 connection.
    let mut keep_alive =
        !connection.close && (connection.keep_alive || version == Version::HTTP_11);
    let transfer_encoding = headers.contains_key(header::TRANSFER_ENCODING);
    if head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        // No body follows, whatever the head announces; its length still goes to the client
        // (a HEAD's, a 304's), so it must be one.
        let length = content_length(headers)?;
        // An answer that announces a body it must not send (every HEAD answer may: it says
        // how long a GET's would be) leaves its connection unfit: an origin that sends the body
        // anyway can send it after the next request went out, as if it were its answer.
        let announces_body = head_request || transfer_encoding || length.is_some_and(|n| n > 0);
        return Ok((BodyState::Done, keep_alive && !announces_body));
    }
    if transfer_encoding {
        if version == Version::HTTP_10 {
            return Err(H1Error::Malformed(
                "Transfer-Encoding in an HTTP/1.0 response",
            ));
        }
        // A length beside it is wrong or an attack: the connection is not trusted after it.
        if headers.contains_key(header::CONTENT_LENGTH) {
            keep_alive = false;
        }
        // Only `chunked`, alone, is read: another coding (`gzip, chunked`) would reach the
        // client and the cache as if it were the content.
        let mut codings = headers
            .get_all(header::TRANSFER_ENCODING)
            .into_iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .map(<[u8]>::trim_ascii);
        let chunked_alone = codings
            .next()
            .is_some_and(|c| c.eq_ignore_ascii_case(b"chunked"))
            && codings.next().is_none();
        if !chunked_alone {
            return Err(H1Error::Malformed("a transfer coding other than chunked"));
        }
        return Ok((BodyState::Chunked(Chunked::default()), keep_alive));
    }
    Ok(match content_length(headers)? {
        Some(n) => (BodyState::Length(n), keep_alive),
        None => (BodyState::Close, false),
    })
}

/// The lean exchange's framing rules, applied to a response head hyper's client read (a
/// request with a body, or an origin reached with `tls.origin_http2`): a transfer coding other
/// than `chunked` alone is refused (hyper would de-chunk `gzip, chunked` and hand on gzip bytes as
/// the content), and so is a malformed length on a response without a body (hyper reads none
/// there); equal repeated lengths are left as one field. Returns whether the body runs to the
/// close (HTTP/1 only: an HTTP/2 stream ends by its own framing).
pub fn check_head(
    status: StatusCode,
    version: Version,
    headers: &mut HeaderMap,
    head_request: bool,
) -> Result<bool, H1Error> {
    if status.is_informational() {
        return Ok(false);
    }
    let connection = ConnectionOptions::default();
    let (body, _) = framing(status, version, connection, headers, head_request)?;
    Ok(version < Version::HTTP_2 && matches!(body, BodyState::Close))
}

/// The one value of every `Content-Length` field and list element, if there is any: equal
/// repeats (`5, 5`, or the field twice) are one value (RFC 9110 §8.6), left as one field so that
/// the client gets one; empty, malformed or differing values are an error.
fn content_length(headers: &mut HeaderMap) -> Result<Option<u64>, H1Error> {
    let mut length = None;
    let mut elements = 0usize;
    // Every element of every field, empty ones too: an empty length is malformed, not absent.
    let all = headers
        .get_all(header::CONTENT_LENGTH)
        .into_iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii);
    for value in all {
        let n = decimal(value).ok_or(H1Error::Malformed("Content-Length"))?;
        if length.is_some_and(|l| l != n) {
            return Err(H1Error::Malformed("differing Content-Length values"));
        }
        length = Some(n);
        elements += 1;
    }
    if let (Some(n), 2..) = (length, elements) {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    Ok(length)
}

/// A header value from bytes already known to be valid value bytes (HTAB, 0x20..=0xFF but DEL):
/// not checked a second time when they are ASCII (every value of most responses), checked as
/// usual otherwise. A second check costs a pass over every value of every response.
fn prevalidated_value(bytes: Bytes) -> Option<HeaderValue> {
    if bytes.is_ascii() {
        // SAFETY: `from_maybe_shared_unchecked` requires valid UTF-8 (its documented condition;
        // debug builds of `http` check the value bytes instead and panic): ASCII is UTF-8. That
        // the bytes are valid value bytes (no CR, LF or NUL: `HeaderValue`'s own invariant, on
        // which no memory safety rests) is the caller's part, as this function's contract says.
        Some(unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) })
    } else {
        // obs-text is not UTF-8 in general: the checked constructor, which accepts it.
        HeaderValue::from_maybe_shared(bytes).ok()
    }
}

/// A non-negative decimal without sign or spaces, if it fits in a u64.
pub(crate) fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        if d.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        } else {
            None
        }
    })
}

/// A chunked body's decoder (RFC 9112 §7.1): sizes in hex, extensions ignored, trailer fields
/// read and dropped.
#[derive(Debug, Default)]
pub struct Chunked {
    at: ChunkAt,
    trailer_bytes: usize,
    trailer_fields: usize,
    extension_bytes: usize,
}

#[derive(Debug, Default)]
enum ChunkAt {
    /// Before a chunk-size line.
    #[default]
    Size,
    /// Inside a chunk's data, this many bytes still to come.
    Data(u64),
    /// After a chunk's data, before its CRLF.
    DataEnd,
    /// In the trailer section, after the last chunk.
    Trailers,
}

/// What a decoding step gave.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Body bytes.
    Data(Bytes),
    /// The body is whole.
    Done,
    /// The buffer holds no more to decode.
    More,
}

impl Chunked {
    /// Decodes from the front of `buf` (consuming what it uses) up to the next piece of data,
    /// the end, or the end of what `buf` holds; the trailer section may be at most
    /// `max_trailers` bytes.
    pub fn decode(&mut self, buf: &mut BytesMut, max_trailers: usize) -> Result<Step, H1Error> {
        loop {
            match self.at {
                ChunkAt::Size => {
                    let Some(line) = take_line(buf, MAX_CHUNK_LINE)? else {
                        if buf.len() > MAX_CHUNK_LINE {
                            return Err(H1Error::Malformed("chunk-size line too long"));
                        }
                        return Ok(Step::More);
                    };
                    let (size, extensions) = chunk_size(&line)?;
                    self.extension_bytes += extensions;
                    if self.extension_bytes > MAX_CHUNK_EXTENSIONS {
                        return Err(H1Error::Malformed("chunk extensions over 16 KiB"));
                    }
                    self.at = if size == 0 {
                        ChunkAt::Trailers
                    } else {
                        ChunkAt::Data(size)
                    };
                }
                ChunkAt::Data(n) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let k = n.min(buf.len() as u64);
                    self.at = if k == n {
                        ChunkAt::DataEnd
                    } else {
                        ChunkAt::Data(n - k)
                    };
                    // k <= buf.len(), a usize.
                    return Ok(Step::Data(buf.split_to(k as usize).freeze()));
                }
                ChunkAt::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Step::More);
                    }
                    if buf[..2] != *b"\r\n" {
                        return Err(H1Error::Malformed("chunk data not followed by CRLF"));
                    }
                    let _ = buf.split_to(2);
                    self.at = ChunkAt::Size;
                }
                ChunkAt::Trailers => {
                    let max_trailers = max_trailers.min(MAX_TRAILER_BYTES);
                    let room = max_trailers.saturating_sub(self.trailer_bytes);
                    let Some(line) = take_line(buf, room)? else {
                        if buf.len() > room {
                            return Err(H1Error::TooLarge(max_trailers));
                        }
                        return Ok(Step::More);
                    };
                    self.trailer_bytes += line.len() + 2;
                    if line.is_empty() {
                        return Ok(Step::Done);
                    }
                    // Dropped, but read as hyper reads them: field lines, at most 100.
                    self.trailer_fields += 1;
                    if self.trailer_fields > MAX_HEADERS {
                        return Err(H1Error::Malformed("more than 100 trailer fields"));
                    }
                    if !field_line(&line) {
                        return Err(H1Error::Malformed("trailer field"));
                    }
                }
            }
        }
    }
}

/// Whether `line` is a field line: a token, a colon, and a value of HTAB and bytes from 0x20 to
/// 0xFF but DEL (the whitespace around it included), as httparse reads a head's.
fn field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    !name.is_empty()
        && name.iter().all(|&b| tchar(b))
        && value
            .iter()
            .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// The line at the front of `buf` without its CRLF, consumed; `None` if its end is not among
/// the first `max` + 2 bytes (not arrived yet, or too long: the caller tells which by
/// `buf`'s length). A line ended by a bare LF is an error.
fn take_line(buf: &mut BytesMut, max: usize) -> Result<Option<BytesMut>, H1Error> {
    let window = &buf[..buf.len().min(max.saturating_add(2))];
    match window.iter().position(|&b| b == b'\n') {
        Some(i) if i == 0 || buf[i - 1] != b'\r' => {
            Err(H1Error::Malformed("chunked line not ended by CRLF"))
        }
        Some(i) => {
            let mut line = buf.split_to(i + 1);
            line.truncate(i - 1);
            Ok(Some(line))
        }
        None => Ok(None),
    }
}

/// A chunk-size line's size (hex digits, leading zeros allowed) and how many bytes follow
/// them: nothing, or spaces and tabs and a `;` and extensions (not interpreted), with no CR.
fn chunk_size(line: &[u8]) -> Result<(u64, usize), H1Error> {
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let rest = &line[digits..];
    let after_space = rest
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .map_or(&[][..], |i| &rest[i..]);
    let extensions_ok = after_space.is_empty() || after_space[0] == b';';
    if digits == 0 || !extensions_ok || rest.contains(&b'\r') {
        return Err(H1Error::Malformed("chunk size"));
    }
    let size = line[..digits]
        .iter()
        .try_fold(0u64, |n, &d| {
            let v = (d as char).to_digit(16)?;
            n.checked_mul(16)?.checked_add(u64::from(v))
        })
        .ok_or(H1Error::Malformed("chunk size"))?;
    Ok((size, rest.len()))
}

#[doc(hidden)]
pub mod differential;

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(raw: &str, head_request: bool) -> Result<Option<Head>, H1Error> {
        let mut buf = BytesMut::from(raw.as_bytes());
        parse(
            &mut buf,
            1024,
            head_request,
            &mut 0,
            &mut Scratch::default(),
        )
    }

    #[test]
    fn connection_fields_are_left_out_only_when_they_name_nothing_else() {
        // What the proxy makes of a head (hop-by-hop fields and what `Connection` names removed,
        // framing fixed up) is the same whether or not they were left out here.
        // Each with whether `Connection` names nothing but `close` and `keep-alive`.
        let responses = [
            ("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 1\r\nX-A: 1\r\n\r\n", true),
            ("HTTP/1.1 200 OK\r\nProxy-Connection: keep-alive\r\nConnection: close\r\nContent-Length: 1\r\n\r\n", true),
            ("HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 1\r\nContent-Length: 1\r\n\r\n", false),
            ("HTTP/1.1 200 OK\r\nX-Secret: 1\r\nConnection: keep-alive\r\nConnection: x-secret\r\nContent-Length: 1\r\n\r\n", false),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\n", true),
            ("HTTP/1.1 200 OK\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nContent-Length: 1\r\n\r\n", false),
            ("HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true),
            ("HTTP/1.0 200 OK\r\nConnection: caf\u{e9}\r\nContent-Length: 1\r\n\r\n", false),
            ("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n", true),
        ];
        for (raw, simple) in responses {
            let head = parsed(raw, false).unwrap().unwrap();
            let mut ours = head.headers.clone();
            // Every field, as a plain parse gives them.
            let mut fields = [httparse::EMPTY_HEADER; 16];
            let mut r = httparse::Response::new(&mut fields);
            let _ = r.parse(raw.as_bytes());
            let mut all = HeaderMap::new();
            for f in r.headers.iter() {
                all.append(
                    HeaderName::from_bytes(f.name.as_bytes()).unwrap(),
                    HeaderValue::from_bytes(f.value).unwrap(),
                );
            }
            assert_eq!(
                !ours.contains_key(header::CONNECTION),
                simple,
                "left out only when it names nothing else: {raw:?}"
            );
            let status = head.status;
            let ours_len = crate::proxy::fetch::response_head(status, &mut ours, false);
            let all_len = crate::proxy::fetch::response_head(status, &mut all, false);
            assert_eq!(ours_len, all_len, "{raw:?}");
            let sorted = |h: &HeaderMap| {
                let mut v: Vec<_> = h.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
                v.sort();
                v
            };
            assert_eq!(sorted(&ours), sorted(&all), "{raw:?}");
            assert!(!ours.contains_key("x-secret") && !ours.contains_key("keep-alive"));
        }
    }

    #[test]
    fn heads_are_parsed_with_their_framing() {
        let h = parsed(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\nX-A: c\r\n\r\nhello",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.status, StatusCode::OK);
        assert!(matches!(h.body, BodyState::Length(5)));
        assert!(h.keep_alive);
        let all: Vec<_> = h.headers.get_all("x-a").iter().collect();
        assert_eq!(all, ["b", "c"]);
        // Interim responses are skipped; a HEAD's length describes no body.
        let h = parsed(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
            true,
        )
        .unwrap()
        .unwrap();
        assert!(h.body.is_done());
        // HTTP/1.0 keeps the connection only when asked; no length means to the close.
        let h = parsed("HTTP/1.0 200 OK\r\n\r\n", false).unwrap().unwrap();
        assert!(matches!(h.body, BodyState::Close));
        assert!(!h.keep_alive);
        let h = parsed(
            "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(h.keep_alive && h.body.is_done());
        let h = parsed(
            "HTTP/1.1 304 Not Modified\r\nConnection: x, close\r\nContent-Length: 7\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(!h.keep_alive && h.body.is_done());
    }

    #[test]
    fn transfer_encoding_wins_and_bad_lengths_fail() {
        let h = parsed(
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding:  Chunked \r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(h.body, BodyState::Chunked(_)));
        assert!(!h.keep_alive, "a length beside chunked: not reused");
        // Equal lengths are one, left as one field.
        let h = parsed(
            "HTTP/1.1 200 OK\r\nContent-Length: 4, 4\r\nContent-Length: 4\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(h.body, BodyState::Length(4)) && h.keep_alive);
        let lengths: Vec<_> = h.headers.get_all(header::CONTENT_LENGTH).iter().collect();
        assert_eq!(lengths, ["4"]);
        for bad in [
            // Only chunked, alone, is a transfer coding read: never other codings' bytes
            // passed on as the content, nor a body to the close after a coding.
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\n",
            // A length must be one, even where no body follows.
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 4, 5\r\n\r\n",
            "HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n",
        ] {
            assert!(
                matches!(parsed(bad, false), Err(H1Error::Malformed(_))),
                "{bad:?}"
            );
        }
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +4\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 4,,4\r\n\r\n",
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "HTTX/1.1 200 OK\r\n\r\n",
        ] {
            assert!(
                matches!(parsed(bad, false), Err(H1Error::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn answers_that_announce_a_body_they_must_not_send_leave_their_connection_unfit() {
        // (response, to a HEAD, connection reusable)
        let cases = [
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, false),
            ("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true, false),
            ("HTTP/1.1 200 OK\r\n\r\n", true, false),
            (
                "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n",
                false,
                true,
            ),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n",
                false,
                true,
            ),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 5, 5\r\n\r\n",
                false,
                false,
            ),
            ("HTTP/1.1 204 No Content\r\n\r\n", false, true),
            (
                "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
                false,
                false,
            ),
            (
                "HTTP/1.1 204 No Content\r\nTransfer-Encoding: gzip\r\n\r\n",
                false,
                false,
            ),
        ];
        for (raw, head_request, reusable) in cases {
            let h = parsed(raw, head_request).unwrap().unwrap();
            assert!(h.body.is_done() && !h.close_delimited(), "{raw:?}");
            assert_eq!(h.keep_alive, reusable, "{raw:?}");
        }
        // The same rules on heads hyper's client read.
        let mut headers = HeaderMap::new();
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("gzip, chunked"),
        );
        assert!(check_head(StatusCode::OK, Version::HTTP_11, &mut headers, false).is_err());
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("5, 5"));
        assert!(!check_head(StatusCode::OK, Version::HTTP_11, &mut headers, false).unwrap());
        assert_eq!(headers[header::CONTENT_LENGTH], "5");
        let mut none = HeaderMap::new();
        assert!(check_head(StatusCode::OK, Version::HTTP_11, &mut none, false).unwrap());
        assert!(check_head(StatusCode::OK, Version::HTTP_10, &mut none, false).unwrap());
        assert!(!check_head(StatusCode::OK, Version::HTTP_2, &mut none, false).unwrap());
        assert!(!check_head(StatusCode::OK, Version::HTTP_11, &mut none, true).unwrap());
    }

    #[test]
    fn heads_wait_for_their_end_within_the_limit() {
        assert!(parsed("HTTP/1.1 200 OK\r\nContent-Le", false)
            .unwrap()
            .is_none());
        let big = format!("HTTP/1.1 200 OK\r\nX: {}\r\n", "a".repeat(1100));
        assert!(matches!(parsed(&big, false), Err(H1Error::TooLarge(1024))));
        let many: String = (0..101).map(|i| format!("X-{i}: v\r\n")).collect();
        let many = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        let mut buf = BytesMut::from(many.as_bytes());
        assert!(matches!(
            parse(&mut buf, 1 << 20, false, &mut 0, &mut Scratch::default()),
            Err(H1Error::TooManyFields)
        ));
        // Whole but over the limit (it arrived in one read).
        let whole = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(1100));
        let mut buf = BytesMut::from(whole.as_bytes());
        assert!(matches!(
            parse(&mut buf, 1024, false, &mut 0, &mut Scratch::default()),
            Err(H1Error::TooLarge(1024))
        ));
        // Interim responses, up to 16.
        let interim = |n: usize| {
            let mut raw = "HTTP/1.1 103 Early Hints\r\n\r\n".repeat(n);
            raw.push_str("HTTP/1.1 204 No Content\r\n\r\n");
            let mut buf = BytesMut::from(raw.as_bytes());
            parse(&mut buf, 1 << 20, false, &mut 0, &mut Scratch::default())
                .map(|h| h.map(|h| h.status))
        };
        assert_eq!(interim(16).unwrap(), Some(StatusCode::NO_CONTENT));
        assert!(matches!(interim(17), Err(H1Error::Malformed(_))));
    }

    #[test]
    fn remembered_field_names_give_what_parsing_afresh_gives() {
        // One connection's heads in turn, through one scratch: the same names, then other
        // cases, other orders, a gap left by a hop-by-hop field, more and fewer fields.
        let heads = [
            "HTTP/1.1 200 OK\r\nServer: a\r\nContent-Length: 1\r\nConnection: keep-alive\r\nETag: \"x\"\r\nX-Own: 1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nServer: a\r\nContent-Length: 1\r\nConnection: keep-alive\r\nETag: \"x\"\r\nX-Own: 1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nSERVER: a\r\ncontent-length: 1\r\nETag: \"y\"\r\nX-OWN: 2\r\nX-More: 3\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX-Own: 1\r\nServer: a\r\nContent-Length: 1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nServer: a\r\nContent-Length: 1\r\nConnection: keep-alive\r\nETag: \"x\"\r\nX-Own: 1\r\n\r\n",
        ];
        let mut scratch = Scratch::default();
        let mut buf = BytesMut::from(heads[0].as_bytes());
        parse(&mut buf, 1024, false, &mut 0, &mut scratch).unwrap();
        // Remembered by position, past the gap `Connection` leaves (it is not parsed).
        let at = |s: &Scratch, i: usize| s.names[i].as_ref().map(|(raw, _)| raw.clone());
        assert_eq!(at(&scratch, 1), Some(b"Content-Length".to_vec()));
        assert_eq!(at(&scratch, 2), None);
        assert_eq!(at(&scratch, 3), Some(b"ETag".to_vec()));
        for raw in heads.iter().chain(heads.iter()) {
            let mut buf = BytesMut::from(raw.as_bytes());
            let remembered = parse(&mut buf, 1024, false, &mut 0, &mut scratch)
                .unwrap()
                .unwrap();
            let afresh = parsed(raw, false).unwrap().unwrap();
            assert_eq!(remembered.headers, afresh.headers, "{raw}");
            let names = |h: &HeaderMap| h.keys().map(|n| n.as_str().to_owned()).collect::<Vec<_>>();
            assert_eq!(names(&remembered.headers), names(&afresh.headers), "{raw}");
        }
    }

    #[test]
    fn values_httparse_returns_are_valid_values() {
        // Every byte at several places in a value long enough for httparse's vector paths
        // (32 bytes at a time with AVX2, 16 with SSE4.2, 8 with SWAR): what httparse accepts
        // must be a valid HeaderValue (debug builds of `http` also panic in
        // `from_maybe_shared_unchecked` if it is not), and it must accept exactly the bytes
        // HeaderValue allows, so that the check is not vacuous.
        const LEN: usize = 80;
        for at in [0, 1, 7, 8, 15, 16, 31, 32, 40, 63, 64, LEN - 1] {
            let mut accepted = 0;
            for b in 0..=255u8 {
                let mut value = vec![b'v'; LEN];
                value[at] = b;
                let mut raw = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
                raw.extend_from_slice(&value);
                raw.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
                let mut buf = BytesMut::from(&raw[..]);
                let Ok(Some(head)) =
                    parse(&mut buf, 1 << 16, false, &mut 0, &mut Scratch::default())
                else {
                    continue;
                };
                let got = head.headers["x"].as_bytes();
                // Leading and trailing spaces and tabs are not part of a value.
                let want = value.trim_ascii_start();
                let want = if at == LEN - 1 {
                    want.trim_ascii_end()
                } else {
                    want
                };
                assert_eq!(got, want, "byte {b:#04x} at {at}");
                assert!(
                    HeaderValue::from_bytes(got).is_ok(),
                    "byte {b:#04x} at {at}"
                );
                accepted += 1;
            }
            // 256 bytes less the 31 controls other than HTAB, and DEL; at the end, a LF is also
            // a line's end (RFC 9112 §2.2 lets a recipient take a bare LF as one).
            let expected = if at == LEN - 1 { 225 } else { 224 };
            assert_eq!(accepted, expected, "at {at}");
        }
    }

    #[test]
    fn unusual_reason_phrases_are_kept() {
        let reason = |raw: &str| {
            parsed(raw, false)
                .unwrap()
                .unwrap()
                .reason
                .map(|r| r.as_bytes().to_vec())
        };
        assert_eq!(reason("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), None);
        assert_eq!(
            reason("HTTP/1.1 200 Fine Thanks\r\nContent-Length: 0\r\n\r\n"),
            Some(b"Fine Thanks".to_vec())
        );
        assert_eq!(
            reason("HTTP/1.1 599 Network Timeout\r\nContent-Length: 0\r\n\r\n"),
            Some(b"Network Timeout".to_vec())
        );
    }

    /// Decodes `wire` fed `step` bytes at a time, as reads would deliver it.
    fn dechunk(wire: &[u8], step: usize) -> Result<(Vec<u8>, usize), H1Error> {
        let mut c = Chunked::default();
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match c.decode(&mut buf, 64)? {
                Step::Data(d) => body.extend_from_slice(&d),
                Step::Done => return Ok((body, buf.len() + wire.len() - fed)),
                Step::More if fed == wire.len() => return Err(H1Error::Truncated),
                Step::More => {
                    let end = (fed + step).min(wire.len());
                    buf.extend_from_slice(&wire[fed..end]);
                    fed = end;
                }
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_whatever_the_reads() {
        let wire = b"5;ext=1\r\nhello\r\n00A \t;e\r\n, world!!!\r\n0\r\nX-Trailer: t\r\n\r\n";
        for step in 1..=wire.len() {
            let (body, left) = dechunk(wire, step).unwrap();
            assert_eq!(body, b"hello, world!!!", "step {step}");
            assert_eq!(left, 0);
        }
        // Bytes after the body stay in the buffer (the connection is then not reused).
        let (_, left) = dechunk(b"0\r\n\r\nHTTP", 100).unwrap();
        assert_eq!(left, 4);
    }

    #[test]
    fn chunked_syntax_errors_fail() {
        for bad in [
            &b"5\r\nhelloXX0\r\n\r\n"[..],
            b"5\nhello\r\n0\r\n\r\n",
            b"zz\r\n",
            b"\r\n",
            b"11111111111111111\r\n",
            b"5 x\r\nhello\r\n",
            b"5\r\r\nhello\r\n",
            b"5\x0c;x\r\nhello\r\n",
        ] {
            assert!(
                matches!(dechunk(bad, 3), Err(H1Error::Malformed(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(dechunk(b"5\r\nhel", 100), Err(H1Error::Truncated)));
        let long_trailers = format!("0\r\nX: {}\r\n\r\n", "t".repeat(100));
        assert!(matches!(
            dechunk(long_trailers.as_bytes(), 7),
            Err(H1Error::TooLarge(64))
        ));
        let long_size = format!("1;{}\r\n", "e".repeat(MAX_CHUNK_LINE + 10));
        assert!(matches!(
            dechunk(long_size.as_bytes(), 512),
            Err(H1Error::Malformed(_))
        ));
        // Extensions add up over a body: 17 chunks with 1 KiB of them each.
        let ext = format!("1;{}\r\nx\r\n", "e".repeat(1022));
        let many = format!("{}0\r\n\r\n", ext.repeat(17));
        assert!(matches!(
            dechunk(many.as_bytes(), 4096),
            Err(H1Error::Malformed(_))
        ));
        let fewer = format!("{}0\r\n\r\n", ext.repeat(15));
        assert_eq!(dechunk(fewer.as_bytes(), 4096).unwrap().0.len(), 15);
    }
}
