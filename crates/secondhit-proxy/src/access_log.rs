//! The access log: one line per request, in the Apache/nginx `combined` format (so existing log
//! tools work) or as one JSON object a line, to stderr or a file. Lines are written off the
//! request path by one writer thread fed through a bounded queue; when the queue is full a line
//! is dropped and counted (`secondhit_access_log_dropped_total`), never blocking a request. The
//! file is reopened on SIGUSR1 and on reload, for log rotation.

use http::{HeaderValue, Method, Uri, Version};
use std::borrow::Cow;
use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum Format {
    /// `client - - [time] "METHOD target PROTO" status bytes "referer" "user-agent"`, then the
    /// cache outcome and the times: Apache's combined format with fields appended, which log
    /// tools read as combined.
    #[default]
    Combined,
    /// One JSON object a line: time, client, method, host, path, status, bytes, cache (X-Cache),
    /// cache_status (Cache-Status), origin_ms, total_ms.
    Json,
}

impl TryFrom<String> for Format {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "combined" => Ok(Format::Combined),
            "json" => Ok(Format::Json),
            other => Err(format!("{other:?}: expected combined or json")),
        }
    }
}

/// One request, as logged. The fields are the request's own values (cheap reference-counted
/// clones): the writer thread, not the request path, turns them into text.
#[derive(Clone, Debug)]
pub struct Line {
    /// When the request arrived (as Apache's `%t`).
    pub time: SystemTime,
    /// The client's address.
    pub client: IpAddr,
    /// `GET`, ...
    pub method: Method,
    /// The request target as received.
    pub uri: Uri,
    /// `HTTP/1.1`, `HTTP/2.0`.
    pub version: Version,
    /// The Host field as received; `None` takes the target's authority (HTTP/2).
    pub host: Option<HeaderValue>,
    /// The status sent.
    pub status: u16,
    /// Body bytes, as announced when the headers went out.
    pub bytes: u64,
    /// `X-Cache`.
    pub cache: &'static str,
    /// `Cache-Status`.
    pub cache_status: Option<HeaderValue>,
    /// Time to the origin's response headers, when the origin was asked.
    pub origin_time: Option<Duration>,
    /// Time to the response headers (not to the body's last byte: a slow reader does not
    /// make a request look slow).
    pub total_time: Duration,
    /// `Referer`, if any.
    pub referer: Option<HeaderValue>,
    /// `User-Agent`, if any.
    pub user_agent: Option<HeaderValue>,
}

/// Civil date and time (UTC) of a Unix time: (year, month 1-12, day, hour, minute, second).
fn civil(t: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
    )
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A combined-format field value: quotes and backslashes escaped, other bytes outside printable
/// ASCII as `\xNN` (so a line is always one line of ASCII).
fn put_quoted(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b' '..=b'~' => out.push(b),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[
                    b'\\',
                    b'x',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 15)],
                ]);
            }
        }
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn text(v: &HeaderValue) -> Cow<'_, str> {
    String::from_utf8_lossy(v.as_bytes())
}

/// A JSON line's fields, borrowed from the [`Line`].
#[derive(serde::Serialize)]
struct JsonLine<'a> {
    time: &'a str,
    client: IpAddr,
    method: &'a str,
    host: Cow<'a, str>,
    path: Cow<'a, str>,
    version: &'a str,
    status: u16,
    bytes: u64,
    cache: &'a str,
    cache_status: Option<Cow<'a, str>>,
    origin_ms: Option<f64>,
    total_ms: f64,
    referer: Option<Cow<'a, str>>,
    user_agent: Option<Cow<'a, str>>,
}

impl Line {
    /// The path and query, or the whole target when it has none (authority form).
    fn target(&self) -> Cow<'_, str> {
        match self.uri.path_and_query() {
            Some(p) => Cow::Borrowed(p.as_str()),
            None => Cow::Owned(self.uri.to_string()),
        }
    }

    fn version_str(&self) -> &'static str {
        match self.version {
            Version::HTTP_09 => "HTTP/0.9",
            Version::HTTP_10 => "HTTP/1.0",
            Version::HTTP_11 => "HTTP/1.1",
            Version::HTTP_2 => "HTTP/2.0",
            Version::HTTP_3 => "HTTP/3.0",
            _ => "HTTP/?",
        }
    }

    /// Appends the line in `format` and its newline to `out`.
    pub fn write(&self, format: Format, out: &mut Vec<u8>) {
        let (y, mo, d, h, mi, s) = civil(self.time);
        match format {
            Format::Combined => {
                let month = MONTHS[(mo - 1) as usize];
                // Writing to a Vec cannot fail.
                let _ = write!(
                    out,
                    "{} - - [{d:02}/{month}/{y}:{h:02}:{mi:02}:{s:02} +0000] \"",
                    self.client
                );
                put_quoted(out, self.method.as_str().as_bytes());
                out.push(b' ');
                put_quoted(out, self.target().as_bytes());
                let _ = write!(
                    out,
                    " {}\" {} {} \"",
                    self.version_str(),
                    self.status,
                    self.bytes
                );
                put_quoted(out, self.referer.as_ref().map_or(b"-", |v| v.as_bytes()));
                out.extend_from_slice(b"\" \"");
                put_quoted(out, self.user_agent.as_ref().map_or(b"-", |v| v.as_bytes()));
                let _ = write!(out, "\" cache={} origin_ms=", self.cache);
                let _ = match self.origin_time {
                    Some(t) => write!(out, "{}", ms(t)),
                    None => write!(out, "-"),
                };
                let _ = writeln!(out, " total_ms={}", ms(self.total_time));
            }
            Format::Json => {
                let millis = self
                    .time
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |t| t.subsec_millis());
                let time = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{millis:03}Z");
                let host = match &self.host {
                    Some(h) => text(h),
                    None => Cow::Borrowed(self.uri.authority().map_or("", |a| a.as_str())),
                };
                let line = JsonLine {
                    time: &time,
                    client: self.client,
                    method: self.method.as_str(),
                    host,
                    path: self.target(),
                    version: self.version_str(),
                    status: self.status,
                    bytes: self.bytes,
                    cache: self.cache,
                    cache_status: self.cache_status.as_ref().map(text),
                    origin_ms: self.origin_time.map(ms),
                    total_ms: ms(self.total_time),
                    referer: self.referer.as_ref().map(text),
                    user_agent: self.user_agent.as_ref().map(text),
                };
                // Serialising plain fields into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, &line);
                out.push(b'\n');
            }
        }
    }

    /// The line in `format`, without the newline.
    pub fn render(&self, format: Format) -> String {
        let mut out = Vec::new();
        self.write(format, &mut out);
        out.pop();
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// Where and how lines go; replaced on reload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The format.
    pub format: Format,
    /// The file, or `None` for stderr.
    pub file: Option<PathBuf>,
}

/// What the writer thread is sent.
enum Msg {
    Line(Box<Line>),
    /// Write everything before this, then answer.
    Flush(SyncSender<()>),
}

/// The access log's queue and writer.
pub struct AccessLog {
    /// `None` only while dropping.
    tx: Option<SyncSender<Msg>>,
    shared: Arc<Shared>,
    writer: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    target: Mutex<Target>,
    reopen: AtomicBool,
}

/// How long the writer lets lines gather after writing a batch (the lab's threads too).
pub(crate) const GATHER: Duration = Duration::from_millis(5);

/// Lines the queue holds before new ones are dropped.
pub const QUEUE: usize = 16_384;

impl AccessLog {
    /// A log to `target`, its file opened now (an unwritable file is an error naming it), and
    /// its writer thread started.
    pub fn start(target: Target) -> io::Result<AccessLog> {
        let (mut log, rx) = Self::new(target, QUEUE)?;
        let shared = Arc::clone(&log.shared);
        let out = open(&shared.target.lock().unwrap_or_else(|p| p.into_inner()))?;
        log.writer = Some(
            std::thread::Builder::new()
                .name("secondhit-access-log".into())
                .spawn(move || writer(rx, shared, out))?,
        );
        Ok(log)
    }

    /// The queue without a writer (tests start none to fill it).
    fn new(target: Target, capacity: usize) -> io::Result<(AccessLog, Receiver<Msg>)> {
        // Fail at start on an unwritable path, naming it.
        open(&target)?;
        let (tx, rx) = sync_channel(capacity);
        Ok((
            AccessLog {
                tx: Some(tx),
                shared: Arc::new(Shared {
                    target: Mutex::new(target),
                    reopen: AtomicBool::new(false),
                }),
                writer: None,
            },
            rx,
        ))
    }

    /// Queues a line, or drops it if the queue is full: never blocks. Returns whether it was
    /// queued (the caller counts drops).
    #[must_use]
    pub fn log(&self, line: Line) -> bool {
        self.tx
            .as_ref()
            .is_some_and(|tx| tx.try_send(Msg::Line(Box::new(line))).is_ok())
    }

    /// Waits (up to `timeout`) until every line queued so far is written and flushed (and a
    /// pending reopen done). Returns whether that happened in time.
    pub fn flush(&self, timeout: Duration) -> bool {
        let Some(tx) = &self.tx else { return false };
        let (ack, done) = sync_channel(1);
        tx.send(Msg::Flush(ack)).is_ok() && done.recv_timeout(timeout).is_ok()
    }

    /// Reopens the file before the next line (log rotation: SIGUSR1).
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Relaxed);
    }

    /// Takes a new target (reload); the file is reopened before the next line. An unwritable
    /// file is an error naming it, and the old target stays.
    pub fn retarget(&self, target: Target) -> io::Result<()> {
        open(&target)?;
        *self.shared.target.lock().unwrap_or_else(|p| p.into_inner()) = target;
        self.reopen();
        Ok(())
    }
}

impl Drop for AccessLog {
    /// Writes out what is queued: the writer ends once the queue is closed and drained.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// The file (appended to, created if missing) or stderr; an error names the file.
fn open(target: &Target) -> io::Result<Box<dyn Write + Send>> {
    Ok(match &target.file {
        Some(path) => Box::new(BufWriter::new(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?,
        )),
        None => Box::new(BufWriter::new(io::stderr())),
    })
}

/// The writer thread: writes what is queued, flushing whenever the queue runs dry (so a quiet
/// log is never stale), and reopens the file when asked before writing on.
fn writer(rx: Receiver<Msg>, shared: Arc<Shared>, mut out: Box<dyn Write + Send>) {
    let mut buf = Vec::with_capacity(1024);
    loop {
        let first = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(m) => Some(m),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        if shared.reopen.swap(false, Relaxed) {
            let _ = out.flush();
            let target = shared
                .target
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            match open(&target) {
                Ok(o) => out = o,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reopen the access log; writing on to the old file")
                }
            }
        }
        let Some(first) = first else { continue };
        let format = shared
            .target
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .format;
        let mut acks = Vec::new();
        // A bounded batch, so a busy log still flushes and notices a reopen.
        let batch = std::iter::from_fn(|| rx.try_recv().ok()).take(4096);
        for msg in std::iter::once(first).chain(batch) {
            match msg {
                Msg::Line(line) => {
                    buf.clear();
                    line.write(format, &mut buf);
                    let _ = out.write_all(&buf);
                }
                Msg::Flush(ack) => acks.push(ack),
            }
        }
        let _ = out.flush();
        for ack in acks {
            let _ = ack.send(());
        }
        // Let lines gather before the next batch. The profile under load showed the cost of
        // logging was not the writing but the waking: a receiver blocked on an empty queue
        // made each request's send a futex wake and a context switch. While this thread
        // sleeps no one waits on the queue, so a send is an atomic store; an idle log still
        // blocks in `recv` and costs nothing.
        std::thread::sleep(GATHER);
    }
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line() -> Line {
        Line {
            // 2026-12-01T05:06:07Z
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_101_567),
            client: "127.0.0.1".parse().unwrap(),
            method: Method::GET,
            uri: Uri::from_static("/a\"b?c=1"),
            version: Version::HTTP_11,
            host: Some(HeaderValue::from_static("site.test")),
            status: 200,
            bytes: 1000,
            cache: "HIT",
            cache_status: Some(HeaderValue::from_static("secondhit; hit; ttl=59")),
            origin_time: None,
            total_time: Duration::from_micros(1234),
            referer: None,
            user_agent: Some(HeaderValue::from_bytes(b"curl/8 \"q\" \xff").unwrap()),
        }
    }

    #[test]
    fn combined_and_json_lines() {
        let l = line();
        assert_eq!(
            l.render(Format::Combined),
            r#"127.0.0.1 - - [01/Dec/2026:05:06:07 +0000] "GET /a\"b?c=1 HTTP/1.1" 200 1000 "-" "curl/8 \"q\" \xff" cache=HIT origin_ms=- total_ms=1.234"#
        );
        let v: serde_json::Value = serde_json::from_str(&l.render(Format::Json)).unwrap();
        assert_eq!(v["time"], "2026-12-01T05:06:07.000Z");
        assert_eq!(v["path"], "/a\"b?c=1");
        assert_eq!(v["host"], "site.test");
        assert_eq!(v["version"], "HTTP/1.1");
        // Not UTF-8: replaced, never dropped or invalid JSON.
        assert_eq!(v["user_agent"], "curl/8 \"q\" \u{fffd}");
        assert_eq!(v["cache_status"], "secondhit; hit; ttl=59");
        assert_eq!(v["referer"], serde_json::Value::Null);
        assert_eq!(v["cache"], "HIT");
        assert_eq!(v["status"], 200);
        assert_eq!(v["origin_ms"], serde_json::Value::Null);
        assert_eq!(v["total_ms"], 1.234);
        assert_eq!(civil(SystemTime::UNIX_EPOCH), (1970, 1, 1, 0, 0, 0));
        // A leap day.
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(civil(leap), (2000, 2, 29, 0, 0, 0));
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_never_blocks() {
        let target = Target {
            format: Format::Json,
            file: None,
        };
        let (log, _rx) = AccessLog::new(target, 2).unwrap();
        let queued: Vec<bool> = (0..5).map(|_| log.log(line())).collect();
        assert_eq!(queued, [true, true, false, false, false]);
    }

    #[test]
    fn writes_to_a_file_and_reopens_after_rotation() {
        let dir = std::env::temp_dir().join(format!("secondhit-access-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        let log = AccessLog::start(Target {
            format: Format::Combined,
            file: Some(path.clone()),
        })
        .unwrap();
        assert!(log.log(line()));
        assert!(log.flush(Duration::from_secs(10)));
        // Rotation: the file is renamed away; lines go on to it until the reopen.
        let rotated = dir.join("access.log.1");
        std::fs::rename(&path, &rotated).unwrap();
        assert!(log.log(line()));
        assert!(log.flush(Duration::from_secs(10)));
        log.reopen();
        assert!(log.flush(Duration::from_secs(10)));
        let mut json = line();
        json.status = 404;
        log.retarget(Target {
            format: Format::Json,
            file: Some(path.clone()),
        })
        .unwrap();
        assert!(log.log(json));
        drop(log); // writes out what is queued
        let old = std::fs::read_to_string(&rotated).unwrap();
        let new = std::fs::read_to_string(&path).unwrap();
        assert_eq!(old.lines().count(), 2, "{old}");
        assert!(old
            .lines()
            .all(|l| l.starts_with("127.0.0.1 - - [01/Dec/2026")));
        assert_eq!(new.lines().count(), 1, "{new}");
        let v: serde_json::Value = serde_json::from_str(new.trim()).unwrap();
        assert_eq!(v["status"], 404);
        // A directory is no log file: refused, naming it, and the old target stays.
        let e = AccessLog::start(Target {
            format: Format::Json,
            file: Some(dir.clone()),
        })
        .err()
        .unwrap();
        assert!(e.to_string().contains(&dir.display().to_string()), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
