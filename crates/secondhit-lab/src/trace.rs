//! Access traces: one streaming reader per format, each yielding [`Request`]s in constant memory.
//!
//! * [`Format`] names a format as on the command line (`oracle-general`, `webcachesim`,
//!   `cache2k`, `tencent-photo`, `csv`) and can be guessed from a file name.
//! * [`open`] opens a file, decompressing `.gz`, `.xz`, `.bz2` and `.zst` by extension, and
//!   returns a [`Reader`]: an iterator of `Result<Request, TraceError>`.
//! * A malformed or truncated record is a [`TraceError`] naming the file, the line or byte
//!   offset, and what was wrong; readers never panic on any input.
//! * [`synth`] writes seeded synthetic traces; [`stats`] summarises a trace; [`convert`] computes
//!   next-access times and rewrites any trace as `oracleGeneral` (`trace-convert`); [`slices`]
//!   turns requests into the slices a sliced cache looks up (`simulate --slice-size`).

mod cache2k;
pub mod convert;
mod csv;
pub mod distance;
pub(crate) mod oracle;
mod recording;
pub mod slices;
pub mod stats;
pub mod synth;
mod tencent;
mod webcachesim;

pub use csv::CsvSpec;

use crate::hash::KeyHash;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// When it happened, as the trace tells it (seconds for most formats; the request's index
    /// for formats without time).
    pub time: Duration,
    /// The object's key, hashed by the format's key rule.
    pub key: KeyHash,
    /// The object's size in bytes (1 for formats without sizes).
    pub size: u64,
    /// The object's integer id where the format's key is one (oracleGeneral's object id,
    /// cache2k's key), else the low 64 bits of `key`. Only W-TinyLFU's frequency sketch reads
    /// it: libCacheSim hashes object ids there, so on an oracleGeneral trace the sketch's
    /// collisions are libCacheSim's.
    pub id: u64,
    /// The bytes asked for, first and last (inclusive; `u64::MAX`: to the end), when the
    /// request was a `Range` request (the `csv` format's `range` column); `None`: the whole
    /// object. What `simulate --slice-size` turns into slices and `replay` sends as `Range`.
    pub range: Option<(u64, u64)>,
    /// What the live cache knew of it, when the trace is a recording of one (`serve --record`):
    /// the weight it charged, whether the response was storable, how long it stayed fresh.
    pub recorded: Option<Recorded>,
}

pub use secondhit_store::Recorded;

/// What went wrong reading a trace. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read (including a corrupt compressed stream).
    #[error("{path}: {source}")]
    Io {
        /// The trace file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A text record that does not parse.
    #[error("{path}:{line}: {message}")]
    Parse {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number (of the decompressed text).
        line: u64,
        /// What was wrong, naming the field and the value.
        message: String,
    },
    /// A binary trace that ends in the middle of a record.
    #[error("{path}: truncated record at byte {offset}: {got} of {want} bytes")]
    Truncated {
        /// The trace file.
        path: PathBuf,
        /// Offset of the incomplete record in the decompressed stream.
        offset: u64,
        /// Bytes present.
        got: usize,
        /// Bytes a record needs.
        want: usize,
    },
    /// The format could not be told from the name.
    #[error("{path}: cannot tell the trace format from the file name; pass --format with one of: oracle-general, webcachesim, cache2k, tencent-photo, csv (a secondhit recording is recognised by its content)")]
    UnknownFormat {
        /// The trace file.
        path: PathBuf,
    },
    /// A format name that is not known.
    #[error("unknown trace format {0:?}: expected oracle-general, webcachesim, cache2k, tencent-photo, csv or secondhit-recording")]
    BadFormatName(String),
}

impl TraceError {
    pub(crate) fn parse(path: &Path, line: u64, message: impl Into<String>) -> Self {
        TraceError::Parse {
            path: path.to_path_buf(),
            line,
            message: message.into(),
        }
    }

    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        TraceError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A trace format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// libCacheSim's `oracleGeneral` binary: 24-byte little-endian records
    /// (`u32` time, `u64` id, `u32` size, `i64` next access). Key: id.
    OracleGeneral,
    /// webcachesim / AdaptSize text: `time id size` per line. Key: (id, size).
    Webcachesim,
    /// cache2k binary: big-endian `i32` keys, no time (the index), no size (1).
    Cache2k,
    /// The SNIA Tencent photo-cache text format. Key: (photo id, format, tier); size: column 5;
    /// rows of size 0 are skipped.
    TencentPhoto,
    /// Delimited text with user-chosen columns.
    Csv(CsvSpec),
    /// secondhit's own recording (`serve --record`): a header, then 40-byte records with the
    /// weight charged, storability and freshness. Key: id. Recognised by its first bytes,
    /// whatever the file's name.
    Recording,
}

impl Format {
    /// The name used on the command line.
    pub fn as_str(&self) -> &'static str {
        match self {
            Format::OracleGeneral => "oracle-general",
            Format::Webcachesim => "webcachesim",
            Format::Cache2k => "cache2k",
            Format::TencentPhoto => "tencent-photo",
            Format::Csv(_) => "csv",
            Format::Recording => "secondhit-recording",
        }
    }

    /// Guesses the format from a file name, after removing a compression extension. Returns
    /// `None` where the name does not say.
    pub fn detect(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        let name = Compression::strip(&name);
        // A rotated recording: `edge.oracleGeneral.3` (serve --record).
        let unrotated = match name.rsplit_once('.') {
            Some((rest, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => rest,
            _ => name,
        };
        if name.ends_with(".oraclegeneral.bin")
            || name.ends_with(".oraclegeneral")
            || unrotated.ends_with(".oraclegeneral.bin")
            || unrotated.ends_with(".oraclegeneral")
        {
            Some(Format::OracleGeneral)
        } else if name.ends_with(".trc.bin") || name.ends_with(".trc") {
            Some(Format::Cache2k)
        } else if name.starts_with("cloud_photos") || name.contains("tencent") {
            Some(Format::TencentPhoto)
        } else if name == "request.trace" || name.ends_with(".tr") || name.ends_with(".webcachesim")
        {
            Some(Format::Webcachesim)
        } else if name.ends_with(".ranges.csv") {
            Some(Format::Csv(CsvSpec::with_ranges()))
        } else if name.ends_with(".csv") {
            Some(Format::Csv(CsvSpec::default()))
        } else {
            None
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = TraceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "oracle-general" => Ok(Format::OracleGeneral),
            "webcachesim" => Ok(Format::Webcachesim),
            "cache2k" => Ok(Format::Cache2k),
            "tencent-photo" => Ok(Format::TencentPhoto),
            "csv" => Ok(Format::Csv(CsvSpec::default())),
            "secondhit-recording" => Ok(Format::Recording),
            other => Err(TraceError::BadFormatName(other.to_string())),
        }
    }
}

/// Compression, chosen by file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Compression {
    None,
    Gzip,
    Xz,
    Bzip2,
    Zstd,
}

impl Compression {
    fn of(path: &Path) -> Compression {
        match path.extension().and_then(|e| e.to_str()) {
            Some("gz") => Compression::Gzip,
            Some("xz") => Compression::Xz,
            Some("bz2") => Compression::Bzip2,
            Some("zst") => Compression::Zstd,
            _ => Compression::None,
        }
    }

    fn strip(name: &str) -> &str {
        for ext in [".gz", ".xz", ".bz2", ".zst"] {
            if let Some(stem) = name.strip_suffix(ext) {
                return stem;
            }
        }
        name
    }
}

/// Opens a file as a byte stream, decompressing by extension (`.gz`, `.xz`, `.bz2`, `.zst`;
/// multi-member files are read whole).
pub fn open_bytes(path: &Path) -> Result<Box<dyn BufRead + Send>, TraceError> {
    let file = File::open(path).map_err(|e| TraceError::io(path, e))?;
    decompress(path, Box::new(BufReader::with_capacity(1 << 16, file)))
}

/// Decompresses `raw` by the extension of `path` (which also names it in errors).
fn decompress(
    path: &Path,
    raw: Box<dyn BufRead + Send>,
) -> Result<Box<dyn BufRead + Send>, TraceError> {
    let inner: Box<dyn Read + Send> = match Compression::of(path) {
        Compression::None => return Ok(Box::new(BufReader::with_capacity(1 << 18, raw))),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(raw)),
        Compression::Xz => Box::new(xz2::bufread::XzDecoder::new_multi_decoder(raw)),
        Compression::Bzip2 => Box::new(bzip2::bufread::MultiBzDecoder::new(raw)),
        Compression::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(raw).map_err(|e| TraceError::io(path, e))?,
        ),
    };
    Ok(Box::new(BufReader::with_capacity(1 << 18, inner)))
}

/// The trace compiled into the binary, so that `secondhit simulate` works with no file:
/// `traces/request.trace.xz` (see `traces/README.md`).
pub const BUNDLED: (&str, &[u8]) = (
    "request.trace.xz",
    include_bytes!("../../../traces/request.trace.xz"),
);

/// A trace to read, by name: a file or the bundled trace, with its format (`None`: guessed from
/// the name). The one way `simulate`, `replay` and `demo` name and open a trace; it can be opened
/// as often as a command needs passes, from any thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    path: Option<PathBuf>,
    format: Option<Format>,
}

impl Source {
    /// A trace file.
    pub fn file(path: impl Into<PathBuf>, format: Option<Format>) -> Source {
        Source {
            path: Some(path.into()),
            format,
        }
    }

    /// The trace compiled into the binary ([`BUNDLED`]).
    pub fn bundled(format: Option<Format>) -> Source {
        Source { path: None, format }
    }

    /// The file, or `None` for the bundled trace.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// How reports name it: the path, or `request.trace.xz (bundled)`.
    pub fn name(&self) -> String {
        match &self.path {
            Some(p) => p.display().to_string(),
            None => format!("{} (bundled)", BUNDLED.0),
        }
    }

    /// Its format's name: as given, as its content says (a recording), or as guessed from the
    /// name (`?` when it cannot be).
    pub fn format_name(&self) -> String {
        let name = self.path.as_deref().unwrap_or(Path::new(BUNDLED.0));
        match &self.format {
            Some(f) => f.to_string(),
            None => self
                .path
                .as_deref()
                .and_then(|p| sniff_file(p).ok().flatten())
                .or_else(|| Format::detect(name))
                .map_or_else(|| "?".into(), |f| f.to_string()),
        }
    }

    /// How many requests it holds, when that is known without reading it: an uncompressed
    /// oracleGeneral file is 24 bytes a request. (For progress bars: an ETA from the start.)
    pub fn request_count_hint(&self) -> Option<u64> {
        let path = self.path.as_deref()?;
        let format = self.format.clone().or_else(|| Format::detect(path))?;
        let compressed = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "gz" | "xz" | "bz2" | "zst"));
        match format {
            Format::OracleGeneral if !compressed => Some(std::fs::metadata(path).ok()?.len() / 24),
            _ => None,
        }
    }

    /// Opens it from the start.
    pub fn open(&self) -> Result<Reader, TraceError> {
        match &self.path {
            Some(p) => open(p, self.format.as_ref()),
            None => open_static(BUNDLED.0, BUNDLED.1, self.format.as_ref()),
        }
    }
}

/// A streaming trace reader: an iterator of requests. After the first error it yields nothing
/// more.
pub struct Reader {
    inner: Box<dyn Iterator<Item = Result<Request, TraceError>> + Send>,
    failed: bool,
}

impl Iterator for Reader {
    type Item = Result<Request, TraceError>;
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.inner.next();
        if matches!(item, Some(Err(_))) {
            self.failed = true;
        }
        item
    }
}

/// Opens a trace. With `format: None` a secondhit recording is recognised by its first bytes;
/// any other format is guessed from the name ([`Format::detect`]), and an unclear name is an
/// error asking for `--format`.
pub fn open(path: &Path, format: Option<&Format>) -> Result<Reader, TraceError> {
    reader(path, format, open_bytes(path)?)
}

/// The format a file's first bytes (decompressed) say, where they say one: a recording.
fn sniff(bytes: &mut dyn BufRead, path: &Path) -> Result<Option<Format>, TraceError> {
    let start = bytes.fill_buf().map_err(|e| TraceError::io(path, e))?;
    Ok(secondhit_store::recording::is_recording(start).then_some(Format::Recording))
}

/// [`sniff`] of a file, opened for it.
fn sniff_file(path: &Path) -> Result<Option<Format>, TraceError> {
    sniff(&mut *open_bytes(path)?, path)
}

/// Opens a trace held in memory (such as the one compiled into the binary); `name` stands in for
/// the file name: it picks the decompression and the format, and names the trace in errors.
pub fn open_static(
    name: &str,
    data: &'static [u8],
    format: Option<&Format>,
) -> Result<Reader, TraceError> {
    let path = Path::new(name);
    reader(path, format, decompress(path, Box::new(data))?)
}

/// Reads a trace from any byte stream (already decompressed); `name` names it in errors and,
/// with `format: None`, picks the format.
pub fn reader(
    path: &Path,
    format: Option<&Format>,
    mut bytes: Box<dyn BufRead + Send>,
) -> Result<Reader, TraceError> {
    let format = match format {
        Some(f) => f.clone(),
        None => match sniff(&mut *bytes, path)? {
            Some(f) => f,
            None => Format::detect(path).ok_or_else(|| TraceError::UnknownFormat {
                path: path.to_path_buf(),
            })?,
        },
    };
    let path = path.to_path_buf();
    let inner: Box<dyn Iterator<Item = Result<Request, TraceError>> + Send> = match format {
        Format::OracleGeneral => Box::new(oracle::Reader::new(bytes, path)),
        Format::Webcachesim => Box::new(webcachesim::Reader::new(bytes, path)),
        Format::Cache2k => Box::new(cache2k::Reader::new(bytes, path)),
        Format::TencentPhoto => Box::new(tencent::Reader::new(bytes, path)),
        Format::Csv(spec) => Box::new(csv::Reader::new(bytes, path, spec)),
        Format::Recording => Box::new(recording::Reader::new(bytes, path)),
    };
    Ok(Reader {
        inner,
        failed: false,
    })
}

/// A binary trace of fixed-size records of `N` bytes, read one at a time, each failure naming
/// the file and the byte offset: what the oracleGeneral and recording readers share.
pub(crate) struct Records<const N: usize> {
    src: Box<dyn BufRead + Send>,
    path: PathBuf,
    /// Bytes read so far.
    offset: u64,
}

impl<const N: usize> Records<N> {
    pub(crate) fn new(src: Box<dyn BufRead + Send>, path: PathBuf) -> Self {
        Records {
            src,
            path,
            offset: 0,
        }
    }

    /// The next `M` bytes (a record, or a header): `None` at a clean end.
    pub(crate) fn next_bytes<const M: usize>(&mut self) -> Option<Result<[u8; M], TraceError>> {
        let mut rec = [0u8; M];
        match read_record(&mut self.src, &mut rec, &self.path, self.offset) {
            Ok(true) => {
                self.offset += M as u64;
                Some(Ok(rec))
            }
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// The next record.
    pub(crate) fn next_record(&mut self) -> Option<Result<[u8; N], TraceError>> {
        self.next_bytes::<N>()
    }

    /// The file, for errors.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads records of exactly `buf.len()` bytes. `Ok(true)`: a whole record; `Ok(false)`: clean
/// end of stream; a partial record is [`TraceError::Truncated`].
pub(crate) fn read_record(
    src: &mut dyn BufRead,
    buf: &mut [u8],
    path: &Path,
    offset: u64,
) -> Result<bool, TraceError> {
    let mut got = 0;
    while got < buf.len() {
        match src.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(TraceError::io(path, e)),
        }
    }
    match got {
        0 => Ok(false),
        n if n == buf.len() => Ok(true),
        n => Err(TraceError::Truncated {
            path: path.to_path_buf(),
            offset,
            got: n,
            want: buf.len(),
        }),
    }
}

/// The numbered text lines of a trace, without line ends, checked to be UTF-8: what every
/// text reader reads.
pub(crate) struct Lines {
    src: Box<dyn BufRead + Send>,
    path: PathBuf,
    number: u64,
    buf: Vec<u8>,
}

impl Lines {
    pub(crate) fn new(src: Box<dyn BufRead + Send>, path: PathBuf) -> Self {
        Lines {
            src,
            path,
            number: 0,
            buf: Vec::with_capacity(256),
        }
    }

    /// The next line with the file's path and the line's 1-based number; `None` at the end.
    /// A read error or invalid UTF-8 is an error naming the line.
    pub(crate) fn next_line(&mut self) -> Option<Result<(&str, &Path, u64), TraceError>> {
        self.number += 1;
        self.buf.clear();
        match self.src.read_until(b'\n', &mut self.buf) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => return Some(Err(TraceError::io(&self.path, e))),
        }
        while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
            self.buf.pop();
        }
        match std::str::from_utf8(&self.buf) {
            Ok(text) => Some(Ok((text, &self.path, self.number))),
            Err(_) => Some(Err(TraceError::parse(
                &self.path,
                self.number,
                "not UTF-8 text",
            ))),
        }
    }
}

/// Parses a field as an unsigned integer, naming it in the error.
pub(crate) fn field_u64(
    path: &Path,
    line: u64,
    name: &str,
    value: Option<&str>,
) -> Result<u64, TraceError> {
    let value =
        value.ok_or_else(|| TraceError::parse(path, line, format!("missing field {name}")))?;
    value.parse::<u64>().map_err(|_| {
        TraceError::parse(
            path,
            line,
            format!("field {name}: {value:?} is not a non-negative integer"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uncompressed_oracle_general_file_tells_its_request_count() {
        let dir = std::env::temp_dir().join(format!("secondhit-hint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("t.oracleGeneral.bin");
        std::fs::write(&plain, [0u8; 72]).unwrap();
        assert_eq!(Source::file(&plain, None).request_count_hint(), Some(3));
        let zst = dir.join("t.oracleGeneral.bin.zst");
        std::fs::write(&zst, [0u8; 72]).unwrap();
        assert_eq!(Source::file(&zst, None).request_count_hint(), None);
        let text = dir.join("t.tr");
        std::fs::write(&text, "1 2 3\n").unwrap();
        assert_eq!(Source::file(&text, None).request_count_hint(), None);
        assert_eq!(Source::bundled(None).request_count_hint(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn detects_formats_from_names() {
        let d = |n: &str| Format::detect(Path::new(n)).map(|f| f.as_str());
        assert_eq!(d("edge.oracleGeneral.3"), Some("oracle-general"));
        assert_eq!(d("edge.csv.3"), None);
        assert_eq!(
            d("cloudPhysicsIO.oracleGeneral.bin"),
            Some("oracle-general")
        );
        assert_eq!(d("x.oracleGeneral.bin.zst"), Some("oracle-general"));
        assert_eq!(d("trace-mt-20130703.trc.bin.gz"), Some("cache2k"));
        assert_eq!(d("cloud_photos-sample.bz2"), Some("tencent-photo"));
        assert_eq!(d("request.trace.xz"), Some("webcachesim"));
        assert_eq!(d("my.tr"), Some("webcachesim"));
        assert_eq!(d("log.csv.gz"), Some("csv"));
        assert_eq!(d("mystery.bin"), None);
        assert_eq!(d("trace.txt"), None);
    }

    #[test]
    fn format_names_round_trip() {
        for name in [
            "oracle-general",
            "webcachesim",
            "cache2k",
            "tencent-photo",
            "csv",
        ] {
            assert_eq!(name.parse::<Format>().unwrap().as_str(), name);
        }
        let e = "oracle".parse::<Format>().unwrap_err().to_string();
        assert!(
            e.contains("\"oracle\"") && e.contains("oracle-general"),
            "{e}"
        );
    }

    #[test]
    fn unknown_name_asks_for_format() {
        // A file whose name and content say nothing: asks for --format.
        let dir = std::env::temp_dir().join(format!("secondhit-unknown-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("x.bin");
        std::fs::write(&file, b"not a recording").unwrap();
        let e = match open(&file, None) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("opened"),
        };
        assert!(e.contains("--format"), "{e}");
        // The same content named as a recording would be, recognised by its first bytes.
        std::fs::write(&file, secondhit_store::recording::header()).unwrap();
        assert_eq!(open(&file, None).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
        // A file that is not there says so, whatever its name.
        let e = match open(Path::new("/nonexistent/x.bin"), None) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("opened"),
        };
        assert!(e.starts_with("/nonexistent/x.bin: "), "{e}");
        let e = match open(Path::new("/nonexistent/x.bin"), Some(&Format::Cache2k)) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("opened"),
        };
        assert!(e.starts_with("/nonexistent/x.bin: "), "{e}");
    }
}
