//! The flash tier under the memory store (`[cache.disk]`): stored responses in a local
//! directory, on foyer's block engine.
//!
//! Why foyer (0.22): it is the storage engine made for this (RisingWave's hybrid cache): large
//! blocks written sequentially (16 MiB by default, one file each), whole blocks evicted in FIFO
//! order (so flash sees no random writes and no write amplification from compaction), an
//! xxh64 checksum on every entry checked on every read (a corrupt entry is a miss, never served,
//! and its index entry is dropped), and the index recovered by scanning the blocks at start.
//! One file per object (cacache) would cost a file system operation per object; key-value stores
//! (fjall, redb, sled) rewrite data to compact and do not evict to a fixed size.
//!
//! What foyer is used for: its disk engine only. Its memory tier is switched off (every insert is
//! a "phantom"), the memory tier is the proxy's moka store, and what reaches the disk is our
//! decision: [`DiskTier::write`] refuses what the write budget ([`WriteBudget`], the simulator's
//! token bucket) cannot pay for, and counts it, so that flash endurance is a setting.
//!
//! The on-disk value is our own versioned encoding of a [`CachedObject`] ([`FORMAT`]); a value of
//! another version, or one that does not decode, is a miss.

mod purges;
mod taps;

use crate::config::DiskConfig;
use crate::metrics::{Families, Labels, LatencyHistogram};
use crate::proxy::cached::{CachedObject, StoredHeaders};
use crate::store::WriteBudget;
use bytes::Bytes;
use foyer::{
    BlockEngineConfig, Code, DeviceBuilder, EvictionInfo, EvictionPicker, FifoPicker,
    FsDeviceBuilder, HybridCache, HybridCacheBuilder, HybridCachePolicy, InvalidRatioPicker, Load,
    PsyncIoEngineConfig, RecoverMode,
};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The version of the encoding of a stored response on disk.
pub const FORMAT: u8 = 1;

/// The file in the tier's directory holding the purge mark ([`DiskTier::purge_mark`]).
const PURGE_MARK: &str = "secondhit-purged-before";

/// Why the flash tier could not open.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// The directory could not be created.
    #[error("cache.disk.dir {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// foyer refused to open the device or recover its index.
    #[error("cache.disk.dir {path}: {message}")]
    Engine {
        /// The directory.
        path: PathBuf,
        /// foyer's error.
        message: String,
    },
}

/// What [`DiskTier::write`] did with an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Queued for the disk.
    Queued,
    /// The write budget was spent: not written (`secondhit_disk_refusals_total`).
    Refused,
    /// Larger than half a block less 64 KiB: not written.
    TooLarge,
}

/// The flash tier's counters (what `/metrics` shows as `secondhit_disk_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskFigures {
    /// Lookups answered from disk.
    pub hits: u64,
    /// Lookups the disk did not have (or had corrupt).
    pub misses: u64,
    /// Reads of the device: lookups of one key while its read is in flight share it.
    pub reads: u64,
    /// Objects queued for the disk.
    pub writes: u64,
    /// Their encoded bytes.
    pub write_bytes: u64,
    /// Writes the budget refused.
    pub refusals: u64,
    /// Reads that failed (an I/O error or a value that did not decode): served as misses.
    pub errors: u64,
    /// Blocks evicted to make room (whole blocks: one mostly removed or replaced first, else
    /// the oldest).
    pub evicted_blocks: u64,
    /// Bytes in the blocks that hold objects: sealed blocks, each counted whole (the block
    /// being filled is not counted until it is sealed).
    pub bytes: u64,
    /// Writes queued here that foyer dropped instead of writing (its queue or its buffer was
    /// full): counted in `writes` too.
    pub dropped: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    refusals: AtomicU64,
    errors: AtomicU64,
}

/// What the block engine's eviction reports, read by [`DiskTier::figures`].
#[derive(Debug, Default)]
struct BlockCounts {
    evicted: AtomicU64,
    sealed: AtomicU64,
}

/// foyer's FIFO picker, counting: every picker hears of every eviction, whichever picked it,
/// so this one sees them all (and, at each change, how many blocks are sealed).
#[derive(Debug)]
struct CountingFifo {
    fifo: FifoPicker,
    counts: Arc<BlockCounts>,
}

impl EvictionPicker for CountingFifo {
    fn init(&mut self, blocks: &[u32], block_size: usize) {
        self.fifo.init(blocks, block_size);
    }

    fn pick(&mut self, info: EvictionInfo<'_>) -> Option<u32> {
        self.fifo.pick(info)
    }

    fn on_block_evictable(&mut self, info: EvictionInfo<'_>, block: u32) {
        // `info.evictable` already holds `block`.
        self.counts
            .sealed
            .store(info.evictable.len() as u64, Relaxed);
        self.fifo.on_block_evictable(info, block);
    }

    fn on_block_evict(&mut self, info: EvictionInfo<'_>, block: u32) {
        // `info.evictable` no longer holds `block`.
        self.counts.evicted.fetch_add(1, Relaxed);
        self.counts
            .sealed
            .store(info.evictable.len() as u64, Relaxed);
        self.fifo.on_block_evict(info, block);
    }
}

/// A stored response as foyer stores it.
#[derive(Clone, Debug)]
pub struct DiskObject(pub Arc<CachedObject>);

/// The flash tier.
pub struct DiskTier {
    cache: HybridCache<String, DiskObject>,
    budget: Option<Mutex<WriteBudget>>,
    max_object: u64,
    counters: Counters,
    blocks: Arc<BlockCounts>,
    block_size: u64,
    /// What foyer's metrics tell: device write latencies, dropped writes.
    tapped: Arc<taps::Tapped>,
    /// Held while the purge mark's file is written.
    purge_file: Mutex<()>,
    /// Purges by URL, which reach every variant ([`DiskTier::purge_url`]).
    url_purges: Mutex<purges::UrlPurges>,
    read_latency: LatencyHistogram,
    /// Reads in flight, by key: concurrent lookups of one key share one read.
    reads: Mutex<HashMap<String, Arc<SharedRead>>>,
    dir: PathBuf,
}

/// One read of a key, shared by the lookups that asked while it was in flight. If the task
/// reading is dropped (its client left), the next waiter reads.
type SharedRead = tokio::sync::OnceCell<Option<Arc<CachedObject>>>;

/// Removes a read from [`DiskTier::reads`] when a lookup of it ends (unless another read of
/// the key has taken its place).
struct Leave<'a> {
    reads: &'a Mutex<HashMap<String, Arc<SharedRead>>>,
    key: &'a str,
    read: &'a Arc<SharedRead>,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut reads = self.reads.lock().unwrap_or_else(|e| e.into_inner());
        if reads
            .get(self.key)
            .is_some_and(|r| Arc::ptr_eq(r, self.read))
        {
            reads.remove(self.key);
        }
    }
}

impl std::fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskTier")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl DiskTier {
    /// Opens (or creates) the tier in `dir`, sized by `settings` (its own `dir` is not read),
    /// recovering the index of what a previous run left there; blocks that do not read back
    /// are skipped. Must run inside a tokio runtime, whose threads then do the tier's writing
    /// and reading.
    pub async fn open(dir: &Path, settings: &DiskConfig) -> Result<DiskTier, DiskError> {
        let path = dir.to_path_buf();
        std::fs::create_dir_all(&path).map_err(|source| DiskError::Dir {
            path: path.clone(),
            source,
        })?;
        let engine = |e: foyer::Error| DiskError::Engine {
            path: path.clone(),
            message: e.to_string(),
        };
        let capacity = usize::try_from(settings.capacity).unwrap_or(usize::MAX);
        let block = usize::try_from(settings.block_size).unwrap_or(usize::MAX);
        let device = FsDeviceBuilder::new(dir)
            .with_capacity(capacity)
            .build()
            .map_err(engine)?;
        let blocks = Arc::new(BlockCounts::default());
        // foyer's default pickers (a block mostly removed or replaced first, then the oldest),
        // the second counting.
        let pickers: Vec<Box<dyn EvictionPicker>> = vec![
            Box::new(InvalidRatioPicker::new(0.8)),
            Box::new(CountingFifo {
                fifo: FifoPicker::default(),
                counts: Arc::clone(&blocks),
            }),
        ];
        let tapped = Arc::new(taps::Tapped::default());
        let cache = HybridCacheBuilder::new()
            .with_name("secondhit-disk")
            .with_metrics_registry(Box::new(taps::Taps(Arc::clone(&tapped))))
            .with_policy(HybridCachePolicy::WriteOnInsertion)
            .with_flush_on_close(true)
            .memory(1 << 20)
            .with_filter(|_: &String, _: &DiskObject| false)
            .storage()
            .with_io_engine_config(PsyncIoEngineConfig::new())
            .with_engine_config(
                BlockEngineConfig::new(device)
                    .with_block_size(block)
                    .with_buffer_pool_size(block.saturating_mul(2))
                    // Entries queued past this are dropped (foyer's default is 16 MiB, one
                    // default block): four blocks of objects already out of memory.
                    .with_submit_queue_size_threshold(block.saturating_mul(4))
                    .with_flushers(1)
                    .with_eviction_pickers(pickers)
                    .with_tombstone_log(true),
            )
            .with_recover_mode(RecoverMode::Quiet)
            .build()
            .await
            .map_err(engine)?;
        Ok(DiskTier {
            cache,
            budget: settings
                .max_write_rate
                .map(|r| Mutex::new(WriteBudget::new(r))),
            // The block's index and the entry's header take a few KiB of each block. foyer 0.22.6
            // drops (and counts) an entry that does not fit what is left of its write buffer
            // while a write is in flight; entries of more than half a block were dropped within
            // 40 writes in every run of `whole_blocks_are_evicted_oldest_first_and_counted` with
            // 600 KB objects in 1 MiB blocks: not written.
            max_object: (settings.block_size / 2).saturating_sub(64 << 10),
            counters: Counters::default(),
            blocks,
            block_size: settings.block_size,
            purge_file: Mutex::new(()),
            url_purges: Mutex::new(purges::UrlPurges::new(purges::KEPT)),
            tapped,
            read_latency: LatencyHistogram::default(),
            reads: Mutex::new(HashMap::new()),
            dir: path,
        })
    }

    /// Queues `object` under `key` for the disk at `now` (the proxy's clock, which the write
    /// budget runs on), unless the budget is spent or it is too large: [`DiskTier::reserve`],
    /// then [`DiskTier::write_reserved`].
    pub fn write(&self, key: &str, object: &Arc<CachedObject>, now: Duration) -> Written {
        match self.reserve(object.body.len() as u64, now) {
            Written::Queued => self.write_reserved(key, object),
            refused => refused,
        }
    }

    /// Whether an object of `len` body bytes may be written at `now`: not larger than half a
    /// block (less 64 KiB), and paid for by the write budget, which is charged now (body bytes,
    /// as the simulator's). `Queued` here means the write may go ahead.
    pub fn reserve(&self, len: u64, now: Duration) -> Written {
        if len > self.max_object {
            return Written::TooLarge;
        }
        if let Some(b) = &self.budget {
            let mut b = b.lock().unwrap_or_else(|e| e.into_inner());
            if !b.take(len, now) {
                self.counters.refusals.fetch_add(1, Relaxed);
                return Written::Refused;
            }
        }
        Written::Queued
    }

    /// Queues `object`, whose write [`DiskTier::reserve`] allowed. Still `TooLarge` if its
    /// headers take it past the bound.
    pub fn write_reserved(&self, key: &str, object: &Arc<CachedObject>) -> Written {
        let size = encoded_size(object) as u64;
        if size > self.max_object {
            return Written::TooLarge;
        }
        self.cache
            .storage_writer(key.to_owned())
            .force()
            .insert(DiskObject(Arc::clone(object)));
        self.counters.writes.fetch_add(1, Relaxed);
        self.counters.write_bytes.fetch_add(size, Relaxed);
        Written::Queued
    }

    /// Whether the disk may hold an object under `key` (its index says so; a hash collision can
    /// make this true for a key it does not hold): no read.
    pub fn may_hold(&self, key: &str) -> bool {
        self.cache.contains(key)
    }

    /// The object stored under `key`, if the disk has it whole. Lookups of one key while its
    /// read is in flight share that read (64 clients of one hot 1 MiB object make one read,
    /// not 64).
    pub async fn get(&self, key: &str) -> Option<Arc<CachedObject>> {
        let started = Instant::now();
        let read = Arc::clone(
            self.reads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(key.to_owned())
                .or_default(),
        );
        // Taken out of the map when this lookup ends, read or abandoned (so that lookups
        // abandoned mid-read leave nothing behind, whatever keys they asked for).
        let _leave = Leave {
            reads: &self.reads,
            key,
            read: &read,
        };
        let got = read.get_or_init(|| self.load(key)).await.clone();
        self.read_latency.observe(started.elapsed());
        let counter = match got {
            Some(_) => &self.counters.hits,
            None => &self.counters.misses,
        };
        counter.fetch_add(1, Relaxed);
        got
    }

    /// One read of `key` from foyer's storage, in the caller's task. (foyer's hybrid `get`
    /// hands each read to a task on the tier's runtime, which then hands the `pread` to a
    /// blocking thread, and inserts what it read into its own memory cache, which this tier
    /// keeps empty: in the profile of 16 KiB flash hits, 51 % of the proxy's CPU was on the
    /// tier's runtime threads, a third of it switching between threads.)
    async fn load(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.counters.reads.fetch_add(1, Relaxed);
        match self.cache.storage().load(key).await {
            Ok(Load::Entry { value, .. }) => Some(value.0),
            Ok(Load::Piece { piece, .. }) => Some(Arc::clone(&piece.value().0)),
            Ok(Load::Throttled | Load::Miss) => None,
            Err(e) => {
                self.counters.errors.fetch_add(1, Relaxed);
                tracing::warn!(error = %e, "disk read failed; served as a miss");
                None
            }
        }
    }

    /// The purge mark a previous run left (nanoseconds on the proxy's clock, 0 if none):
    /// objects stored before it are not to be served. A mark that does not read hides
    /// everything stored before `now` (logged): a purged object is never served again. Also
    /// loads the URL purges the previous run left ([`DiskTier::purge_url`]), with the same rule.
    pub fn purge_mark(&self, now: Duration) -> u64 {
        self.url_purges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .load(&self.dir, nanos(now));
        let path = self.dir.join(PURGE_MARK);
        let unreadable = |why: &dyn std::fmt::Display| {
            tracing::warn!(path = %path.display(), error = %why, "an unreadable purge mark: everything on disk stored before now is treated as purged");
            nanos(now)
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => match text.trim().parse() {
                Ok(n) => n,
                Err(e) => unreadable(&e),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => unreadable(&e),
        }
    }

    /// Keeps the purge mark for the next run: `mark`'s value read under a lock (so that of two
    /// purges the later mark is the one kept), written whole, synced, then renamed into place.
    /// A mark that cannot be saved is logged; this run still applies it.
    pub fn save_purge_mark(&self, mark: &AtomicU64) {
        let _one_at_a_time = self.purge_file.lock().unwrap_or_else(|e| e.into_inner());
        let path = self.dir.join(PURGE_MARK);
        let tmp = self.dir.join(format!("{PURGE_MARK}.tmp"));
        let saved = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            writeln!(f, "{}", mark.load(Relaxed))?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&self.dir)?.sync_all()
        })();
        if let Err(e) = saved {
            tracing::warn!(path = %path.display(), error = %e, "saving the purge mark");
        }
    }

    /// Forgets `key` (a purge).
    pub fn remove(&self, key: &str) {
        self.cache.remove(key);
    }

    /// Purges the URL whose primary key is `primary` at `now` (the proxy's clock), every
    /// variant of it: the object under the primary key is removed, and every object stored
    /// under it or one of its variant keys before `now` stops being served
    /// ([`DiskTier::url_purged`]), in this run and the next (see `disk/purges.rs` for why a
    /// mark and not a removal, and its bounds).
    pub fn purge_url(&self, primary: &str, now: Duration) {
        self.cache.remove(primary);
        self.url_purges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .purge(
                &self.dir,
                crate::hash::object_id(primary.as_bytes()),
                nanos(now),
            );
    }

    /// Whether the object stored at `stored_at` under `key` (a primary key, or a variant key:
    /// the primary key, `\n`, the selecting values) was purged by URL since.
    pub fn url_purged(&self, key: &str, stored_at: Duration) -> bool {
        let primary = key.split_once('\n').map_or(key, |(p, _)| p);
        self.url_purges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .purged(crate::hash::object_id(primary.as_bytes()), nanos(stored_at))
    }

    /// Writes out what is queued and stops the tier's tasks.
    pub async fn close(&self) {
        if let Err(e) = self.cache.close().await {
            tracing::warn!(error = %e, "closing the disk tier");
        }
    }

    /// Bytes written to the device so far (foyer's count: blocks and their indexes).
    pub fn device_write_bytes(&self) -> u64 {
        self.cache.statistics().disk_write_bytes() as u64
    }

    /// The counters.
    pub fn figures(&self) -> DiskFigures {
        let c = &self.counters;
        DiskFigures {
            hits: c.hits.load(Relaxed),
            misses: c.misses.load(Relaxed),
            reads: c.reads.load(Relaxed),
            writes: c.writes.load(Relaxed),
            write_bytes: c.write_bytes.load(Relaxed),
            refusals: c.refusals.load(Relaxed),
            errors: c.errors.load(Relaxed),
            evicted_blocks: self.blocks.evicted.load(Relaxed),
            bytes: self.blocks.sealed.load(Relaxed) * self.block_size,
            dropped: self.tapped.dropped.load(Relaxed),
        }
    }

    /// Adds the `secondhit_disk_*` families.
    pub fn collect(&self, out: &mut Families) {
        let f = self.figures();
        for (name, help, v) in [
            ("disk_hits", "Requests served from the flash tier", f.hits),
            (
                "disk_misses",
                "Memory misses the flash tier did not have",
                f.misses,
            ),
            (
                "disk_reads",
                "Reads of the flash tier (lookups of one key at once share one)",
                f.reads,
            ),
            ("disk_writes", "Objects written to the flash tier", f.writes),
            (
                "disk_write_bytes",
                "Bytes of objects written to the flash tier",
                f.write_bytes,
            ),
            ("disk_refusals", "Writes the write budget refused", f.refusals),
            (
                "disk_read_errors",
                "Flash reads that failed (served as misses)",
                f.errors,
            ),
            (
                "disk_device_write_bytes",
                "Bytes written to the device (blocks and their indexes)",
                self.device_write_bytes(),
            ),
            (
                "disk_evictions",
                "Blocks evicted for room (whole blocks: mostly removed ones first, else the oldest)",
                f.evicted_blocks,
            ),
            (
                "disk_dropped_writes",
                "Writes the engine dropped, its queue or buffer full (counted in writes too)",
                f.dropped,
            ),
        ] {
            out.counter(name, help, v);
        }
        out.gauge(
            "disk_bytes",
            "Bytes in the flash tier's sealed blocks, each counted whole",
            f.bytes,
        );
        out.histograms(
            "disk_read_latency_seconds",
            "Flash tier lookups",
            [(Labels::new(), self.read_latency.snapshot())],
        );
        out.histograms(
            "disk_write_latency_seconds",
            "Device writes (a buffer of entries each)",
            [(Labels::new(), self.tapped.write_latency.snapshot())],
        );
    }
}

fn encoded_size(o: &CachedObject) -> usize {
    let headers: usize = o
        .headers
        .iter()
        .map(|(n, v)| 2 + n.as_str().len() + 4 + v.len())
        .sum();
    let tags: usize = o.tags.iter().map(|t| 4 + t.len()).sum();
    1 + 2 + 6 * 8 + 1 + 4 + headers + 4 + tags + 8 + o.body.len()
}

fn io(e: std::io::Error) -> foyer::Error {
    foyer::Error::io_error(e)
}

fn bad(what: &str) -> foyer::Error {
    io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        what.to_owned(),
    ))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn read_u64(r: &mut impl Read) -> foyer::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b).map_err(io)?;
    Ok(u64::from_le_bytes(b))
}

fn read_u32(r: &mut impl Read) -> foyer::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b).map_err(io)?;
    Ok(u32::from_le_bytes(b))
}

fn read_bytes(r: &mut impl Read, n: usize, limit: usize) -> foyer::Result<Vec<u8>> {
    if n > limit {
        return Err(bad("a length past the entry's end"));
    }
    let mut v = vec![0u8; n];
    r.read_exact(&mut v).map_err(io)?;
    Ok(v)
}

/// No field of a stored response is longer than this (bodies have their own bound).
const FIELD_LIMIT: usize = 1 << 20;
/// Nor is a body.
const BODY_LIMIT: usize = 1 << 32;

impl Code for DiskObject {
    fn encode(&self, w: &mut impl Write) -> foyer::Result<()> {
        let o = &self.0;
        let mut head = Vec::with_capacity(encoded_size(o) - o.body.len());
        head.push(FORMAT);
        head.extend_from_slice(&o.status.as_u16().to_le_bytes());
        for d in [
            o.stored_at,
            o.fresh_until,
            o.initial_age,
            o.stale_while_revalidate,
            o.stale_if_error,
            o.keep_until,
        ] {
            head.extend_from_slice(&nanos(d).to_le_bytes());
        }
        head.push(u8::from(o.auth_ok));
        let fields: Vec<_> = o.headers.iter().collect();
        head.extend_from_slice(&(fields.len() as u32).to_le_bytes());
        for (name, value) in fields {
            head.extend_from_slice(&(name.as_str().len() as u16).to_le_bytes());
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(&(value.len() as u32).to_le_bytes());
            head.extend_from_slice(value.as_bytes());
        }
        head.extend_from_slice(&(o.tags.len() as u32).to_le_bytes());
        for t in o.tags.iter() {
            head.extend_from_slice(&(t.len() as u32).to_le_bytes());
            head.extend_from_slice(t.as_bytes());
        }
        head.extend_from_slice(&(o.body.len() as u64).to_le_bytes());
        w.write_all(&head).map_err(io)?;
        w.write_all(&o.body).map_err(io)
    }

    fn decode(r: &mut impl Read) -> foyer::Result<Self> {
        let mut version = [0u8; 1];
        r.read_exact(&mut version).map_err(io)?;
        if version[0] != FORMAT {
            return Err(bad("another format version"));
        }
        let mut status = [0u8; 2];
        r.read_exact(&mut status).map_err(io)?;
        let status =
            StatusCode::from_u16(u16::from_le_bytes(status)).map_err(|_| bad("a bad status"))?;
        let mut times = [Duration::ZERO; 6];
        for t in &mut times {
            *t = Duration::from_nanos(read_u64(r)?);
        }
        let mut auth = [0u8; 1];
        r.read_exact(&mut auth).map_err(io)?;
        let fields = read_u32(r)? as usize;
        if fields > 10_000 {
            return Err(bad("too many fields"));
        }
        let mut headers = HeaderMap::with_capacity(fields);
        for _ in 0..fields {
            let mut n = [0u8; 2];
            r.read_exact(&mut n).map_err(io)?;
            let name = read_bytes(r, usize::from(u16::from_le_bytes(n)), FIELD_LIMIT)?;
            let name = HeaderName::from_bytes(&name).map_err(|_| bad("a bad field name"))?;
            let n = read_u32(r)? as usize;
            let value = HeaderValue::from_bytes(&read_bytes(r, n, FIELD_LIMIT)?)
                .map_err(|_| bad("a bad field value"))?;
            headers.append(name, value);
        }
        let tags = read_u32(r)? as usize;
        if tags > 10_000 {
            return Err(bad("too many tags"));
        }
        let mut tag_list = Vec::with_capacity(tags);
        for _ in 0..tags {
            let n = read_u32(r)? as usize;
            let t = String::from_utf8(read_bytes(r, n, FIELD_LIMIT)?)
                .map_err(|_| bad("a tag that is not UTF-8"))?;
            tag_list.push(t.into_boxed_str());
        }
        let n = usize::try_from(read_u64(r)?).map_err(|_| bad("a body too large"))?;
        let body = Bytes::from(read_bytes(r, n, BODY_LIMIT)?);
        let [stored_at, fresh_until, initial_age, stale_while_revalidate, stale_if_error, keep_until] =
            times;
        Ok(DiskObject(Arc::new(CachedObject {
            status,
            headers: StoredHeaders::new(&headers),
            body,
            stored_at,
            fresh_until,
            initial_age,
            auth_ok: auth[0] != 0,
            stale_while_revalidate,
            stale_if_error,
            keep_until,
            tags: tag_list.into_boxed_slice(),
            bound_for_disk: std::sync::atomic::AtomicBool::new(false),
        })))
    }

    fn estimated_size(&self) -> usize {
        encoded_size(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_cache::Freshness;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("secondhit-disk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn settings(rate: Option<u64>) -> DiskConfig {
        DiskConfig {
            dir: None,
            capacity: 8 << 20,
            block_size: 1 << 20,
            max_write_rate: rate,
        }
    }

    fn object(i: usize, size: usize) -> Arc<CachedObject> {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("image/jpeg"));
        h.append("x-many", HeaderValue::from_static("a"));
        h.append("x-many", HeaderValue::from_static("b"));
        h.insert("surrogate-key", HeaderValue::from_static("t1 t2"));
        let body: Vec<u8> = (0..size).map(|b| (b * 31 + i) as u8).collect();
        let freshness = Freshness {
            lifetime: Duration::from_secs(60),
            initial_age: Duration::ZERO,
            no_cache: false,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::from_secs(5),
        };
        Arc::new(CachedObject::new(
            StatusCode::OK,
            h,
            Bytes::from(body),
            Duration::from_secs(1_000),
            &freshness,
            Duration::from_secs(10),
        ))
    }

    fn same(a: &CachedObject, b: &CachedObject) {
        assert_eq!(a.status, b.status);
        assert_eq!(a.body, b.body);
        let fields = |o: &CachedObject| {
            o.headers
                .iter()
                .map(|(n, v)| (n.clone(), v))
                .collect::<Vec<_>>()
        };
        assert_eq!(fields(a), fields(b));
        assert_eq!(
            (a.stored_at, a.fresh_until, a.keep_until, a.auth_ok),
            (b.stored_at, b.fresh_until, b.keep_until, b.auth_ok)
        );
        assert_eq!(a.tags, b.tags);
    }

    /// Waits until foyer has flushed what was queued (its writes are asynchronous).
    async fn settle(tier: &DiskTier, key: &str) -> Option<Arc<CachedObject>> {
        for _ in 0..300 {
            if let Some(o) = tier.get(key).await {
                return Some(o);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn objects_come_back_whole_and_survive_a_restart() {
        let d = dir("restart");
        let tier = DiskTier::open(&d, &settings(None)).await.unwrap();
        let objects: Vec<_> = (0..20).map(|i| object(i, 10_000 + i * 100)).collect();
        for (i, o) in objects.iter().enumerate() {
            assert_eq!(
                tier.write(&format!("k{i}"), o, Duration::ZERO),
                Written::Queued
            );
        }
        for (i, o) in objects.iter().enumerate() {
            same(&settle(&tier, &format!("k{i}")).await.expect("on disk"), o);
        }
        assert!(tier.get("absent").await.is_none());
        let f = tier.figures();
        assert_eq!((f.writes, f.refusals), (20, 0));
        tier.close().await;
        drop(tier);
        let again = DiskTier::open(&d, &settings(None)).await.unwrap();
        for (i, o) in objects.iter().enumerate() {
            same(&again.get(&format!("k{i}")).await.expect("recovered"), o);
        }
        again.close().await;
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lookups_of_one_key_at_once_share_one_read() {
        let d = dir("shared-reads");
        let tier = DiskTier::open(&d, &settings(None)).await.unwrap();
        let o = object(7, 300_000);
        tier.write("hot", &o, Duration::ZERO);
        assert!(settle(&tier, "hot").await.is_some());
        // Read back from the device (not from the queue of writes, which needs no read).
        tier.close().await;
        drop(tier);
        let tier = Arc::new(DiskTier::open(&d, &settings(None)).await.unwrap());
        // A lookup abandoned while its read is in flight (its client left) leaves nothing
        // behind: polled once, it has started the device read and waits for it (unless the
        // blocking thread was quicker than the poll: then again); then dropped.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let abandoned = (0..1000).any(|_| {
            use std::future::Future;
            let mut lookup = Box::pin(tier.get("hot"));
            lookup.as_mut().poll(&mut cx).is_pending() && tier.reads.lock().unwrap().len() == 1
        });
        assert!(abandoned, "no lookup was ever caught mid-read");
        assert!(
            tier.reads.lock().unwrap().is_empty(),
            "an abandoned read left behind"
        );
        let before = tier.figures();
        let lookups: Vec<_> = (0..32)
            .map(|_| {
                let tier = Arc::clone(&tier);
                tokio::spawn(async move { tier.get("hot").await })
            })
            .collect();
        for l in lookups {
            same(&l.await.unwrap().expect("every lookup has it"), &o);
        }
        let after = tier.figures();
        assert_eq!(after.hits - before.hits, 32);
        let reads = after.reads - before.reads;
        assert!(
            (1..32).contains(&reads),
            "32 lookups at once made {reads} reads"
        );
        assert!(tier.reads.lock().unwrap().is_empty(), "no read left behind");
        tier.close().await;
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_corrupt_block_is_never_served() {
        let d = dir("corrupt");
        let tier = DiskTier::open(&d, &settings(None)).await.unwrap();
        let objects: Vec<_> = (0..10).map(|i| object(i, 50_000)).collect();
        for (i, o) in objects.iter().enumerate() {
            tier.write(&format!("k{i}"), o, Duration::ZERO);
        }
        for i in 0..10 {
            assert!(settle(&tier, &format!("k{i}")).await.is_some());
        }
        tier.close().await;
        drop(tier);
        // Every byte of every block file's first 600 KiB flipped: the entries' checksums fail.
        for f in std::fs::read_dir(&d).unwrap() {
            let p = f.unwrap().path();
            let mut data = std::fs::read(&p).unwrap();
            let n = data.len().min(600 << 10);
            for b in &mut data[..n] {
                *b = !*b;
            }
            std::fs::write(&p, data).unwrap();
        }
        let again = DiskTier::open(&d, &settings(None)).await.unwrap();
        let mut served = 0;
        for (i, o) in objects.iter().enumerate() {
            // Whole or not at all: never other bytes.
            if let Some(got) = again.get(&format!("k{i}")).await {
                same(&got, o);
                served += 1;
            }
        }
        // All ten lay in the flipped bytes.
        assert_eq!(served, 0);
        again.close().await;
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_write_budget_refuses_and_counts() {
        let d = dir("budget");
        // 100 KB a second: at one clock instant, two 40 KB objects fit and the third does not.
        let tier = DiskTier::open(&d, &settings(Some(100_000))).await.unwrap();
        let o = object(1, 40_000);
        let now = Duration::from_secs(5);
        assert_eq!(tier.write("a", &o, now), Written::Queued);
        assert_eq!(tier.write("b", &o, now), Written::Queued);
        assert_eq!(tier.write("c", &o, now), Written::Refused);
        // A second later the bucket is full again.
        assert_eq!(
            tier.write("d", &o, now + Duration::from_secs(1)),
            Written::Queued
        );
        let f = tier.figures();
        assert_eq!((f.writes, f.refusals), (3, 1));
        assert_eq!(
            tier.write("big", &object(2, 2 << 20), now),
            Written::TooLarge
        );
        tier.close().await;
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn whole_blocks_are_evicted_oldest_first_and_counted() {
        let d = dir("evict");
        // 8 blocks of 1 MiB; objects of 300 KB, three a block: 120 of them fill 40 blocks, so
        // about 32 are evicted, and the tier never holds more than its 8 blocks.
        let tier = DiskTier::open(&d, &settings(None)).await.unwrap();
        let mut lost = 0;
        for i in 0..120 {
            let key = format!("k{i}");
            let queued = tier.write(&key, &object(i, 300_000), Duration::ZERO);
            assert_eq!(queued, Written::Queued);
            // One at a time, so that blocks are sealed in order. foyer 0.22 now and then drops
            // a queued write, its buffer full while a write is in flight (a cache may), more
            // often on a loaded machine (CI lost 10 of 120 once): bounded below.
            if settle(&tier, &key).await.is_none() {
                lost += 1;
            }
        }
        // Blocks are reclaimed in the background: wait (10 s at most) until the evictions have
        // caught up with the writes, as a loaded machine may take a while to.
        let mut f = tier.figures();
        for _ in 0..200 {
            if f.evicted_blocks + 10 >= ((120 - lost) / 3) as u64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            f = tier.figures();
        }
        assert!(lost <= 30, "{lost} writes lost: {f:?}");
        // Not compared with `f.dropped`: foyer's count and the writes seen lost agree in most
        // runs, not all (CI once saw 2 drops for 1 write lost).
        // Blocks written less the 8 the tier has, give or take the one being filled and the
        // one kept clean. A write foyer dropped after it was seen filled no block either (CI
        // once saw 23 drops for 1 write lost): its drops bound what was written.
        let dropped = usize::try_from(f.dropped).unwrap_or(usize::MAX);
        let blocks = 120usize.saturating_sub(lost.max(dropped)) / 3;
        assert!(
            f.evicted_blocks + 10 >= blocks as u64 && f.evicted_blocks <= 40,
            "{lost} lost: {f:?}"
        );
        assert!(f.bytes > 0 && f.bytes <= 8 << 20, "{f:?}");
        assert!(tier.get("k0").await.is_none(), "the oldest object survived");
        let mut newest = 0;
        for i in 110..120 {
            newest += usize::from(tier.get(&format!("k{i}")).await.is_some());
        }
        // A write foyer dropped after it was seen is gone too: its drops bound what is lost.
        let gone = lost.max(dropped);
        assert!(
            newest >= 10usize.saturating_sub(gone),
            "{newest} of the 10 newest readable, {lost} lost: {f:?}"
        );
        let mut families = Families::default();
        tier.collect(&mut families);
        let m = families.encode();
        // Reclaiming goes on in the background: the figures may have moved on, not back.
        let value = |name: &str| -> u64 {
            let line = m.lines().find(|l| l.starts_with(name)).expect(name);
            line[name.len()..].trim().parse().expect(line)
        };
        assert!(
            value("secondhit_disk_evictions_total ") >= f.evicted_blocks,
            "{m}"
        );
        assert!(value("secondhit_disk_bytes ") <= 8 << 20, "{m}");
        // Every block went to the device in one or more timed writes.
        assert!(
            value("secondhit_disk_write_latency_seconds_count ") >= 40,
            "{m}"
        );
        tier.close().await;
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn the_purge_mark_is_kept_and_an_unreadable_one_hides_everything() {
        let d = dir("mark");
        let tier = DiskTier::open(&d, &settings(None)).await.unwrap();
        let now = Duration::from_secs(7);
        assert_eq!(tier.purge_mark(now), 0, "no mark yet");
        tier.save_purge_mark(&AtomicU64::new(5_000));
        assert_eq!(tier.purge_mark(now), 5_000);
        std::fs::write(d.join(PURGE_MARK), "not a number").unwrap();
        assert_eq!(tier.purge_mark(now), 7_000_000_000, "fails closed");
        tier.close().await;
        let _ = std::fs::remove_dir_all(&d);
    }
}
