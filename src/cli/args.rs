//! Every flag of every subcommand, and how each set of flags becomes the crates' typed
//! settings. Parsing happens here once; the subcommands' modules receive typed values.

use clap::{Parser, Subcommand};
use http::HeaderName;
use secondhit::admission::{Policy, Settings};
use secondhit::bloom::Layout;
use secondhit::config::{
    parse_moka_eviction, Config, ConfigError, GroupConfig, LogLevel, OriginRef,
};
use secondhit::lab::ShadowSpec;
use secondhit::sim;
use secondhit::store::{Eviction, StoreKind};
use secondhit::trace::{CsvSpec, Format};
use secondhit::units;
use std::net::SocketAddr;
use std::path::PathBuf;

/// A CDN edge cache that stores an object only on its second request, and a lab that measures
/// that choice on real access traces.
#[derive(Parser, Debug)]
#[command(name = "secondhit", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// The whole mission in one command: origin + proxy on loopback, the bundled trace replayed
    /// through them per policy, live figures beside simulate's prediction.
    Demo(DemoArgs),
    /// Run the caching reverse proxy in front of configured origins.
    ///
    /// Example: secondhit serve --origin http://127.0.0.1:8081 --listen 127.0.0.1:8080
    Serve(ServeArgs),
    /// Replay a trace through admission policies, evictions and cache sizes; report hit ratios
    /// and cache writes.
    ///
    /// With no options: the bundled web trace, admit-all vs second-hit vs second-hit-exact, LRU,
    /// at 1 %, 5 % and 10 % of the working set.
    Simulate(SimulateArgs),
    /// Replay a trace as HTTP load against any cache; hit ratio, offload, latency, errors.
    ///
    /// Example: secondhit replay --target http://127.0.0.1:8080 --origin-stats http://127.0.0.1:8081/_stats
    Replay(ReplayArgs),
    /// A synthetic origin: GET /<key>?size=N returns N verifiable bytes; counters at /_stats.
    ///
    /// Example: secondhit origin --listen 127.0.0.1:8081 --latency 5ms
    Origin(OriginArgs),
    /// Summarise a trace: requests, objects, one-hit wonders, working set, popularity skew.
    ///
    /// Example: secondhit trace-stats traces/request.trace.xz
    TraceStats(TraceStatsArgs),
    /// Rewrite any readable trace as libCacheSim's oracleGeneral, with next-access times, so that
    /// other tools (libCacheSim, `simulate --eviction belady`) see the same objects.
    ///
    /// Example: secondhit trace-convert traces/request.trace.xz --out /tmp/web.oracleGeneral.bin
    TraceConvert(TraceConvertArgs),
    /// Write a seeded synthetic trace (Zipf popularity, one-time objects, sized objects).
    ///
    /// Example: secondhit gen-trace --out /tmp/zipf.tr --requests 10000000
    GenTrace(GenTraceArgs),
    /// Size a Bloom filter generation (bits, hashes, memory) and optionally measure it.
    ///
    /// Example: secondhit bloom --items 100000000 --fpr 0.01 --measure
    Bloom(BloomArgs),
}

/// Where a trace comes from and how to read it.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct TraceInput {
    /// Trace format: oracle-general, webcachesim, cache2k, tencent-photo, csv or
    /// secondhit-recording. Left out: a recording of `serve --record` is recognised by its
    /// content, any other format guessed from the file name (after any .gz/.xz/.bz2/.zst
    /// extension).
    #[arg(long)]
    pub(crate) format: Option<String>,
    /// For --format csv: which 1-based columns hold the fields, e.g. "time=1,key=2,size=3"
    /// (leave out time or size for none: index and 1); add "range=4" for a column of byte ranges
    /// asked ("FIRST-LAST", "FIRST-", or empty for the whole object).
    #[arg(long, default_value = "time=1,key=2,size=3")]
    pub(crate) csv_columns: String,
    /// For --format csv: the field separator (one character; "tab" for a tab).
    #[arg(long, default_value = ",")]
    pub(crate) csv_delimiter: String,
    /// For --format csv: skip the first line.
    #[arg(long)]
    pub(crate) csv_header: bool,
}

impl TraceInput {
    pub(crate) fn format(&self) -> anyhow::Result<Option<Format>> {
        let Some(name) = &self.format else {
            return Ok(None);
        };
        let format: Format = name.parse()?;
        if let Format::Csv(_) = format {
            let mut spec: CsvSpec = self.csv_columns.parse().map_err(anyhow::Error::msg)?;
            spec.delimiter = match self.csv_delimiter.as_str() {
                "tab" | "\\t" => b'\t',
                d if d.len() == 1 => d.as_bytes()[0],
                d => anyhow::bail!("--csv-delimiter {d:?}: expected one character or \"tab\""),
            };
            spec.header = self.csv_header;
            return Ok(Some(Format::Csv(spec)));
        }
        Ok(Some(format))
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct TraceStatsArgs {
    /// The trace file (compressed or not).
    pub(crate) file: PathBuf,
    #[command(flatten)]
    pub(crate) input: TraceInput,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    pub(crate) json: bool,
    /// Cache sizes at which to bound what second-hit can lose (the second requests an admit-all
    /// LRU of that size serves), comma-separated, in bytes or with a unit (64MiB, 2GB).
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes, conflicts_with = "capacity_fraction")]
    pub(crate) capacity: Vec<u64>,
    /// The same cache sizes as fractions of the working set, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.01,0.05,0.1")]
    pub(crate) capacity_fraction: Vec<f64>,
    /// Admission windows, comma-separated: the share of second requests within each (trace
    /// time: the line number for webcachesim traces, the index for cache2k).
    #[arg(long, value_delimiter = ',', default_value = "1m,10m,1h,1d", value_parser = parse_finite_window)]
    pub(crate) window: Vec<std::time::Duration>,
    /// Draw the second-request distances in bytes (cumulative, log axis) with the cache sizes
    /// marked into FILE.svg.
    #[arg(long, value_name = "FILE", conflicts_with = "no_distance")]
    pub(crate) plot: Option<PathBuf>,
    /// Only the summary: leave out the second-request distances (which hold about 100 bytes per
    /// object more in memory, and take longer).
    #[arg(long)]
    pub(crate) no_distance: bool,
}

/// A window that ends ("inf" is refused: every second request is within it).
fn parse_finite_window(s: &str) -> Result<std::time::Duration, String> {
    match secondhit::units::parse_duration(s)? {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(format!(
            "{s:?}: give a window longer than 0 that ends, e.g. 10m or 1h"
        )),
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct TraceConvertArgs {
    /// The trace file (compressed or not), in any format `simulate` reads.
    pub(crate) file: PathBuf,
    #[command(flatten)]
    pub(crate) input: TraceInput,
    /// The oracleGeneral file to write (".gz" or ".zst" at the end compresses it). Objects are
    /// numbered densely from 0 in first-seen order by the source's key rule; each record carries
    /// the 1-based position of the same object's next request (-1: never), as libCacheSim's
    /// converter writes it. Holds 8 bytes per request and
    /// one map entry per object in memory while it runs.
    #[arg(long)]
    pub(crate) out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub(crate) struct DemoArgs {
    /// Requests of the bundled trace to replay.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) requests: u64,
    /// Cache size as a fraction of those requests' working set.
    #[arg(long, default_value_t = 0.05)]
    pub(crate) capacity_fraction: f64,
    /// Policies, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "admit-all,second-hit")]
    pub(crate) policy: Vec<Policy>,
    /// Requests in flight at once (1 keeps the trace's order, and the agreement tight).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(crate) concurrency: u64,
    /// Run the proxy in lab mode (cache.lab_mode: body-only weights, the simulator's moka
    /// maintenance) and predict with body-only weights: live equals simulated exactly. Default:
    /// production settings, predicted with `simulate --object-cost serve`.
    #[arg(long)]
    pub(crate) lab_mode: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct OriginArgs {
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub(crate) listen: std::net::SocketAddr,
    /// max-age of every response, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub(crate) max_age: u64,
    /// Delay before every response's headers (e.g. 5ms).
    #[arg(long, value_parser = parse_finite_duration)]
    pub(crate) latency: Option<std::time::Duration>,
    /// Share of requests answered with 503.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) error_rate: f64,
    /// Share of requests whose connection resets after half the body.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) reset_rate: f64,
    /// Share of requests whose body stops short of its Content-Length.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) short_rate: f64,
    /// Share of requests whose body drips, 1 KiB per 100 ms.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) drip_rate: f64,
    /// Seed of the fault choices.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ReplayArgs {
    /// The trace file (default: the bundled request.trace.xz).
    #[arg(long)]
    pub(crate) trace: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) input: TraceInput,
    /// The cache to drive, http://host:port.
    #[arg(long)]
    pub(crate) target: String,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 16)]
    pub(crate) concurrency: usize,
    /// At most this many requests per second.
    #[arg(long, conflicts_with = "speed")]
    pub(crate) rate: Option<f64>,
    /// Follow the trace's timestamps, sped up this many times.
    #[arg(long)]
    pub(crate) speed: Option<f64>,
    /// Replay only the first N requests (after --skip).
    #[arg(long)]
    pub(crate) limit: Option<u64>,
    /// Start after the trace's first N requests (not sent): replay a trace in parts, e.g.
    /// --skip 20000 --limit 5000 sends requests 20,001 to 25,000.
    #[arg(long, default_value_t = 0)]
    pub(crate) skip: u64,
    /// Leave the first N requests out of the figures.
    #[arg(long, default_value_t = 0)]
    pub(crate) warmup: u64,
    /// Stop after this long (e.g. 60s), wherever the trace is.
    #[arg(long, value_parser = parse_window)]
    pub(crate) duration: Option<WindowArg>,
    /// The origin's stats URL (secondhit origin: http://host:port/_stats), to count offload.
    #[arg(long)]
    pub(crate) origin_stats: Option<String>,
    /// Write the report as one JSON object to FILE, or to stdout with "-".
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ServeArgs {
    /// TOML configuration file (see secondhit.example.toml); flags override it.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) overrides: Overrides,
}

#[derive(clap::Args, Debug)]
pub(crate) struct SimulateArgs {
    /// The trace file (default: the bundled request.trace.xz, compiled into the binary).
    #[arg(long)]
    pub(crate) trace: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) input: TraceInput,
    /// Admission policies, comma-separated: admit-all, second-hit, second-hit-exact, nth-hit:N,
    /// nth-hit-exact:N, prob:P (admit with probability P, seeded), size:BYTES (admit objects up
    /// to a size, e.g. size:1MiB).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "admit-all,second-hit,second-hit-exact"
    )]
    pub(crate) policy: Vec<Policy>,
    /// Eviction policies, comma-separated. The exact store: lru, fifo, clock, sieve, s3fifo, arc,
    /// wtinylfu, lfu, belady, belady-size (each libCacheSim 0.3.5's, with its defaults), or all
    /// of them; moka's store (--store moka): lru, tinylfu.
    #[arg(long, value_delimiter = ',', default_value = "lru", value_parser = parse_eviction)]
    pub(crate) eviction: Vec<Evictions>,
    /// Store: exact (every eviction but tinylfu, exact against libCacheSim) or moka (the proxy's
    /// store, exact maintenance: lru and tinylfu).
    #[arg(long, default_value = "exact")]
    pub(crate) store: StoreKind,
    /// Cache sizes, comma-separated, in bytes or with a unit (64MiB, 2GB); objects for traces
    /// without sizes.
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes, conflicts_with = "capacity_fraction")]
    pub(crate) capacity: Vec<u64>,
    /// Cache sizes as fractions of the working set, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.01,0.05,0.1")]
    pub(crate) capacity_fraction: Vec<f64>,
    /// Filter window: how long a generation takes inserts (e.g. 30m, 1h, inf). Trace time is in
    /// the trace's seconds (the line number for webcachesim traces, the index for cache2k).
    #[arg(long, default_value = "1h", value_parser = parse_window)]
    pub(crate) window: WindowArg,
    /// Distinct keys one filter generation is sized for, or "auto": count the distinct keys of
    /// each window in a first pass over the trace and size for the busiest one.
    #[arg(long, default_value = "1000000", value_parser = parse_expected_items)]
    pub(crate) expected_items: ExpectedItems,
    /// Target false-positive rate of one generation.
    #[arg(long, default_value_t = Settings::DEFAULT_FPR)]
    pub(crate) fpr: f64,
    /// Filter layout: blocked or standard.
    #[arg(long, default_value = "blocked", value_parser = parse_layout)]
    pub(crate) layout: Layout,
    /// Worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub(crate) threads: usize,
    /// Replay only the first N requests of the trace.
    #[arg(long)]
    pub(crate) limit: Option<u64>,
    /// Spatial sampling (SHARDS): simulate only the keys whose hash falls in this fraction of
    /// the hash space, in caches that much smaller; ratios estimate the whole trace's at a
    /// fraction of the time and memory (e.g. 0.01 for miss-ratio curves over many sizes).
    #[arg(long)]
    pub(crate) sample: Option<f64>,
    /// Predict a cluster: N nodes behind a consistent-hash balancer (a ring of 160 points per
    /// node, as nginx's `hash ... consistent`, and haproxy's `hash-type consistent` with
    /// `weight 10`), each key on
    /// one node with its own filter and cache. Figures are the cluster's totals; --json adds
    /// `per_node`.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) nodes: usize,
    /// With --nodes: split (each node has capacity / N: the same total memory) or each (each
    /// node has the whole capacity).
    #[arg(long, default_value = "split", value_name = "split|each")]
    pub(crate) node_capacity: sim::NodeCapacity,
    /// A flash tier below memory, of these sizes (comma-separated, bytes or with a unit): each
    /// run becomes memory (--policy, --eviction lru or fifo, --capacity or --capacity-fraction)
    /// above flash (--disk-policy, --disk-eviction); the report gives the hit ratio per tier
    /// and the bytes written to flash per byte served.
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes, value_name = "SIZE")]
    pub(crate) disk_capacity: Vec<u64>,
    /// Which objects reach flash, comma-separated (with --disk-capacity).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "second-hit",
        value_name = "POLICY",
        requires = "disk_capacity"
    )]
    pub(crate) disk_policy: Vec<Policy>,
    /// How flash evicts (with --disk-capacity): fifo (a log-structured flash cache), lru,
    /// clock, sieve, s3fifo or lfu.
    #[arg(
        long,
        default_value = "fifo",
        value_name = "EVICTION",
        requires = "disk_capacity"
    )]
    pub(crate) disk_eviction: Eviction,
    /// At most this many bytes written to flash a second of trace time (with --disk-capacity;
    /// for traces whose time is the request's number, a second is a request): the writes
    /// beyond are refused and counted (flash endurance as a setting).
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES", requires = "disk_capacity")]
    pub(crate) disk_write_rate: Option<u64>,
    /// Evict flash in whole blocks of SIZE, as serve's flash tier does (cache.disk.block_size,
    /// 16MiB by default): each object takes its entry rounded up to 4 KiB, one block is kept
    /// clean, and the oldest block leaves whole (with --disk-eviction fifo). Left out: object
    /// by object.
    #[arg(long, value_parser = parse_nonzero_bytes, value_name = "SIZE", requires = "disk_capacity")]
    pub(crate) disk_block_size: Option<u64>,
    /// A shield tier of N caches below the edge (the run's cache, or --nodes of them): every
    /// edge miss goes to one of them by consistent hash of the key, and only their misses
    /// reach the origin; the report adds the shield's hit ratio and the origin's requests.
    #[arg(long, value_name = "N", requires = "shield_capacity")]
    pub(crate) shield_nodes: Option<usize>,
    /// The shield tier's capacity, all its caches together (with --shield-nodes).
    #[arg(long, value_parser = parse_bytes, value_name = "SIZE", requires = "shield_nodes")]
    pub(crate) shield_capacity: Option<u64>,
    /// The shield tier's admission policy (with --shield-nodes).
    #[arg(
        long,
        value_name = "POLICY",
        default_value = "second-hit",
        requires = "shield_nodes"
    )]
    pub(crate) shield_policy: Policy,
    /// Do not step admit-all beside each other policy (its runs then take half the time, and
    /// the report has no hits lost and gained against admit-all).
    #[arg(long)]
    pub(crate) no_decompose: bool,
    /// Predict `serve --slice-size SIZE`: each request becomes the aligned slices of SIZE bytes
    /// it covers (its range, from a trace that has them, else the whole object), each admitted
    /// and stored on its own; an object of one slice or less stays whole. Counts, sizes and the
    /// working set are then in slices. 0: off.
    #[arg(long, value_parser = parse_bytes, value_name = "SIZE", default_value = "0")]
    pub(crate) slice_size: u64,
    /// Weigh each stored object as its body plus COST bytes, as `serve` charges its key, header
    /// fields and bookkeeping against `cache.capacity`: `serve` for what it charges a typical
    /// object (docs/lab.md, "The cost model"), or a size for a foreign cache. Hits and bytes stay
    /// body bytes. 0: an object weighs its size (libCacheSim's model).
    #[arg(long, value_parser = parse_object_cost, value_name = "serve|COST", default_value = "0")]
    pub(crate) object_cost: u64,
    /// On a recording of `serve --record` (which says how long each object stayed fresh): how
    /// long a stale object is kept for revalidation before it is dropped, as serve's
    /// cache.stale_keep. A stale hit is not a hit: the live cache revalidated it.
    #[arg(long, value_parser = parse_finite_duration, default_value = "4h")]
    pub(crate) stale_keep: std::time::Duration,
    /// Write the report as one JSON object to FILE, or to stdout with "-".
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Write one CSV line per run to FILE.
    #[arg(long)]
    pub(crate) csv: Option<PathBuf>,
    /// Draw hit ratio and byte hit ratio against cache size into FILE.svg.
    #[arg(long)]
    pub(crate) plot: Option<PathBuf>,
    /// Write the admission filter's state at the end of the run into DIR (one policy, one
    /// eviction, one size), in the format `serve --state-dir DIR` loads: a filter warmed offline.
    #[arg(long, value_name = "DIR", conflicts_with = "plan")]
    pub(crate) save_state: Option<PathBuf>,
    /// Do not simulate: write the sweep as independent jobs into DIR (`DIR/jobs.txt`, one
    /// command line per policy x eviction x size, each writing `DIR/results/job-NNNN.json`), for
    /// GNU parallel, a Slurm array or Kubernetes Jobs. `--merge` combines their results.
    #[arg(long, value_name = "DIR", conflicts_with = "merge")]
    pub(crate) plan: Option<PathBuf>,
    /// Do not simulate: combine the JSON results of planned jobs (or any runs of the same trace
    /// and settings) into one report, printed and written as --json, --csv and --plot ask.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub(crate) merge: Vec<PathBuf>,
}

/// `--expected-items`: a number, or `auto` (sized from the trace).
#[derive(Clone, Copy, Debug)]
pub(crate) enum ExpectedItems {
    Fixed(u64),
    Auto,
}

pub(crate) fn parse_expected_items(s: &str) -> Result<ExpectedItems, String> {
    match s.trim() {
        "auto" => Ok(ExpectedItems::Auto),
        n => n
            .replace('_', "")
            .parse()
            .map(ExpectedItems::Fixed)
            .map_err(|_| format!("{s:?}: expected a number of keys or \"auto\"")),
    }
}

/// A window: `None` never rotates on time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WindowArg(pub(crate) Option<std::time::Duration>);

pub(crate) fn parse_window(s: &str) -> Result<WindowArg, String> {
    secondhit::units::parse_duration(s).map(WindowArg)
}

/// A duration that must be finite (`inf` is refused, not taken as zero).
pub(crate) fn parse_finite_duration(s: &str) -> Result<std::time::Duration, String> {
    secondhit::units::parse_duration(s)?
        .ok_or_else(|| format!("{s:?}: must be a finite duration, e.g. 5ms"))
}

/// One `--eviction` item: a policy, or `all` (every one the exact store has).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Evictions {
    One(Eviction),
    AllExact,
}

pub(crate) fn parse_eviction(s: &str) -> Result<Evictions, String> {
    match s.trim() {
        "all" => Ok(Evictions::AllExact),
        one => one.parse().map(Evictions::One),
    }
}

/// The `--eviction` list with `all` expanded, each policy once, in the order given.
pub(crate) fn evictions(args: &[Evictions]) -> Vec<Eviction> {
    let mut out = Vec::new();
    for a in args {
        let add: Vec<Eviction> = match a {
            Evictions::One(e) => vec![*e],
            Evictions::AllExact => Eviction::ALL.into_iter().filter(|e| e.is_exact()).collect(),
        };
        for e in add {
            if !out.contains(&e) {
                out.push(e);
            }
        }
    }
    out
}

pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    secondhit::units::parse_bytes(s)
}

/// `--record-format`.
pub(crate) fn parse_record_format(s: &str) -> Result<secondhit::lab::RecordFormat, String> {
    match s {
        "secondhit" => Ok(secondhit::lab::RecordFormat::Secondhit),
        "oracle-general" => Ok(secondhit::lab::RecordFormat::OracleGeneral),
        other => Err(format!("{other:?}: secondhit or oracle-general")),
    }
}

/// `--object-cost`: `serve`, or a size.
pub(crate) fn parse_object_cost(s: &str) -> Result<u64, String> {
    if s.eq_ignore_ascii_case("serve") {
        Ok(secondhit::sim::OBJECT_COST_SERVE)
    } else {
        parse_bytes(s).map_err(|e| format!("{e}; or \"serve\" for what serve charges an object"))
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct GenTraceArgs {
    /// Output file; ".gz" or ".zst" at the end compresses it.
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Output format: webcachesim (text) or oracle-general (binary). Default: oracle-general if
    /// the name contains "oracleGeneral", else webcachesim.
    #[arg(long, conflicts_with = "media")]
    pub(crate) format: Option<String>,
    /// A media trace: large objects (by default log-normal sizes of median 100 MiB between
    /// 20 MiB and 2 GiB), each request a byte range (--range-min to --range-max long, starting
    /// nearer the beginning), written as "time,key,size,range" CSV: name it *.ranges.csv (.gz,
    /// .zst) so that simulate and replay read its ranges.
    #[arg(long)]
    pub(crate) media: bool,
    /// Shortest range of a media trace (bytes or with a unit).
    #[arg(long, value_parser = parse_bytes, default_value = "1MiB", requires = "media")]
    pub(crate) range_min: u64,
    /// Longest range of a media trace.
    #[arg(long, value_parser = parse_bytes, default_value = "8MiB", requires = "media")]
    pub(crate) range_max: u64,
    /// How strongly a media trace's ranges start near the beginning (1: anywhere alike).
    #[arg(long, default_value_t = 3.0, requires = "media")]
    pub(crate) range_skew: f64,
    /// Raise sizes drawn below this (default: 1 byte; 20 MiB with --media).
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) min_size: Option<u64>,
    /// Lower sizes drawn above this (default: 4 GiB less 1 byte; 2 GiB with --media).
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) max_size: Option<u64>,
    /// Objects with Zipf popularity.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) objects: u64,
    /// Requests to write.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) requests: u64,
    /// Zipf exponent.
    #[arg(long, default_value_t = 0.8)]
    pub(crate) alpha: f64,
    /// Share of requests that go to fresh objects requested only once, in [0, 1).
    #[arg(long, default_value_t = 0.3)]
    pub(crate) one_time_share: f64,
    /// Object sizes: fixed:N, lognormal:MEDIAN:SIGMA or pareto:SCALE:SHAPE (bytes). Default:
    /// lognormal:8192:1.5; with --media lognormal:104857600:1.2.
    #[arg(long)]
    pub(crate) sizes: Option<String>,
    /// Requests per second of trace time.
    #[arg(long, default_value_t = 1000.0)]
    pub(crate) rate: f64,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

#[derive(clap::Args, Debug)]
pub(crate) struct BloomArgs {
    /// Distinct keys one generation must hold.
    #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) items: u64,
    /// Target false-positive rate, a fraction strictly between 0 and 1.
    #[arg(long, default_value_t = 0.01)]
    pub(crate) fpr: f64,
    /// Bit layout: "standard" (fewest bits) or "blocked" (one cache line per key).
    #[arg(long, default_value = "standard", value_parser = parse_layout)]
    pub(crate) layout: Layout,
    /// Build the filter, insert ITEMS keys, probe ITEMS keys never inserted, and report the
    /// measured false-positive rate and nanoseconds per insert and lookup.
    #[arg(long)]
    pub(crate) measure: bool,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn parse_layout(s: &str) -> Result<Layout, String> {
    s.parse()
        .map_err(|e: secondhit::bloom::ParamError| e.to_string())
}

/// Command-line flags that override the file (`secondhit serve --help`).
#[derive(clap::Args, Debug, Default, Clone)]
pub(crate) struct Overrides {
    /// Public listener address.
    #[arg(long)]
    pub(crate) listen: Option<SocketAddr>,
    /// Admin listener address (/metrics, /healthz, purge); keep it on loopback.
    #[arg(long)]
    pub(crate) admin_listen: Option<SocketAddr>,
    /// Default origin, http://host:port (or an [origins] group's name). Given several times:
    /// a group of equal-weight servers, round-robin, named "default".
    #[arg(long, value_name = "URL")]
    pub(crate) origin: Vec<OriginRef>,
    /// Cache capacity (bytes or with a unit: 256MiB).
    #[arg(long, value_parser = parse_nonzero_bytes)]
    pub(crate) capacity: Option<u64>,
    /// Largest object stored (bytes or with a unit); default: the smaller of 16 MiB and the
    /// capacity.
    #[arg(long, value_parser = parse_nonzero_bytes)]
    pub(crate) max_object_size: Option<u64>,
    /// Store objects larger than the largest object in aligned slices of this size (1MiB),
    /// each admitted on its own; 0: off (cache.slice_size).
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) slice_size: Option<u64>,
    /// Admission policy: admit-all, second-hit, second-hit-exact, nth-hit:N, nth-hit-exact:N.
    #[arg(long)]
    pub(crate) policy: Option<Policy>,
    /// Admission window (1h, 30m, inf).
    #[arg(long, value_parser = parse_window)]
    pub(crate) window: Option<WindowArg>,
    /// Distinct keys per filter generation.
    #[arg(long)]
    pub(crate) expected_items: Option<u64>,
    /// Target false-positive rate per generation.
    #[arg(long)]
    pub(crate) fpr: Option<f64>,
    /// moka eviction: lru or tinylfu.
    #[arg(long, value_parser = parse_moka_eviction)]
    pub(crate) eviction: Option<Eviction>,
    /// Log level: error, warn, info, debug, trace (RUST_LOG overrides).
    #[arg(long)]
    pub(crate) log_level: Option<LogLevel>,
    /// Log one line per request (to stderr unless --access-log-file).
    #[arg(long)]
    pub(crate) access_log: bool,
    /// Access log format: combined or json (implies --access-log).
    #[arg(long, value_name = "FORMAT")]
    pub(crate) access_log_format: Option<secondhit::access_log::Format>,
    /// Append the access log to FILE, reopened on SIGUSR1 (implies --access-log).
    #[arg(long, value_name = "FILE")]
    pub(crate) access_log_file: Option<PathBuf>,
    /// PEM certificate chain: TLS on --listen (ALPN h2, http/1.1); needs --tls-key.
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_key: Option<std::path::PathBuf>,
    /// Directory where the admission filter's state survives restarts (loaded at start,
    /// written every state_snapshot_interval and on shutdown).
    #[arg(long)]
    pub(crate) state_dir: Option<std::path::PathBuf>,
    /// Request fields a GET or HEAD may pass to the origin, comma-separated (replaces
    /// cache.forwarded_request_headers); each is part of the cache key unless listed in
    /// --forwarded-unkeyed-headers; "*" forwards all but the header-override fields and keys
    /// on none.
    #[arg(long, value_delimiter = ',')]
    pub(crate) forwarded_request_headers: Option<Vec<HeaderName>>,
    /// Forwarded fields that are not part of the cache key, comma-separated (replaces
    /// cache.forwarded_unkeyed_headers).
    #[arg(long, value_delimiter = ',')]
    pub(crate) forwarded_unkeyed_headers: Option<Vec<HeaderName>>,
    /// Shadow admission policies fed every lookup, comma-separated (replaces lab.shadow):
    /// admit-all,nth-hit:3,second-hit:window=10m; options window, expected_items, fpr,
    /// eviction, capacity (default: the live cache's). Figures: secondhit_shadow_* in /metrics.
    #[arg(long, value_delimiter = ',', value_name = "POLICY[:OPTION=VALUE]...")]
    pub(crate) shadow: Option<Vec<ShadowSpec>>,
    /// Record every lookup into FILE (64-bit key hashes, never URLs; with the weight charged,
    /// whether storable, how long fresh), rotated at lab.record_max_bytes;
    /// `secondhit simulate --trace FILE` reads it and predicts this edge. lab.record_format =
    /// "oracle-general" writes libCacheSim's format instead.
    #[arg(long, value_name = "FILE")]
    pub(crate) record: Option<PathBuf>,
    /// The recording's format (replaces lab.record_format): secondhit (the default: weights,
    /// storability and freshness, for simulate) or oracle-general (libCacheSim's).
    #[arg(long, value_name = "FORMAT", value_parser = parse_record_format)]
    pub(crate) record_format: Option<secondhit::lab::RecordFormat>,
    /// Threads serving the public listeners, each with its own event loop and origin pool
    /// (default: one per core).
    #[arg(long, value_name = "N")]
    pub(crate) workers: Option<usize>,
    /// A flash tier under memory in DIR (cache.disk.dir); needs --disk-capacity.
    #[arg(long, value_name = "DIR")]
    pub(crate) disk_dir: Option<PathBuf>,
    /// Bytes of disk the flash tier may use (100GiB).
    #[arg(long, value_parser = parse_nonzero_bytes)]
    pub(crate) disk_capacity: Option<u64>,
    /// Which objects reach the flash tier (admission.disk; default second-hit).
    #[arg(long)]
    pub(crate) disk_policy: Option<Policy>,
}

impl Overrides {
    /// Sets the flags given over the file's values; only a flag that cannot be set says so
    /// (several --origin values, one of them a group's name).
    pub(crate) fn apply(self, config: &mut Config) -> Result<(), ConfigError> {
        let o = self;
        if let Some(v) = o.listen {
            config.listen = v;
        }
        if let Some(v) = o.admin_listen {
            config.admin_listen = v;
        }
        if let Some(v) = o.workers {
            config.workers = v;
        }
        if let Some(v) = o.disk_dir {
            config.cache.disk.dir = Some(v);
        }
        if let Some(v) = o.disk_capacity {
            config.cache.disk.capacity = v;
        }
        if let Some(v) = o.disk_policy {
            config.admission.disk = v;
        }
        match o.origin.len() {
            0 => {}
            1 => config.origin = o.origin.into_iter().next(),
            _ => {
                let mut urls = Vec::new();
                for r in o.origin {
                    match r {
                        OriginRef::Url(u) => urls.push(u),
                        OriginRef::Group(g) => {
                            return Err(ConfigError::Invalid {
                                field: "origin",
                                message: format!(
                                    "--origin {g}: a group's name must be the only --origin (several make a group of URLs)"
                                ),
                            });
                        }
                    }
                }
                config
                    .origins
                    .insert("default".into(), GroupConfig::of_equals(urls));
                config.origin = Some(OriginRef::Group("default".into()));
            }
        }
        if let Some(v) = o.capacity {
            config.cache.capacity = v;
        }
        if let Some(v) = o.max_object_size {
            config.cache.max_object_size = Some(v);
        }
        if let Some(v) = o.slice_size {
            config.cache.slice_size = v;
        }
        if let Some(v) = o.policy {
            config.admission.policy = v;
        }
        if let Some(v) = o.window {
            config.admission.window = v.0;
        }
        if let Some(v) = o.expected_items {
            config.admission.expected_items = v;
        }
        if let Some(v) = o.fpr {
            config.admission.fpr = v;
        }
        if let Some(v) = o.eviction {
            config.cache.eviction = v;
        }
        if let Some(v) = o.log_level {
            config.log.level = v;
        }
        if o.access_log {
            config.log.access_log = true;
        }
        if let Some(v) = o.access_log_format {
            config.log.access_log = true;
            config.log.access_log_format = v;
        }
        if let Some(v) = o.access_log_file {
            config.log.access_log = true;
            config.log.access_log_file = Some(v);
        }
        if let Some(v) = o.tls_cert {
            config.tls.cert = Some(v);
        }
        if let Some(v) = o.tls_key {
            config.tls.key = Some(v);
        }
        if let Some(v) = o.state_dir {
            config.state_dir = Some(v);
        }
        if let Some(v) = o.forwarded_request_headers {
            config.cache.forwarded_request_headers = v;
        }
        if let Some(v) = o.forwarded_unkeyed_headers {
            config.cache.forwarded_unkeyed_headers = v;
        }
        if let Some(v) = o.shadow {
            config.lab.shadow = v;
        }
        if let Some(v) = o.record {
            config.lab.record = Some(v);
        }
        if let Some(v) = o.record_format {
            config.lab.record_format = v;
        }
        Ok(())
    }
}

/// A byte count that must not be 0.
pub(crate) fn parse_nonzero_bytes(s: &str) -> Result<u64, String> {
    match units::parse_bytes(s)? {
        0 => Err(format!("{s:?}: must be more than 0 bytes")),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file() {
        let mut c =
            Config::from_toml("origin = \"http://x:1\"\n[admission]\npolicy = \"admit-all\"")
                .unwrap();
        Overrides {
            policy: Some(Policy::NthHit(3)),
            capacity: Some(1 << 20),
            window: Some(WindowArg(None)),
            log_level: Some(LogLevel::Warn),
            ..Overrides::default()
        }
        .apply(&mut c)
        .unwrap();
        assert_eq!(c.admission.policy, Policy::NthHit(3));
        // Several --origin: the default origin is a group of them, equal weights.
        let mut g = Config::default();
        Overrides {
            origin: vec!["http://a:1".parse().unwrap(), "http://b:1".parse().unwrap()],
            ..Overrides::default()
        }
        .apply(&mut g)
        .unwrap();
        assert_eq!(g.origin, Some(OriginRef::Group("default".into())));
        let servers = &g.origins["default"].servers;
        assert_eq!(
            servers
                .iter()
                .map(|s| (s.url.to_string(), s.weight))
                .collect::<Vec<_>>(),
            [("http://a:1".to_string(), 1), ("http://b:1".to_string(), 1)]
        );
        assert!(g.validate().is_ok());
        assert_eq!(
            (c.cache.capacity, c.cache.max_object_size()),
            (1 << 20, 1 << 20)
        );
        assert_eq!(c.admission.window, None);
        assert_eq!(c.log.level, LogLevel::Warn);
        assert_eq!(c.origin.unwrap().to_string(), "http://x:1");
    }
}
