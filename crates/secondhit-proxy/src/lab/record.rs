//! Recording the edge's own traffic as an oracleGeneral trace (`--record FILE`): one 24-byte
//! record per [`Sighting`], little-endian, as libCacheSim reads it:
//!
//! ```text
//! 0   time            u32  seconds on the proxy's clock (Unix time)
//! 4   object id       u64  the key's 64-bit hash (never the URL)
//! 12  size            u32  the object's bytes (saturating at 4 GiB - 1)
//! 16  next access     i64  -1 (trace-convert fills it in)
//! ```
//!
//! Written by one thread through a bounded queue (full: dropped and counted, never blocking a
//! request), buffered and flushed whenever the queue runs empty. At `record_max_bytes` the file
//! is rotated as logrotate does: `FILE` becomes `FILE.1`, `FILE.1` becomes `FILE.2`, ... up to
//! `record_keep` files, the oldest removed. A file left with a torn last record (a crash mid
//! write) is cut back to whole records when it is opened again, so every file stays readable.
//!
//! `simulate` on the recording gives the live run's figures: the admission policy is keyed on
//! the same object id (`KeyHash::of_u64(id)`), so it sees the same hashes.

use super::{Figure, Shared, Sighting, Sink, Tap};
use crate::metrics::Families;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of one oracleGeneral record.
pub const RECORD_BYTES: u64 = crate::store::oracle::RECORD as u64;

/// Where and how to record.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordOptions {
    /// The file (appended to if it exists).
    pub path: PathBuf,
    /// Rotate when the file would grow past this many bytes (at least one record).
    pub max_bytes: u64,
    /// Rotated files kept (`FILE.1` ... `FILE.keep`); 0 keeps none.
    pub keep: u32,
    /// Sightings the queue holds.
    pub queue: usize,
}

/// One record's bytes.
pub fn encode(s: &Sighting) -> [u8; crate::store::oracle::RECORD] {
    crate::store::oracle::encode(
        u32::try_from(s.time.as_secs()).unwrap_or(u32::MAX),
        s.id,
        u32::try_from(s.size).unwrap_or(u32::MAX),
        -1,
    )
}

/// The `n`th rotated file of `path` (`FILE.n`).
pub fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

#[derive(Default, Debug)]
struct Stats {
    records: Figure,
    rotations: Figure,
    errors: Figure,
}

struct RecordSink {
    options: RecordOptions,
    file: Option<BufWriter<File>>,
    /// Bytes in the current file.
    len: u64,
    stats: Shared<Stats>,
    /// After a failed rotation, the current file grows past its size until this many more
    /// records are written: a rotation that keeps failing must not shift (and so remove) the
    /// rotated files once per record.
    rotation_pause: u64,
}

/// Records written between attempts after a failed rotation.
const ROTATION_RETRY: u64 = 10_000;

/// Opens `path` for appending, cut back to whole records. Returns the file and its length.
fn open(path: &Path) -> io::Result<(File, u64)> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let len = file.metadata()?.len();
    let whole = len - len % RECORD_BYTES;
    if whole != len {
        tracing::warn!(
            file = %path.display(),
            torn_bytes = len - whole,
            "recording: a torn last record (an earlier crash?) was cut off"
        );
        file.set_len(whole)?;
    }
    Ok((file, whole))
}

impl RecordSink {
    fn failed(&mut self, what: &str, e: &io::Error) {
        // The first failure and then one in 10,000 are logged; every one is counted.
        if self.stats.errors.get() % 10_000 == 0 {
            tracing::warn!(file = %self.options.path.display(), error = %e, "recording: {what} failed");
        }
        self.stats.errors.add(1);
        self.file = None;
    }

    fn ensure_open(&mut self) -> bool {
        if self.file.is_some() {
            return true;
        }
        match open(&self.options.path) {
            Ok((f, len)) => {
                self.file = Some(BufWriter::with_capacity(64 * 1024, f));
                self.len = len;
                true
            }
            Err(e) => {
                self.failed("opening the file", &e);
                false
            }
        }
    }

    fn rotate(&mut self) -> io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.flush()?;
        }
        let path = &self.options.path;
        let keep = self.options.keep;
        if keep == 0 {
            fs::remove_file(path)?;
        } else {
            match fs::remove_file(rotated(path, keep)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            for n in (1..keep).rev() {
                match fs::rename(rotated(path, n), rotated(path, n + 1)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            fs::rename(path, rotated(path, 1))?;
        }
        self.stats.rotations.add(1);
        Ok(())
    }
}

impl Sink for RecordSink {
    fn take(&mut self, s: &Sighting) {
        if !self.ensure_open() {
            return;
        }
        if self.rotation_pause > 0 {
            self.rotation_pause -= 1;
        } else if self.len > 0 && self.len + RECORD_BYTES > self.options.max_bytes {
            if let Err(e) = self.rotate() {
                self.failed("rotating", &e);
                self.rotation_pause = ROTATION_RETRY;
            }
            if !self.ensure_open() {
                return;
            }
        }
        let Some(f) = self.file.as_mut() else { return };
        match f.write_all(&encode(s)) {
            Ok(()) => {
                self.len += RECORD_BYTES;
                self.stats.records.add(1);
            }
            Err(e) => self.failed("writing", &e),
        }
    }

    fn idle(&mut self) {
        if let Some(f) = self.file.as_mut() {
            if let Err(e) = f.flush() {
                self.failed("flushing", &e);
            }
        }
    }
}

/// The recording of one `serve`.
pub struct Recorder {
    path: PathBuf,
    stats: Shared<Stats>,
    tap: Tap,
}

impl Recorder {
    /// Opens (or creates) the file and starts the writer. Fails, naming the file, when it
    /// cannot be opened: a recording asked for and impossible stops the start.
    pub fn start(options: RecordOptions) -> io::Result<Recorder> {
        let (file, len) = open(&options.path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("lab.record {}: {e}", options.path.display()),
            )
        })?;
        let stats = Arc::new(Stats::default());
        let path = options.path.clone();
        let queue = options.queue;
        let sink = RecordSink {
            options,
            file: Some(BufWriter::with_capacity(64 * 1024, file)),
            len,
            stats: Arc::clone(&stats),
            rotation_pause: 0,
        };
        Ok(Recorder {
            path,
            stats,
            tap: Tap::start("secondhit-record", queue, sink)?,
        })
    }

    /// Queues a record (never blocks; dropped and counted when the queue is full).
    #[inline]
    pub fn offer(&self, s: Sighting) {
        self.tap.offer(s);
    }

    /// Waits (up to `timeout`) until every record queued so far is written and flushed.
    pub fn settle(&self, timeout: Duration) -> bool {
        self.tap.settle(timeout)
    }

    /// Records written (to the file's buffer: a later failed flush loses them, and counts in
    /// `secondhit_record_errors_total`).
    pub fn records(&self) -> u64 {
        self.stats.records.get()
    }

    /// Records dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.tap.dropped()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Adds the `secondhit_record_*` families.
    pub(crate) fn collect(&self, out: &mut Families) {
        out.counter(
            "record_records",
            "Requests written to the recording",
            self.records(),
        );
        out.counter(
            "record_dropped",
            "Requests not recorded because the queue was full (the request did not wait)",
            self.dropped(),
        );
        out.counter(
            "record_rotations",
            "Rotations of the recording file",
            self.stats.rotations.get(),
        );
        out.counter(
            "record_errors",
            "Failed writes, flushes, opens or rotations of the recording (records lost)",
            self.stats.errors.get(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::oracle::{decode, RECORD};

    fn sight(id: u64, size: u64, secs: u64) -> Sighting {
        Sighting {
            id,
            size,
            time: Duration::from_secs(secs),
            storable: true,
        }
    }

    /// An empty scratch directory of this test process.
    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("secondhit-record-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// (id, size, seconds) of each record, decoded as `simulate`'s oracleGeneral reader does.
    fn read(path: &Path) -> Vec<(u64, u64, u64)> {
        let bytes = fs::read(path).unwrap();
        assert_eq!(
            bytes.len() % RECORD,
            0,
            "{} ends in a partial record",
            path.display()
        );
        bytes
            .chunks_exact(RECORD)
            .map(|c| {
                let r = decode(c.try_into().unwrap());
                (r.id, u64::from(r.size), u64::from(r.time))
            })
            .collect()
    }

    #[test]
    fn records_read_back_as_the_trace_reader_sees_them_and_rotate_by_size() {
        let path = scratch("rotate").join("edge.oracleGeneral");
        let r = Recorder::start(RecordOptions {
            path: path.clone(),
            max_bytes: 10 * RECORD_BYTES,
            keep: 2,
            queue: 1024,
        })
        .unwrap();
        for i in 0..35u64 {
            r.offer(sight(1000 + i, 10 * i, 1_700_000_000 + i));
        }
        assert!(r.settle(Duration::from_secs(10)));
        assert_eq!(r.records(), 35);
        // 35 records in files of 10: FILE.3 was removed (keep 2), FILE.2 holds 10..20,
        // FILE.1 20..30, FILE 30..35.
        assert!(!rotated(&path, 3).exists());
        let want = |from: u64, to: u64| {
            (from..to)
                .map(|i| (1000 + i, 10 * i, 1_700_000_000 + i))
                .collect::<Vec<_>>()
        };
        assert_eq!(read(&rotated(&path, 2)), want(10, 20));
        assert_eq!(read(&rotated(&path, 1)), want(20, 30));
        assert_eq!(read(&path), want(30, 35));
        let mut families = Families::default();
        r.collect(&mut families);
        let text = families.encode();
        assert!(text.contains("secondhit_record_rotations_total 3"));
        assert!(text.contains("secondhit_record_records_total 35"));
    }

    #[test]
    fn a_torn_last_record_is_cut_off_and_appending_goes_on_after_the_whole_ones() {
        let path = scratch("torn").join("t.oracleGeneral");
        let mut bytes = encode(&sight(7, 70, 1)).to_vec();
        bytes.extend_from_slice(&encode(&sight(8, 80, 2))[..13]);
        fs::write(&path, bytes).unwrap();
        let r = Recorder::start(RecordOptions {
            path: path.clone(),
            max_bytes: 1 << 20,
            keep: 1,
            queue: 16,
        })
        .unwrap();
        r.offer(sight(9, 90, 3));
        assert!(r.settle(Duration::from_secs(10)));
        assert_eq!(read(&path), vec![(7, 70, 1), (9, 90, 3)]);
    }

    #[test]
    fn a_rotation_that_fails_is_counted_once_and_recording_goes_on_in_the_same_file() {
        let path = scratch("stuck").join("t.oracleGeneral");
        // FILE.1 is a directory: the rotation cannot make room for it.
        fs::create_dir_all(rotated(&path, 1).join("inside")).unwrap();
        let r = Recorder::start(RecordOptions {
            path: path.clone(),
            max_bytes: 2 * RECORD_BYTES,
            keep: 1,
            queue: 64,
        })
        .unwrap();
        for i in 0..10 {
            r.offer(sight(i, 1, 1));
        }
        assert!(r.settle(Duration::from_secs(10)));
        assert_eq!(r.records(), 10);
        assert_eq!(r.stats.errors.get(), 1);
        assert_eq!(read(&path).len(), 10);
        assert!(rotated(&path, 1).join("inside").is_dir());
    }

    #[test]
    fn an_unwritable_file_is_refused_by_name() {
        let path = scratch("refused").join("no/such/dir/t.bin");
        let e = Recorder::start(RecordOptions {
            path: path.clone(),
            max_bytes: 1 << 20,
            keep: 1,
            queue: 16,
        })
        .err()
        .unwrap();
        assert!(e.to_string().contains("no/such/dir/t.bin"), "{e}");
    }
}
