//! The `secondhit` command line: parses arguments, then calls into the library.

use anyhow::Context;
use clap::{Parser, Subcommand};
use secondhit::admission::{Policy, Settings};
use secondhit::bloom::Layout;
use secondhit::plan::Plan;
use secondhit::sim::{self, Capacities};
use secondhit::store::{Eviction, StoreKind};
use secondhit::trace::{self, synth, CsvSpec, Format};
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: measured in `scripts/bench-proxy.sh` (see the README).
#[global_allocator]
static ALLOCATOR: secondhit::alloc::MiMalloc = secondhit::alloc::MiMalloc;

/// A CDN edge cache that stores an object only on its second request, and a lab that measures
/// that choice on real access traces.
#[derive(Parser, Debug)]
#[command(name = "secondhit", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
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
struct TraceInput {
    /// Trace format: oracle-general, webcachesim, cache2k, tencent-photo or csv. Guessed from the
    /// file name when left out (after any .gz/.xz/.bz2/.zst extension).
    #[arg(long)]
    format: Option<String>,
    /// For --format csv: which 1-based columns hold the fields, e.g. "time=1,key=2,size=3"
    /// (leave out time or size for none: index and 1).
    #[arg(long, default_value = "time=1,key=2,size=3")]
    csv_columns: String,
    /// For --format csv: the field separator (one character; "tab" for a tab).
    #[arg(long, default_value = ",")]
    csv_delimiter: String,
    /// For --format csv: skip the first line.
    #[arg(long)]
    csv_header: bool,
}

impl TraceInput {
    fn format(&self) -> anyhow::Result<Option<Format>> {
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
struct TraceStatsArgs {
    /// The trace file (compressed or not).
    file: PathBuf,
    #[command(flatten)]
    input: TraceInput,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct TraceConvertArgs {
    /// The trace file (compressed or not), in any format `simulate` reads.
    file: PathBuf,
    #[command(flatten)]
    input: TraceInput,
    /// The oracleGeneral file to write (".gz" or ".zst" at the end compresses it). Objects are
    /// numbered densely from 0 in first-seen order by the source's key rule; each record carries
    /// the 1-based position of the same object's next request (-1: never), as libCacheSim's
    /// converter writes it. Holds 8 bytes per request and
    /// one map entry per object in memory while it runs.
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args, Debug)]
struct DemoArgs {
    /// Requests of the bundled trace to replay.
    #[arg(long, default_value_t = 20_000)]
    requests: u64,
    /// Cache size as a fraction of those requests' working set.
    #[arg(long, default_value_t = 0.05)]
    capacity_fraction: f64,
    /// Policies, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "admit-all,second-hit")]
    policy: Vec<Policy>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct OriginArgs {
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: std::net::SocketAddr,
    /// max-age of every response, in seconds.
    #[arg(long, default_value_t = 3600)]
    max_age: u64,
    /// Delay before every response's headers (e.g. 5ms).
    #[arg(long, value_parser = parse_finite_duration)]
    latency: Option<std::time::Duration>,
    /// Share of requests answered with 503.
    #[arg(long, default_value_t = 0.0)]
    error_rate: f64,
    /// Share of requests whose connection resets after half the body.
    #[arg(long, default_value_t = 0.0)]
    reset_rate: f64,
    /// Share of requests whose body stops short of its Content-Length.
    #[arg(long, default_value_t = 0.0)]
    short_rate: f64,
    /// Share of requests whose body drips, 1 KiB per 100 ms.
    #[arg(long, default_value_t = 0.0)]
    drip_rate: f64,
    /// Seed of the fault choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(clap::Args, Debug)]
struct ReplayArgs {
    /// The trace file (default: the bundled request.trace.xz).
    #[arg(long)]
    trace: Option<PathBuf>,
    #[command(flatten)]
    input: TraceInput,
    /// The cache to drive, http://host:port.
    #[arg(long)]
    target: String,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// At most this many requests per second.
    #[arg(long, conflicts_with = "speed")]
    rate: Option<f64>,
    /// Follow the trace's timestamps, sped up this many times.
    #[arg(long)]
    speed: Option<f64>,
    /// Replay only the first N requests (after --skip).
    #[arg(long)]
    limit: Option<u64>,
    /// Start after the trace's first N requests (not sent): replay a trace in parts, e.g.
    /// --skip 20000 --limit 5000 sends requests 20,001 to 25,000.
    #[arg(long, default_value_t = 0)]
    skip: u64,
    /// Leave the first N requests out of the figures.
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Stop after this long (e.g. 60s), wherever the trace is.
    #[arg(long, value_parser = parse_window)]
    duration: Option<WindowArg>,
    /// The origin's stats URL (secondhit origin: http://host:port/_stats), to count offload.
    #[arg(long)]
    origin_stats: Option<String>,
    /// Write the report as one JSON object to FILE, or to stdout with "-".
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// TOML configuration file (see secondhit.example.toml); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(flatten)]
    overrides: secondhit::config::Overrides,
}

#[derive(clap::Args, Debug)]
struct SimulateArgs {
    /// The trace file (default: the bundled request.trace.xz, compiled into the binary).
    #[arg(long)]
    trace: Option<PathBuf>,
    #[command(flatten)]
    input: TraceInput,
    /// Admission policies, comma-separated: admit-all, second-hit, second-hit-exact, nth-hit:N,
    /// nth-hit-exact:N, prob:P (admit with probability P, seeded), size:BYTES (admit objects up
    /// to a size, e.g. size:1MiB).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "admit-all,second-hit,second-hit-exact"
    )]
    policy: Vec<Policy>,
    /// Eviction policies, comma-separated. The exact store: lru, fifo, clock, sieve, s3fifo, arc,
    /// wtinylfu, lfu, belady, belady-size (each libCacheSim 0.3.5's, with its defaults), or all
    /// of them; moka's store (--store moka): lru, tinylfu.
    #[arg(long, value_delimiter = ',', default_value = "lru", value_parser = parse_eviction)]
    eviction: Vec<Evictions>,
    /// Store: exact (every eviction but tinylfu, exact against libCacheSim) or moka (the proxy's
    /// store, exact maintenance: lru and tinylfu).
    #[arg(long, default_value = "exact")]
    store: StoreKind,
    /// Cache sizes, comma-separated, in bytes or with a unit (64MiB, 2GB); objects for traces
    /// without sizes.
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes, conflicts_with = "capacity_fraction")]
    capacity: Vec<u64>,
    /// Cache sizes as fractions of the working set, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.01,0.05,0.1")]
    capacity_fraction: Vec<f64>,
    /// Filter window: how long a generation takes inserts (e.g. 30m, 1h, inf). Trace time is in
    /// the trace's seconds (the line number for webcachesim traces, the index for cache2k).
    #[arg(long, default_value = "1h", value_parser = parse_window)]
    window: WindowArg,
    /// Distinct keys one filter generation is sized for, or "auto": count the distinct keys of
    /// each window in a first pass over the trace and size for the busiest one.
    #[arg(long, default_value = "1000000", value_parser = parse_expected_items)]
    expected_items: ExpectedItems,
    /// Target false-positive rate of one generation.
    #[arg(long, default_value_t = Settings::DEFAULT_FPR)]
    fpr: f64,
    /// Filter layout: blocked or standard.
    #[arg(long, default_value = "blocked", value_parser = parse_layout)]
    layout: Layout,
    /// Worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Replay only the first N requests of the trace.
    #[arg(long)]
    limit: Option<u64>,
    /// Spatial sampling (SHARDS): simulate only the keys whose hash falls in this fraction of
    /// the hash space, in caches that much smaller; ratios estimate the whole trace's at a
    /// fraction of the time and memory (e.g. 0.01 for miss-ratio curves over many sizes).
    #[arg(long)]
    sample: Option<f64>,
    /// Predict a cluster: N nodes behind a consistent-hash balancer (a ring of 160 points per
    /// node, as nginx's `hash ... consistent`, and haproxy's `hash-type consistent` with
    /// `weight 10`), each key on
    /// one node with its own filter and cache. Figures are the cluster's totals; --json adds
    /// `per_node`.
    #[arg(long, default_value_t = 1, value_name = "N")]
    nodes: usize,
    /// With --nodes: split (each node has capacity / N: the same total memory) or each (each
    /// node has the whole capacity).
    #[arg(long, default_value = "split", value_name = "split|each")]
    node_capacity: sim::NodeCapacity,
    /// A flash tier below memory, of these sizes (comma-separated, bytes or with a unit): each
    /// run becomes memory (--policy, --eviction lru or fifo, --capacity or --capacity-fraction)
    /// above flash (--disk-policy, --disk-eviction); the report gives the hit ratio per tier
    /// and the bytes written to flash per byte served.
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes, value_name = "SIZE")]
    disk_capacity: Vec<u64>,
    /// Which objects reach flash, comma-separated (with --disk-capacity).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "second-hit",
        value_name = "POLICY",
        requires = "disk_capacity"
    )]
    disk_policy: Vec<Policy>,
    /// How flash evicts (with --disk-capacity): fifo (a log-structured flash cache), lru,
    /// clock, sieve, s3fifo or lfu.
    #[arg(
        long,
        default_value = "fifo",
        value_name = "EVICTION",
        requires = "disk_capacity"
    )]
    disk_eviction: Eviction,
    /// At most this many bytes written to flash a second of trace time (with --disk-capacity;
    /// for traces whose time is the request's number, a second is a request): the writes
    /// beyond are refused and counted (flash endurance as a setting).
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES", requires = "disk_capacity")]
    disk_write_rate: Option<u64>,
    /// Write the report as one JSON object to FILE, or to stdout with "-".
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write one CSV line per run to FILE.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Draw hit ratio and byte hit ratio against cache size into FILE.svg.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write the admission filter's state at the end of the run into DIR (one policy, one
    /// eviction, one size), in the format `serve --state-dir DIR` loads: a filter warmed offline.
    #[arg(long, value_name = "DIR", conflicts_with = "plan")]
    save_state: Option<PathBuf>,
    /// Do not simulate: write the sweep as independent jobs into DIR (`DIR/jobs.txt`, one
    /// command line per policy x eviction x size, each writing `DIR/results/job-NNNN.json`), for
    /// GNU parallel, a Slurm array or Kubernetes Jobs. `--merge` combines their results.
    #[arg(long, value_name = "DIR", conflicts_with = "merge")]
    plan: Option<PathBuf>,
    /// Do not simulate: combine the JSON results of planned jobs (or any runs of the same trace
    /// and settings) into one report, printed and written as --json, --csv and --plot ask.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    merge: Vec<PathBuf>,
}

/// `--expected-items`: a number, or `auto` (sized from the trace).
#[derive(Clone, Copy, Debug)]
enum ExpectedItems {
    Fixed(u64),
    Auto,
}

fn parse_expected_items(s: &str) -> Result<ExpectedItems, String> {
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
struct WindowArg(Option<std::time::Duration>);

fn parse_window(s: &str) -> Result<WindowArg, String> {
    secondhit::units::parse_duration(s).map(WindowArg)
}

/// A duration that must be finite (`inf` is refused, not taken as zero).
fn parse_finite_duration(s: &str) -> Result<std::time::Duration, String> {
    secondhit::units::parse_duration(s)?
        .ok_or_else(|| format!("{s:?}: must be a finite duration, e.g. 5ms"))
}

/// One `--eviction` item: a policy, or `all` (every one the exact store has).
#[derive(Clone, Copy, Debug)]
enum Evictions {
    One(Eviction),
    AllExact,
}

fn parse_eviction(s: &str) -> Result<Evictions, String> {
    match s.trim() {
        "all" => Ok(Evictions::AllExact),
        one => one.parse().map(Evictions::One),
    }
}

/// The `--eviction` list with `all` expanded, each policy once, in the order given.
fn evictions(args: &[Evictions]) -> Vec<Eviction> {
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

fn parse_bytes(s: &str) -> Result<u64, String> {
    secondhit::units::parse_bytes(s)
}

#[derive(clap::Args, Debug)]
struct GenTraceArgs {
    /// Output file; ".gz" or ".zst" at the end compresses it.
    #[arg(long)]
    out: PathBuf,
    /// Output format: webcachesim (text) or oracle-general (binary). Default: oracle-general if
    /// the name contains "oracleGeneral", else webcachesim.
    #[arg(long)]
    format: Option<String>,
    /// Objects with Zipf popularity.
    #[arg(long, default_value_t = 100_000)]
    objects: u64,
    /// Requests to write.
    #[arg(long, default_value_t = 1_000_000)]
    requests: u64,
    /// Zipf exponent.
    #[arg(long, default_value_t = 0.8)]
    alpha: f64,
    /// Share of requests that go to fresh objects requested only once, in [0, 1).
    #[arg(long, default_value_t = 0.3)]
    one_time_share: f64,
    /// Object sizes: fixed:N, lognormal:MEDIAN:SIGMA or pareto:SCALE:SHAPE (bytes).
    #[arg(long, default_value = "lognormal:8192:1.5")]
    sizes: String,
    /// Requests per second of trace time.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(clap::Args, Debug)]
struct BloomArgs {
    /// Distinct keys one generation must hold.
    #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    items: u64,
    /// Target false-positive rate, a fraction strictly between 0 and 1.
    #[arg(long, default_value_t = 0.01)]
    fpr: f64,
    /// Bit layout: "standard" (fewest bits) or "blocked" (one cache line per key).
    #[arg(long, default_value = "standard", value_parser = parse_layout)]
    layout: Layout,
    /// Build the filter, insert ITEMS keys, probe ITEMS keys never inserted, and report the
    /// measured false-positive rate and nanoseconds per insert and lookup.
    #[arg(long)]
    measure: bool,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    json: bool,
}

fn parse_layout(s: &str) -> Result<Layout, String> {
    s.parse()
        .map_err(|e: secondhit::bloom::ParamError| e.to_string())
}

fn bloom(args: BloomArgs) -> anyhow::Result<()> {
    let mut plan =
        Plan::new(args.items, args.fpr, args.layout).context("cannot size the filter")?;
    if args.measure {
        use sim::Progress;
        let bar = Bar::new();
        bar.begin("measuring", Some(2 * args.items));
        let mut reported = 0;
        plan.measure(|done| {
            bar.advance(done - reported);
            reported = done;
        });
        bar.end();
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &plan)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", plan.to_text())?;
        if args.layout == Layout::Standard {
            if let Ok(b) = Plan::new(args.items, args.fpr, Layout::Blocked) {
                writeln!(
                    out,
                    "  (blocked layout: {:.2} bits per item, k = {}, {} per generation; one cache miss per lookup)",
                    b.bits_per_item,
                    b.hashes,
                    secondhit::units::bytes(b.memory_bytes)
                )?;
            }
        }
    }
    Ok(())
}

/// A progress bar on stderr, shown only when stderr is a terminal.
struct Bar(indicatif::ProgressBar);

impl Bar {
    fn new() -> Bar {
        let bar = if std::io::stderr().is_terminal() {
            indicatif::ProgressBar::new(0)
        } else {
            indicatif::ProgressBar::hidden()
        };
        Bar(bar)
    }
}

impl sim::Progress for Bar {
    fn begin(&self, pass: &str, total: Option<u64>) {
        self.0.reset();
        let style = match total {
            Some(n) => {
                self.0.set_length(n);
                indicatif::ProgressStyle::with_template(
                    "{msg:>12} [{bar:30}] {human_pos}/{human_len} ({elapsed}, {eta} left)",
                )
            }
            None => indicatif::ProgressStyle::with_template(
                "{msg:>12} {spinner} {human_pos} ({elapsed})",
            ),
        };
        if let Ok(style) = style {
            self.0.set_style(style.progress_chars("=> "));
        }
        self.0.set_message(pass.to_string());
    }
    fn advance(&self, n: u64) {
        self.0.inc(n);
    }
    fn end(&self) {
        self.0.finish_and_clear();
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    use secondhit::config::Config;
    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    config.apply(args.overrides.clone());
    let config = config.validate()?;
    // What SIGHUP and POST /reload read: the same file with the same flags over it.
    let source: Option<secondhit::server::ConfigSource> = args.config.clone().map(|path| {
        let overrides = args.overrides.clone();
        std::sync::Arc::new(move || {
            let mut c = Config::from_file(&path)?;
            c.apply(overrides.clone());
            c.validate()
        }) as secondhit::server::ConfigSource
    });
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(config.log.level.as_str()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    // The public listeners have worker threads of their own (`workers`); this runtime has the
    // admin listener, reloads and snapshots.
    let control = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("secondhit-control")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    control.block_on(async move {
        // Before anything is served: a reload or a log rotation sent as soon as the ready line
        // is out must find its handler (the default action of each of these ends the process).
        let signals = Signals::install()?;
        let clock = std::sync::Arc::new(secondhit::clock::SystemClock::new());
        let running = secondhit::server::start_with_source(config, clock, source).await?;
        eprintln!(
            "secondhit: serving on {}://{} (admin http://{}/metrics); Ctrl-C to stop",
            if running.tls { "https" } else { "http" },
            running.addr,
            running.admin_addr
        );
        #[cfg(unix)]
        {
            let reloader = std::sync::Arc::clone(&running.reloader);
            let mut hup = signals.hangup;
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    let r = std::sync::Arc::clone(&reloader);
                    // Reads files: off the async threads. It logs its own outcome.
                    let _ = tokio::task::spawn_blocking(move || r.reload()).await;
                }
            });
            // Log rotation: the access log file is reopened under its configured name.
            let proxy = std::sync::Arc::clone(&running.proxy);
            let mut usr1 = signals.user1;
            tokio::spawn(async move {
                while usr1.recv().await.is_some() {
                    proxy.reopen_access_log();
                    tracing::info!("SIGUSR1: reopening the access log");
                }
            });
        }
        signals.stop.wait().await;
        tracing::info!("shutting down: finishing in-flight requests");
        running.shutdown().await;
        anyhow::Ok(())
    })
}

/// The signals `serve` handles, registered at once (before the ready line): SIGHUP reloads,
/// SIGUSR1 reopens the access log, SIGTERM and SIGINT stop.
struct Signals {
    stop: StopSignals,
    #[cfg(unix)]
    hangup: tokio::signal::unix::Signal,
    #[cfg(unix)]
    user1: tokio::signal::unix::Signal,
}

impl Signals {
    /// Registers every handler; needs the runtime's context.
    fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                stop: StopSignals::install()?,
                hangup: signal(SignalKind::hangup()).context("cannot handle SIGHUP")?,
                user1: signal(SignalKind::user_defined1()).context("cannot handle SIGUSR1")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {
            stop: StopSignals::install()?,
        })
    }
}

/// SIGTERM and SIGINT (Ctrl-C), registered when made: a stop sent before [`StopSignals::wait`]
/// is polled is still seen, and never kills the process half-way.
struct StopSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Registers both handlers; needs the runtime's context.
    fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(StopSignals {
                term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
                int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// Resolves on the first SIGTERM or SIGINT.
    async fn wait(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
        #[cfg(not(unix))]
        {
            let _ = &mut self;
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Prints the table on stdout and writes the JSON to `json` (a file, or stdout instead of the
/// table with `-`).
fn print_report(
    table: &str,
    report: &impl serde::Serialize,
    json: Option<&Path>,
) -> anyhow::Result<()> {
    let to_stdout = json == Some(Path::new("-"));
    let mut out = std::io::stdout().lock();
    if !to_stdout {
        out.write_all(table.as_bytes())?;
    }
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(report)?;
        if to_stdout {
            writeln!(out, "{text}")?;
        } else {
            std::fs::write(path, text + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    Ok(())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The trace a command reads: `--trace FILE`, or the bundled one.
fn source(path: Option<&Path>, format: Option<Format>) -> trace::Source {
    match path {
        Some(p) => trace::Source::file(p, format),
        None => trace::Source::bundled(format),
    }
}

fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let options = secondhit::demo::DemoOptions {
        requests: args.requests,
        capacity_fraction: args.capacity_fraction,
        policies: args.policy,
        concurrency: 1,
    };
    let report = runtime()?.block_on(secondhit::demo::run(
        &source(None, None),
        &options,
        &Bar::new(),
    ))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        out.write_all(report.to_text().as_bytes())?;
    }
    Ok(())
}

fn origin(args: OriginArgs) -> anyhow::Result<()> {
    let options = secondhit::origin_server::OriginOptions {
        listen: args.listen,
        max_age: args.max_age,
        latency: args.latency.unwrap_or_default(),
        error_rate: args.error_rate,
        reset_rate: args.reset_rate,
        short_rate: args.short_rate,
        drip_rate: args.drip_rate,
        seed: args.seed,
        ..Default::default()
    };
    runtime()?.block_on(async move {
        let stop = StopSignals::install()?;
        let running = secondhit::origin_server::start(options)
            .await
            .map_err(anyhow::Error::msg)?;
        eprintln!(
            "secondhit origin on http://{} (GET /<key>?size=N; stats at /_stats); Ctrl-C to stop",
            running.addr
        );
        stop.wait().await;
        let stats = running.stats();
        running.shutdown().await;
        eprintln!(
            "served {} requests, {} body bytes",
            stats.requests, stats.bytes
        );
        anyhow::Ok(())
    })
}

fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let target: http::Uri = args
        .target
        .parse()
        .with_context(|| format!("--target {:?} is not a URL", args.target))?;
    let mut options = secondhit::replay::ReplayOptions::new(target);
    options.concurrency = args.concurrency;
    options.rate = args.rate;
    options.speed = args.speed;
    options.limit = args.limit;
    options.skip = args.skip;
    options.warmup = args.warmup;
    options.duration = args.duration.and_then(|d| d.0);
    options.origin_stats = match &args.origin_stats {
        Some(u) => Some(
            u.parse()
                .with_context(|| format!("--origin-stats {u:?} is not a URL"))?,
        ),
        None => None,
    };
    let reader = source(args.trace.as_deref(), args.input.format()?).open()?;
    let report = runtime()?.block_on(secondhit::replay::run(reader, &options, &Bar::new()))?;
    print_report(&report.to_text(), &report, args.json.as_deref())?;
    Ok(())
}

/// A word for `sh`: as it is when it is plain, else in single quotes.
fn sh_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// `simulate --plan DIR`: one command line per run of the sweep, each a whole `simulate` of one
/// policy, one eviction and one size with every other option as given.
fn plan(args: &SimulateArgs, dir: &Path) -> anyhow::Result<()> {
    let results = dir.join("results");
    std::fs::create_dir_all(&results)
        .with_context(|| format!("cannot create {}", results.display()))?;
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    let mut common = vec![absolute(&exe).display().to_string(), "simulate".into()];
    let mut opt = |name: &str, value: String| {
        common.push(format!("--{name}"));
        common.push(value);
    };
    if let Some(t) = &args.trace {
        opt("trace", absolute(t).display().to_string());
    }
    if let Some(f) = &args.input.format {
        opt("format", f.clone());
        opt("csv-columns", args.input.csv_columns.clone());
        opt("csv-delimiter", args.input.csv_delimiter.clone());
    }
    opt("store", args.store.to_string());
    opt("window", secondhit::units::duration(args.window.0));
    opt(
        "expected-items",
        match args.expected_items {
            ExpectedItems::Fixed(n) => n.to_string(),
            ExpectedItems::Auto => "auto".into(),
        },
    );
    opt("fpr", args.fpr.to_string());
    opt("layout", args.layout.to_string());
    opt("threads", "1".into());
    if let Some(l) = args.limit {
        opt("limit", l.to_string());
    }
    if let Some(r) = args.sample {
        opt("sample", r.to_string());
    }
    if !args.disk_capacity.is_empty() {
        let join = |v: Vec<String>| v.join(",");
        opt(
            "disk-capacity",
            join(args.disk_capacity.iter().map(u64::to_string).collect()),
        );
        opt(
            "disk-policy",
            join(args.disk_policy.iter().map(Policy::to_string).collect()),
        );
        opt("disk-eviction", args.disk_eviction.to_string());
        if let Some(r) = args.disk_write_rate {
            opt("disk-write-rate", r.to_string());
        }
    }
    if args.nodes != 1 {
        opt("nodes", args.nodes.to_string());
        opt(
            "node-capacity",
            match args.node_capacity {
                sim::NodeCapacity::Split => "split",
                sim::NodeCapacity::Each => "each",
            }
            .into(),
        );
    }
    if args.input.csv_header {
        common.push("--csv-header".into());
    }
    let sizes: Vec<(&str, String)> = if args.capacity.is_empty() {
        let fractions = args.capacity_fraction.iter();
        fractions
            .map(|f| ("capacity-fraction", f.to_string()))
            .collect()
    } else {
        args.capacity
            .iter()
            .map(|c| ("capacity", c.to_string()))
            .collect()
    };
    // The order of one run's results: sizes, then evictions, then policies.
    let mut lines = String::new();
    let mut n = 0;
    for (size_opt, size) in &sizes {
        for eviction in &evictions(&args.eviction) {
            for policy in &args.policy {
                n += 1;
                let out = absolute(&results.join(format!("job-{n:04}.json")));
                let mut job = common.clone();
                job.extend([
                    "--policy".into(),
                    policy.to_string(),
                    "--eviction".into(),
                    eviction.to_string(),
                    format!("--{size_opt}"),
                    size.clone(),
                    "--json".into(),
                    out.display().to_string(),
                ]);
                let words: Vec<String> = job.iter().map(|w| sh_word(w)).collect();
                lines.push_str(&words.join(" "));
                lines.push('\n');
            }
        }
    }
    let jobs = dir.join("jobs.txt");
    std::fs::write(&jobs, lines).with_context(|| format!("cannot write {}", jobs.display()))?;
    eprintln!(
        "{n} jobs written to {}; run them, e.g. `parallel < {}`, then `secondhit simulate --merge {}/job-*.json`",
        jobs.display(),
        jobs.display(),
        results.display()
    );
    Ok(())
}

/// `simulate --merge FILE...`: the reports of separate runs as one.
fn merge(files: &[PathBuf]) -> anyhow::Result<sim::Report> {
    let mut merged: Option<sim::Report> = None;
    for file in files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let report: sim::Report = serde_json::from_str(&text).with_context(|| {
            format!("{}: not the JSON report of a simulate run", file.display())
        })?;
        match &mut merged {
            None => merged = Some(report),
            Some(m) => {
                if (&m.trace, &m.summary, &m.settings)
                    != (&report.trace, &report.summary, &report.settings)
                {
                    anyhow::bail!(
                        "{}: another trace or other filter settings than {} (trace {} with {} requests, window {}, {} keys): results of different sweeps do not merge",
                        file.display(),
                        files[0].display(),
                        m.trace,
                        m.summary.requests,
                        m.settings.window,
                        m.settings.expected_items,
                    );
                }
                m.results.extend(report.results);
                m.wall_secs += report.wall_secs;
            }
        }
    }
    let mut merged = merged.ok_or_else(|| anyhow::anyhow!("--merge: no files"))?;
    merged.answers = merged.answers();
    Ok(merged)
}

fn simulate(args: SimulateArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.plan {
        return plan(&args, dir);
    }
    if !args.merge.is_empty() {
        let report = merge(&args.merge)?;
        return write_simulation(&args, &report);
    }
    let format = args.input.format()?;
    let options = sim::Options {
        policies: args.policy.clone(),
        evictions: evictions(&args.eviction),
        store: args.store,
        capacities: if args.capacity.is_empty() {
            Capacities::Fractions(args.capacity_fraction.clone())
        } else {
            Capacities::Bytes(args.capacity.clone())
        },
        settings: Settings {
            window: args.window.0,
            expected_items: match args.expected_items {
                ExpectedItems::Fixed(n) => n,
                ExpectedItems::Auto => Settings::DEFAULT_EXPECTED_ITEMS,
            },
            fpr: args.fpr,
            layout: args.layout,
        },
        threads: args.threads,
        limit: args.limit,
        keep_state: args.save_state.is_some(),
        auto_expected_items: matches!(args.expected_items, ExpectedItems::Auto),
        sample: args.sample,
        nodes: sim::Nodes {
            count: args.nodes,
            capacity: args.node_capacity,
        },
        disk: (!args.disk_capacity.is_empty()).then(|| sim::DiskOptions {
            capacities: args.disk_capacity.clone(),
            policies: args.disk_policy.clone(),
            eviction: args.disk_eviction,
            write_rate: args.disk_write_rate,
        }),
    };
    let report = sim::run(
        &source(args.trace.as_deref(), format),
        &options,
        &Bar::new(),
    )?;
    write_simulation(&args, &report)?;
    if let (Some(dir), Some(bytes)) = (&args.save_state, &report.admission_state) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        secondhit::state::save(dir, bytes).with_context(|| {
            format!("cannot write {}", secondhit::state::file_in(dir).display())
        })?;
        eprintln!(
            "admission state written to {} ({} bytes)",
            secondhit::state::file_in(dir).display(),
            bytes.len()
        );
    }
    Ok(())
}

/// Prints the report and writes the files asked for; warns of undersized filters.
fn write_simulation(args: &SimulateArgs, report: &sim::Report) -> anyhow::Result<()> {
    print_report(&report.to_text(), report, args.json.as_deref())?;
    for warning in undersized_filters(report) {
        eprintln!("warning: {warning}");
    }
    if let Some(path) = &args.csv {
        std::fs::write(path, report.to_csv())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        sim::plot_svg(report, path)?;
    }
    Ok(())
}

/// One line per policy whose filter rotated on count before its window ended: what a window
/// brought, and the `--expected-items` that would fit it.
fn undersized_filters(report: &sim::Report) -> Vec<String> {
    use secondhit::units;
    let mut worst: Vec<(String, u64, u64)> = Vec::new();
    // Each memory policy, and each flash policy of a two-tier run.
    let filters = report.results.iter().flat_map(|r| {
        let flash = r.disk.as_ref().map(|d| {
            (
                format!("flash {}", d.policy),
                d.rotations_on_count,
                d.keys_per_window,
            )
        });
        std::iter::once((r.policy.clone(), r.rotations_on_count, r.keys_per_window)).chain(flash)
    });
    for (policy, on_count, keys) in filters.filter(|(_, n, k)| *n > 0 && *k > 0) {
        match worst.iter_mut().find(|(p, _, _)| *p == policy) {
            Some(w) => {
                w.1 += on_count;
                w.2 = w.2.max(keys);
            }
            None => worst.push((policy, on_count, keys)),
        }
    }
    worst
        .into_iter()
        .map(|(policy, rotations, keys)| {
            format!(
                "{policy}: the filter filled before its {} window ended ({} rotations on count over all runs; generations sized for {} keys), and a window brings up to {} distinct keys at that pace: sightings were forgotten early. --expected-items {} (or auto) would fit.",
                report.settings.window,
                units::count(rotations),
                units::count(report.settings.expected_items),
                units::count(keys),
                Settings::expected_items_for(keys),
            )
        })
        .collect()
}

fn trace_stats(args: TraceStatsArgs) -> anyhow::Result<()> {
    let reader = trace::open(&args.file, args.input.format()?.as_ref())?;
    let stats = trace::stats::collect(reader)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &stats)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", args.file.display())?;
        write!(out, "{}", stats.to_text())?;
    }
    Ok(())
}

/// Creates `path`, compressing by its extension (.gz, .zst).
fn create_output(path: &Path) -> anyhow::Result<Box<dyn Write>> {
    let file = BufWriter::with_capacity(
        1 << 20,
        File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
    );
    Ok(match path.extension().and_then(|e| e.to_str()) {
        Some("gz") => Box::new(flate2::write::GzEncoder::new(
            file,
            flate2::Compression::default(),
        )),
        Some("zst") => Box::new(zstd::stream::write::Encoder::new(file, 3)?.auto_finish()),
        Some(ext @ ("xz" | "bz2")) => {
            anyhow::bail!(
                "{}: writing .{ext} is not supported; use .gz, .zst or none",
                path.display()
            )
        }
        _ => Box::new(file),
    })
}

fn trace_convert(args: TraceConvertArgs) -> anyhow::Result<()> {
    let format = args.input.format()?;
    let source = trace::Source::file(&args.file, format);
    let next = trace::convert::next_accesses(source.open()?)?;
    let mut out = create_output(&args.out)?;
    let done =
        trace::convert::to_oracle_general(source.open()?, &next, &mut out).with_context(|| {
            format!(
                "converting {} to {}",
                args.file.display(),
                args.out.display()
            )
        })?;
    out.flush()
        .with_context(|| format!("writing {}", args.out.display()))?;
    drop(out);
    eprintln!(
        "wrote {} requests of {} objects to {}",
        secondhit::units::count(done.requests),
        secondhit::units::count(done.objects),
        args.out.display()
    );
    if done.clamped_sizes > 0 {
        eprintln!(
            "warning: {} requests were larger than 4 GiB and were written as 4 GiB - 1 (the format's u32)",
            secondhit::units::count(done.clamped_sizes)
        );
    }
    Ok(())
}

fn gen_trace(args: GenTraceArgs) -> anyhow::Result<()> {
    let format = match args.format.as_deref() {
        Some("webcachesim") => synth::OutputFormat::Webcachesim,
        Some("oracle-general") => synth::OutputFormat::OracleGeneral,
        Some(other) => anyhow::bail!("--format {other:?}: expected webcachesim or oracle-general"),
        None if args
            .out
            .to_string_lossy()
            .to_ascii_lowercase()
            .contains("oraclegeneral") =>
        {
            synth::OutputFormat::OracleGeneral
        }
        None => synth::OutputFormat::Webcachesim,
    };
    let spec = synth::Spec {
        objects: args.objects,
        requests: args.requests,
        alpha: args.alpha,
        one_time_share: args.one_time_share,
        sizes: args.sizes.parse().map_err(anyhow::Error::msg)?,
        rate: args.rate,
        seed: args.seed,
    };
    spec.validate().map_err(anyhow::Error::msg)?;
    let mut out = create_output(&args.out)?;
    let n = spec
        .write(format, &mut out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    drop(out);
    eprintln!(
        "wrote {} requests to {}",
        secondhit::units::count(n),
        args.out.display()
    );
    Ok(())
}

/// Whether the error comes from writing to a closed pipe.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        let kind = c
            .downcast_ref::<std::io::Error>()
            .map(std::io::Error::kind)
            .or_else(|| {
                c.downcast_ref::<serde_json::Error>()
                    .and_then(serde_json::Error::io_error_kind)
            });
        kind == Some(std::io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bloom(args) => bloom(args),
        Command::TraceStats(args) => trace_stats(args),
        Command::Simulate(args) => simulate(args),
        Command::Serve(args) => serve(args),
        Command::Demo(args) => demo(args),
        Command::Origin(args) => origin(args),
        Command::Replay(args) => replay(args),
        Command::GenTrace(args) => gen_trace(args),
        Command::TraceConvert(args) => trace_convert(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`secondhit simulate | head`): nothing more to say.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("secondhit: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
