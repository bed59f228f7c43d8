//! Large stored bodies in sealed memory files, sent to plain-TCP clients with `sendfile`.
//!
//! A stored body written to a socket is copied from the proxy's memory into the kernel on every
//! hit. At 1 MiB that copy was about 40 % of a hit's CPU (207 against 125 us a request with and
//! without it, `cargo xtask bench sendfile`), and the reason the proxy's system time was about
//! twice nginx's, which serves its cache files with `sendfile`: page-cache pages handed to the
//! socket by reference. This module gives stored bodies the same path without
//! a file system, and without changing hyper:
//!
//! - [`seal`] copies a body of at least [`MIN_BODY`] bytes into a memory file
//!   (`memfd_create`), seals the file against any change (`F_SEAL_WRITE`, `F_SEAL_SHRINK`,
//!   `F_SEAL_GROW`), maps it read-only and returns it as `Bytes` owned by the mapping. Whatever
//!   reads the body (HTTP/2, TLS, ranges, the flash tier) reads the mapping as any memory.
//! - Every live mapping is registered by address. hyper queues a response's body `Bytes` as
//!   they are and writes head and body with one `writev`, whose slices point into the mapping.
//!   The listener's IO ([`crate::listener::activity::Watched`]) hands such writes to
//!   [`poll_write_pages`]: the head goes out with `MSG_MORE` and the body with `sendfile` from
//!   the memory file at the slice's offset, so they still leave in one segment and the body is
//!   never copied.
//! - Memory files are few and large, and capped ([`limit`]: a quarter of the open-file limit),
//!   so stored bodies cannot take the descriptors connections need. Past the cap, or if any step
//!   fails, the body stays on the heap as before; nothing else changes.
//!
//! Sealing is `cache.sendfile` (on by default). `sendfile` to a socket the peer has closed
//! raises `SIGPIPE`, which Rust programs ignore (the standard library sets it to ignored before
//! `main`): an embedder that restores the default handler turns `cache.sendfile` off.

use bytes::Bytes;
use std::collections::BTreeMap;
use std::io::{self, IoSlice, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, RwLock};
use std::task::{ready, Context, Poll};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bodies shorter than this stay on the heap: their copy costs less than a memory file's
/// descriptor, mapping and `sendfile` page references.
pub const MIN_BODY: usize = 128 * 1024;

/// A write slice shorter than this is never looked up (the end of a body mostly sent already
/// goes out with `writev`, from the mapping, like any memory).
const MIN_SLICE: usize = 16 * 1024;

/// Memory files alive now.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Bytes in memory files alive now.
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Writes that sent a body's pages with `sendfile`.
static SENDS: AtomicU64 = AtomicU64::new(0);

/// Live mappings by start address: their length and their memory file.
fn registry() -> &'static RwLock<BTreeMap<usize, Region>> {
    static REGISTRY: OnceLock<RwLock<BTreeMap<usize, Region>>> = OnceLock::new();
    REGISTRY.get_or_init(|| RwLock::new(BTreeMap::new()))
}

struct Region {
    len: usize,
    file: Arc<OwnedFd>,
}

/// The most memory files alive at once: a quarter of the soft open-file limit, and at most
/// 16,384 (each is also a mapping, and the kernel's default map count is 65,530).
pub fn limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        usize::try_from(soft / 4).unwrap_or(usize::MAX).min(16_384)
    })
}

/// Memory files alive now, and the bytes in them.
pub fn live() -> (usize, usize) {
    (LIVE.load(Relaxed), LIVE_BYTES.load(Relaxed))
}

/// Writes so far that sent a body's pages with `sendfile`.
pub fn sends() -> u64 {
    SENDS.load(Relaxed)
}

/// Raises the soft open-file limit to the hard one, as servers that hold many connections do
/// (nginx's `worker_rlimit_nofile`, Go's runtime at start). Call before the first [`seal`]:
/// [`limit`] is read once.
pub fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current.is_some() && l.current != l.maximum {
        l.current = l.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, l) {
            tracing::debug!(error = %e, "open-file limit not raised");
        }
    }
}

/// `body` in a sealed memory file, or `None` when it is too short, the cap is reached or a step
/// failed (the caller keeps the heap copy). A body sealed already is returned as it is.
pub fn seal(body: &Bytes) -> Option<Bytes> {
    if body.len() < MIN_BODY {
        return None;
    }
    if lookup(body).is_some() {
        return Some(body.clone());
    }
    seal_parts(&[&body[..]])
}

/// The concatenation of `parts` in a sealed memory file; `None` as for [`seal`].
pub fn seal_parts(parts: &[&[u8]]) -> Option<Bytes> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if len < MIN_BODY {
        return None;
    }
    // Taken before the file exists, so that racing sealers cannot pass the cap together.
    if LIVE.fetch_add(1, Relaxed) >= limit() {
        LIVE.fetch_sub(1, Relaxed);
        return None;
    }
    match Pages::new(parts, len) {
        Ok(p) => Some(Bytes::from_owner(p)),
        Err(e) => {
            LIVE.fetch_sub(1, Relaxed);
            tracing::debug!(error = %e, len, "body kept on the heap");
            None
        }
    }
}

/// A sealed memory file mapped read-only: the owner of a sealed body's `Bytes`.
struct Pages {
    /// The mapping's address (kept as a number: the mapping is only read through `as_ref`).
    addr: usize,
    len: usize,
}

impl Pages {
    fn new(parts: &[&[u8]], len: usize) -> io::Result<Pages> {
        use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        let fd = memfd_create(
            "secondhit-body",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        let mut file = std::fs::File::from(fd);
        for p in parts {
            file.write_all(p)?;
        }
        let fd = OwnedFd::from(file);
        fcntl_add_seals(
            &fd,
            SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL,
        )?;
        // SAFETY: a fresh read-only shared mapping of `len` bytes of `fd`, at an address the
        // kernel picks (no existing memory is replaced). The file holds exactly `len` bytes
        // (written above) and is sealed against writes, shrinking and growing, so the mapped
        // bytes never change and reading any of them cannot fault. The mapping is unmapped only
        // in `Drop`, once (it is owned by this value alone).
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ,
                MapFlags::SHARED,
                &fd,
                0,
            )?
        };
        let addr = ptr as usize;
        let file = Arc::new(fd);
        registry()
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(addr, Region { len, file });
        LIVE_BYTES.fetch_add(len, Relaxed);
        Ok(Pages { addr, len })
    }
}

impl AsRef<[u8]> for Pages {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `addr` is the start of a live read-only mapping of `len` bytes (see `new`),
        // unmapped only in `Drop`, which cannot run while this borrow of `self` lives. Its
        // bytes never change (the file is sealed), so a shared slice of them is sound.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // Out of the registry first: no write may find the file of a mapping that is going.
        registry()
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.addr);
        // SAFETY: the mapping `new` made, unmapped once. `Bytes` drops its owner only when no
        // slice of it is left, so nothing refers to these addresses any more.
        if let Err(e) = unsafe { rustix::mm::munmap(self.addr as *mut _, self.len) } {
            tracing::warn!(error = %e, "munmap of a stored body failed");
        }
        LIVE.fetch_sub(1, Relaxed);
        LIVE_BYTES.fetch_sub(self.len, Relaxed);
    }
}

/// The memory file `s` lies in and its offset there, if `s` is inside a live mapping.
fn lookup(s: &[u8]) -> Option<(Arc<OwnedFd>, u64)> {
    let addr = s.as_ptr() as usize;
    let map = registry().read().unwrap_or_else(|p| p.into_inner());
    let (&start, region) = map.range(..=addr).next_back()?;
    (addr + s.len() <= start + region.len)
        .then(|| (Arc::clone(&region.file), (addr - start) as u64))
}

/// Writes `bufs` to `stream` as hyper's `writev` would, but with the first slice that lies in a
/// sealed body sent by `sendfile` (and the slices before it with `MSG_MORE`); `None` when no
/// slice does (the caller writes as usual). Returns the bytes written, in order, as
/// `poll_write_vectored` does: possibly fewer than asked.
pub fn poll_write_pages(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    bufs: &[IoSlice<'_>],
) -> Option<Poll<io::Result<usize>>> {
    if LIVE.load(Relaxed) == 0 {
        return None;
    }
    let (at, file, offset) = bufs.iter().enumerate().find_map(|(i, b)| {
        if b.len() < MIN_SLICE {
            return None;
        }
        lookup(b).map(|(file, offset)| (i, file, offset))
    })?;
    let (head, body) = (&bufs[..at], bufs[at].len());
    Some(send(stream, cx, head, &file, offset, body))
}

fn send(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    head: &[IoSlice<'_>],
    file: &OwnedFd,
    offset: u64,
    body: usize,
) -> Poll<io::Result<usize>> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendFlags};
    let want: usize = head.iter().map(|h| h.len()).sum();
    loop {
        ready!(stream.poll_write_ready(cx))?;
        let sent = stream.try_io(Interest::WRITABLE, || {
            let mut n = 0;
            if want > 0 {
                n = sendmsg(
                    stream,
                    head,
                    &mut SendAncillaryBuffer::default(),
                    SendFlags::MORE | SendFlags::NOSIGNAL,
                )?;
                if n < want {
                    return Ok(n);
                }
            }
            let mut at = offset;
            match rustix::fs::sendfile(stream, file, Some(&mut at), body) {
                Ok(m) => {
                    SENDS.fetch_add(1, Relaxed);
                    Ok(n + m)
                }
                // The head went: say so; the body's error comes back on the next write.
                Err(_) if n > 0 => Ok(n),
                Err(e) => Err(e.into()),
            }
        });
        match sent {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return Poll::Ready(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn a_sealed_body_reads_back_and_its_file_goes_with_it() {
        let body = Bytes::from(pattern(2 * MIN_BODY + 5));
        let sealed = seal(&body).expect("sealed");
        assert_eq!(sealed, body);
        assert_ne!(sealed.as_ptr(), body.as_ptr());
        // A slice keeps the mapping; it is found at its offset.
        let part = sealed.slice(4096..2 * MIN_BODY);
        drop(sealed);
        let (_, offset) = lookup(&part).expect("registered");
        assert_eq!(offset, 4096);
        assert_eq!(&part[..], &body[4096..2 * MIN_BODY]);
        // Sealing a sealed body again gives it back.
        assert_eq!(seal(&part).map(|b| b.as_ptr()), Some(part.as_ptr()));
        // The last slice gone, the mapping leaves the registry (its clone of the file with it).
        let (file, _) = lookup(&part).expect("registered");
        assert_eq!(Arc::strong_count(&file), 2, "this clone and the registry's");
        drop(part);
        assert_eq!(Arc::strong_count(&file), 1, "the registry kept the file");
    }

    #[test]
    fn short_bodies_stay_on_the_heap() {
        assert!(seal(&Bytes::from(pattern(MIN_BODY - 1))).is_none());
        assert!(seal_parts(&[&pattern(1000), &pattern(1000)]).is_none());
        let parts = seal_parts(&[&pattern(MIN_BODY), b"end"]).expect("sealed");
        assert_eq!(parts.len(), MIN_BODY + 3);
        assert_eq!(&parts[MIN_BODY..], b"end");
    }

    #[tokio::test]
    async fn a_write_of_head_and_sealed_body_arrives_byte_for_byte() {
        let body = seal(&Bytes::from(pattern(3 * MIN_BODY))).expect("sealed");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let head = b"HTTP/1.1 200 OK\r\n\r\n";
        // What hyper does: write the queue until it is empty, advancing by what was taken.
        let (mut h, mut b, mut by_pages) = (&head[..], &body[1000..], 0);
        while !h.is_empty() || !b.is_empty() {
            let bufs = [IoSlice::new(h), IoSlice::new(b)];
            let n = std::future::poll_fn(|cx| match poll_write_pages(&stream, cx, &bufs) {
                Some(p) => {
                    by_pages += 1;
                    p
                }
                None => std::pin::Pin::new(&mut stream).poll_write_vectored(cx, &bufs),
            })
            .await
            .unwrap();
            let from_head = n.min(h.len());
            h = &h[from_head..];
            b = &b[n - from_head..];
        }
        stream.shutdown().await.unwrap();
        let got = reader.await.unwrap();
        let mut want = head.to_vec();
        want.extend_from_slice(&body[1000..]);
        assert_eq!(got.len(), want.len());
        assert!(got == want, "bytes differ");
        assert!(by_pages >= 1, "the body never went by sendfile");
    }

    #[tokio::test]
    async fn a_peer_that_closes_mid_body_gets_an_error_not_a_signal() {
        let body = seal(&Bytes::from(pattern(16 * MIN_BODY))).expect("sealed");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stream = TcpStream::connect(addr).await.unwrap();
        let (peer, _) = listener.accept().await.unwrap();
        drop(peer);
        let mut sent = 0usize;
        let mut failed = false;
        // Bounded: the socket's buffers hold far less than 100 bodies.
        for _ in 0..100 {
            let bufs = [IoSlice::new(&body[..])];
            match std::future::poll_fn(|cx| poll_write_pages(&stream, cx, &bufs).unwrap()).await {
                Ok(n) => sent += n,
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        assert!(
            failed,
            "writes to a closed peer kept succeeding ({sent} bytes)"
        );
    }
}
