//! Recording the edge's own traffic (`--record FILE`), one record per [`Sighting`], in one of two
//! formats (`lab.record_format`):
//!
//! - `secondhit` (the default): a 16-byte header, then 40-byte records of time (microseconds),
//!   object id, size, the weight the cache charged, how long the object stays fresh, and whether
//!   it was storable and a hit ([`secondhit_store::recording`]): what `simulate` needs to
//!   predict this edge, not only its lab mode;
//! - `oracle-general`: libCacheSim's 24-byte records, little-endian, no header, for other tools:
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
//! `record_keep` files, the oldest removed; each file of the `secondhit` format starts with its
//! header. A file left with a torn last record (a crash mid write) is cut back to whole records
//! when it is opened again, so every file stays readable; a file of the other format (or none)
//! is refused by name rather than appended to.
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

/// What a recording is written as (`lab.record_format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordFormat {
    /// secondhit's own ([`secondhit_store::recording`]): weight, storability, freshness.
    #[default]
    Secondhit,
    /// libCacheSim's oracleGeneral: time (s), id, size.
    OracleGeneral,
}

impl RecordFormat {
    /// Bytes of one record.
    pub fn record_bytes(self) -> u64 {
        match self {
            RecordFormat::Secondhit => crate::store::recording::RECORD as u64,
            RecordFormat::OracleGeneral => RECORD_BYTES,
        }
    }

    /// Bytes before the first record.
    pub fn header_bytes(self) -> u64 {
        match self {
            RecordFormat::Secondhit => crate::store::recording::HEADER as u64,
            RecordFormat::OracleGeneral => 0,
        }
    }
}

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
    /// The format.
    pub format: RecordFormat,
}

/// One oracleGeneral record's bytes.
pub fn encode(s: &Sighting) -> [u8; crate::store::oracle::RECORD] {
    crate::store::oracle::encode(
        u32::try_from(s.time.as_secs()).unwrap_or(u32::MAX),
        s.id,
        u32::try_from(s.size).unwrap_or(u32::MAX),
        -1,
    )
}

/// One secondhit record's bytes.
pub fn encode_secondhit(s: &Sighting) -> [u8; crate::store::recording::RECORD] {
    crate::store::recording::encode(&crate::store::recording::Record {
        time: s.time,
        id: s.id,
        size: s.size,
        weight: s.weight,
        fresh_for: s.fresh_for,
        storable: s.storable,
        hit: s.hit,
    })
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

/// Opens `path` for appending in `format`, cut back to whole records (a new or empty file gets
/// the header). Returns the file and its length. A file that is not of `format` is refused.
fn open(path: &Path, format: RecordFormat) -> io::Result<(File, u64)> {
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)?;
    let len = file.metadata()?.len();
    let header = format.header_bytes();
    let mut start = [0u8; crate::store::recording::HEADER];
    let head_len = usize::try_from(len).unwrap_or(usize::MAX).min(start.len());
    io::Read::read_exact(&mut file, &mut start[..head_len])?;
    let refuse = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: {what}; move it away, or set lab.record_format to its format",
                path.display()
            ),
        )
    };
    let start = &start[..head_len];
    match format {
        RecordFormat::Secondhit if head_len == crate::store::recording::HEADER => {
            let mut h = [0u8; crate::store::recording::HEADER];
            h.copy_from_slice(start);
            crate::store::recording::check_header(&h).map_err(|e| refuse(&e))?;
        }
        // Shorter than a header: a torn one (cut back below), or something else.
        RecordFormat::Secondhit if crate::store::recording::header()[..head_len] != *start => {
            return Err(refuse("not a secondhit recording"));
        }
        RecordFormat::OracleGeneral if crate::store::recording::is_recording(start) => {
            return Err(refuse("a secondhit recording, not oracleGeneral"));
        }
        _ => {}
    }
    let whole = if len < header {
        0
    } else {
        len - (len - header) % format.record_bytes()
    };
    if whole != len {
        tracing::warn!(
            file = %path.display(),
            torn_bytes = len - whole,
            "recording: a torn last record (an earlier crash?) was cut off"
        );
        file.set_len(whole)?;
    }
    if whole == 0 && header > 0 {
        file.write_all(&crate::store::recording::header())?;
        return Ok((file, header));
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
        match open(&self.options.path, self.options.format) {
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
        let format = self.options.format;
        let record = format.record_bytes();
        if self.rotation_pause > 0 {
            self.rotation_pause -= 1;
        } else if self.len > format.header_bytes() && self.len + record > self.options.max_bytes {
            if let Err(e) = self.rotate() {
                self.failed("rotating", &e);
                self.rotation_pause = ROTATION_RETRY;
            }
            if !self.ensure_open() {
                return;
            }
        }
        let Some(f) = self.file.as_mut() else { return };
        let written = match format {
            RecordFormat::Secondhit => f.write_all(&encode_secondhit(s)),
            RecordFormat::OracleGeneral => f.write_all(&encode(s)),
        };
        match written {
            Ok(()) => {
                self.len += record;
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
        let (file, len) = open(&options.path, options.format).map_err(|e| {
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
            weight: 0,
            fresh_for: None,
            hit: false,
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
            format: RecordFormat::OracleGeneral,
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
            format: RecordFormat::OracleGeneral,
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
            format: RecordFormat::OracleGeneral,
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
            format: RecordFormat::OracleGeneral,
        })
        .err()
        .unwrap();
        assert!(e.to_string().contains("no/such/dir/t.bin"), "{e}");
    }

    /// The records of a secondhit-format file, after checking its header.
    fn read_secondhit(path: &Path) -> Vec<crate::store::recording::Record> {
        use crate::store::recording as rec;
        let bytes = fs::read(path).unwrap();
        let (h, body) = bytes.split_at(rec::HEADER);
        rec::check_header(h.try_into().unwrap()).unwrap();
        assert_eq!(
            body.len() % rec::RECORD,
            0,
            "{} ends in a partial record",
            path.display()
        );
        body.chunks_exact(rec::RECORD)
            .map(|c| rec::decode(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn the_secondhit_format_keeps_weight_storability_and_freshness_in_every_rotated_file() {
        use crate::store::recording::{HEADER, RECORD};
        let path = scratch("secondhit").join("edge.rec");
        let r = Recorder::start(RecordOptions {
            path: path.clone(),
            max_bytes: (HEADER + 4 * RECORD) as u64,
            keep: 3,
            queue: 64,
            format: RecordFormat::Secondhit,
        })
        .unwrap();
        for i in 0..10u64 {
            r.offer(Sighting {
                id: i,
                size: 100 + i,
                time: Duration::from_micros(1_000_000 + i),
                storable: i % 3 != 0,
                weight: 1_000 + i,
                fresh_for: (i % 2 == 0).then(|| Duration::from_millis(500 * i)),
                hit: i == 5,
            });
        }
        assert!(r.settle(Duration::from_secs(10)));
        // Files of four records: FILE.2 holds 0..4, FILE.1 4..8, FILE 8..10; each its header.
        let all: Vec<_> = [rotated(&path, 2), rotated(&path, 1), path.clone()]
            .iter()
            .flat_map(|p| read_secondhit(p))
            .collect();
        assert_eq!(all.len(), 10);
        for (i, rec) in (0u64..).zip(&all) {
            assert_eq!((rec.id, rec.size, rec.weight), (i, 100 + i, 1_000 + i));
            assert_eq!(rec.time, Duration::from_micros(1_000_000 + i));
            assert_eq!(rec.storable, i % 3 != 0);
            assert_eq!(
                rec.fresh_for,
                (i % 2 == 0).then(|| Duration::from_millis(500 * i))
            );
            assert_eq!(rec.hit, i == 5);
        }
    }

    #[test]
    fn a_torn_secondhit_file_is_cut_back_and_a_file_of_the_other_format_refused() {
        use crate::store::recording::{header, HEADER};
        let dir = scratch("secondhit-torn");
        let options = |path: &Path, format| RecordOptions {
            path: path.to_path_buf(),
            max_bytes: 1 << 20,
            keep: 1,
            queue: 16,
            format,
        };
        // A header, one record and a torn one: cut back to the first, appended after it.
        let path = dir.join("t.rec");
        let mut bytes = header().to_vec();
        bytes.extend_from_slice(&encode_secondhit(&sight(7, 70, 1)));
        bytes.extend_from_slice(&encode_secondhit(&sight(8, 80, 2))[..13]);
        fs::write(&path, bytes).unwrap();
        let r = Recorder::start(options(&path, RecordFormat::Secondhit)).unwrap();
        r.offer(sight(9, 90, 3));
        assert!(r.settle(Duration::from_secs(10)));
        let ids: Vec<_> = read_secondhit(&path).iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![7, 9]);
        // A torn header alone: rewritten.
        let torn = dir.join("torn-header.rec");
        fs::write(&torn, &header()[..5]).unwrap();
        drop(Recorder::start(options(&torn, RecordFormat::Secondhit)).unwrap());
        assert_eq!(fs::read(&torn).unwrap().len(), HEADER);
        // oracleGeneral records are not appended to as a recording, nor the reverse.
        let oracle = dir.join("t.oracleGeneral");
        fs::write(&oracle, encode(&sight(1, 1, 1))).unwrap();
        let e = Recorder::start(options(&oracle, RecordFormat::Secondhit))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("t.oracleGeneral") && e.contains("not a secondhit recording"),
            "{e}"
        );
        let e = Recorder::start(options(&path, RecordFormat::OracleGeneral))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("a secondhit recording, not oracleGeneral"),
            "{e}"
        );
        assert_eq!(fs::read(&oracle).unwrap().len(), RECORD, "left as it was");
    }
}
