//! `cargo xtask`: secondhit's one benchmark harness.
//!
//! ```text
//! cargo xtask bench [SUITE...]   run suites (all when none are named), each against its peer,
//!                                and write benchmarks/SUITE.json
//! cargo xtask bench --list       the suites, their peers and their scripts
//! cargo xtask bench-report       write docs/benchmarks.md from benchmarks/*.json
//! ```
//!
//! A suite is a script in `scripts/` that loads secondhit and its peer (nginx, libCacheSim) in
//! the same run and prints markdown tables. The harness runs it, keeps its tables as JSON rows
//! stamped with the commit, the machine and the date ([`Run`]), and the report renders every
//! suite's latest run: figures in the docs come from here, never pasted by hand. The peers'
//! configurations are shared by every script (`scripts/bench-common.sh`: `nginx_cache_conf`
//! and `static_nginx_conf`).
//!
//! Module map: [`SUITES`] (what runs), [`parse_tables`] (a script's output into tables),
//! [`Machine`] and [`stamp`] (where and when), [`report`] (the page).

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// One suite: a script and the peer it measures against.
struct Suite {
    /// Its name on the command line and in `benchmarks/NAME.json`.
    name: &'static str,
    /// What it measures, the report's section title.
    title: &'static str,
    /// What secondhit is compared with, in the same run.
    peer: &'static str,
    /// The script, from the repository's root.
    script: &'static str,
    /// Environment variables the script reads that a run may set: passed through and recorded
    /// (with [`COMMON_KNOBS`]); no other variable reaches the script.
    knobs: &'static [&'static str],
}

/// The knobs of `scripts/bench-common.sh`, which every suite may read.
const COMMON_KNOBS: &[&str] = &["NGINX_WORKERS", "NGINX_LOG", "ORIGIN_PORT"];

/// What a script needs of the environment to run at all (tools, their homes), passed through
/// unrecorded.
const PASSED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "TERM",
    "TMPDIR",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
];

/// Every suite, in the report's order.
const SUITES: &[Suite] = &[
    Suite {
        name: "proxy",
        title: "The proxy against nginx: hit and miss paths under wrk",
        peer: "nginx proxy_cache, proxy_cache_min_uses 2, 2 workers",
        script: "scripts/bench-proxy.sh",
        knobs: &[
            "SCENARIOS",
            "RUNS",
            "DURATION",
            "SECONDHIT_BIN",
            "BASELINE",
            "BASELINE_LOG",
            "LAB",
            "FLASH",
            "ICOUNT",
            "ORIGINS",
            "ACCESS_LOG",
        ],
    },
    Suite {
        name: "group-cost",
        title: "What an origin group costs the miss path (ORIGINS=3: a group of three against one origin)",
        peer: "the build before origin groups (BASELINE, one origin), and nginx",
        script: "scripts/bench-proxy.sh",
        knobs: &[
            "SCENARIOS",
            "RUNS",
            "DURATION",
            "SECONDHIT_BIN",
            "BASELINE",
            "ORIGINS",
        ],
    },
    Suite {
        name: "flash-hits",
        title: "Hits from the flash tier (FLASH=1: 1 MiB of memory above flash) against nginx's disk cache",
        peer: "nginx proxy_cache, min_uses 2, its files in the page cache",
        script: "scripts/bench-proxy.sh",
        knobs: &["SCENARIOS", "RUNS", "DURATION", "SECONDHIT_BIN", "FLASH"],
    },
    Suite {
        name: "sendfile",
        title: "Large memory hits: bodies in sealed memory files sent with sendfile (the default) against the same build writing them from the heap",
        peer: "the same build with cache.sendfile = false (NO_SENDFILE=1), and nginx proxy_cache with sendfile",
        script: "scripts/bench-proxy.sh",
        knobs: &["SCENARIOS", "RUNS", "DURATION", "SECONDHIT_BIN", "NO_SENDFILE"],
    },
    Suite {
        name: "maintenance",
        title: "moka's maintenance: exact (as the simulator's, the default) against moka's own",
        peer: "the same build with cache.exact_maintenance = false",
        script: "scripts/bench-maintenance.sh",
        knobs: &["CONCURRENCY", "ROUNDS", "PROFILE", "BENCH_DIR"],
    },
    Suite {
        name: "predict",
        title: "The lab against the deployed edge: serve with production settings beside simulate",
        peer: "secondhit simulate's prediction (with and without what it knows of serve)",
        script: "scripts/bench-predict.sh",
        knobs: &["PROFILE", "BENCH_DIR"],
    },
    Suite {
        name: "replay",
        title: "A trace replayed live: secondhit serve against nginx",
        peer: "nginx proxy_cache, proxy_cache_min_uses 2",
        script: "scripts/replay-vs-nginx.sh",
        knobs: &["SYNTH"],
    },
    Suite {
        name: "disk",
        title: "Memory above flash, live: secondhit's flash tier against nginx's disk cache",
        peer: "nginx proxy_cache on disk, proxy_cache_min_uses 1 and 2",
        script: "scripts/bench-disk.sh",
        knobs: &[
            "OBJECTS",
            "MEMORY_FRACTION",
            "DISK_FRACTION",
            "PROFILE",
            "DISK_RUNS",
            "BENCH_DIR",
        ],
    },
    Suite {
        name: "media",
        title: "Large objects in slices: a media trace through secondhit and nginx's slice module",
        peer: "nginx slice 1m, proxy_cache on disk, proxy_cache_min_uses 2",
        script: "scripts/bench-media.sh",
        knobs: &[
            "OBJECTS",
            "ONE_TIME_SHARE",
            "MEMORY",
            "DISKS",
            "PROFILE",
            "MEDIA_RUNS",
            "BENCH_DIR",
        ],
    },
    Suite {
        name: "failover",
        title: "Origin failover: a server of three killed and restarted under a trace replay",
        peer: "nginx upstream, max_fails=1 fail_timeout=5s, proxy_next_upstream error timeout http_502 http_503",
        script: "scripts/bench-failover.sh",
        knobs: &["CONCURRENCY", "RATE", "KILL_AT", "RESTART_AT", "PROFILE", "BENCH_DIR"],
    },
    Suite {
        name: "simulate",
        title: "The simulator against libCacheSim: speed and agreement",
        peer: "libCacheSim (PyPI libcachesim, C core)",
        script: "scripts/bench-simulate.sh",
        knobs: &[
            "POLICIES",
            "SCALE",
            "SCALE_REQUESTS",
            "POLICY_LIST",
            "POLICY_REQUESTS",
        ],
    },
    Suite {
        name: "pays",
        title: "When second-hit pays: second-request distances and every result decomposed",
        peer: "admit-all at the same size and eviction, stepped beside it over the same requests",
        script: "scripts/bench-pays.sh",
        knobs: &["SYNTH_REQUESTS"],
    },
    Suite {
        name: "c1000",
        title: "HIT rate at 1,000 connections against servers that do next to nothing",
        peer: "nginx serving the file, and the floors of examples/hit_floor.rs",
        script: "scripts/bench-c1000-floor.sh",
        knobs: &["RUNS", "DURATION", "ONLY", "PIN"],
    },
];

/// One markdown table of a script's output.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Table {
    /// The text line before it (what the table is), if any.
    caption: String,
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
}

/// The machine a run was made on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Machine {
    cpu: String,
    cores: usize,
    memory_gib: f64,
    kernel: String,
    rustc: String,
}

/// One run of one suite, as `benchmarks/SUITE.json` keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Run {
    suite: String,
    title: String,
    peer: String,
    /// The command, knobs included, that reproduces the run.
    command: String,
    commit: String,
    /// Whether the work tree had uncommitted changes.
    dirty: bool,
    /// UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    date: String,
    machine: Machine,
    /// Wall seconds of the whole script.
    wall_secs: f64,
    /// When `SECONDHIT_BIN` named the binary measured: its path and `--version` (the commit is
    /// then the tree's, not necessarily the binary's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    binary: Option<String>,
    /// The output's lines that are not tables (what the script says about the run).
    notes: Vec<String>,
    tables: Vec<Table>,
}

/// The tables of a script's markdown output: a header line, a `|---|` line, then rows; the
/// last non-empty line before a table is its caption. Every other line is a note.
fn parse_tables(output: &str) -> (Vec<Table>, Vec<String>) {
    // Cells split at each `|` that is not escaped (`\|` is a `|` inside a cell).
    let cells = |line: &str| -> Vec<String> {
        let line = line.trim();
        let inner = line.strip_prefix('|').unwrap_or(line);
        let inner = match inner.strip_suffix('|') {
            Some(i) if !i.ends_with('\\') => i,
            _ => inner,
        };
        let (mut cells, mut cell, mut escaped) = (Vec::new(), String::new(), false);
        for c in inner.chars() {
            match c {
                '|' if !escaped => cells.push(std::mem::take(&mut cell).trim().to_string()),
                '\\' if !escaped => escaped = true,
                _ => {
                    if escaped && c != '|' {
                        cell.push('\\');
                    }
                    cell.push(c);
                    escaped = false;
                }
            }
        }
        if escaped {
            cell.push('\\');
        }
        cells.push(cell.trim().to_string());
        cells
    };
    let is_rule = |line: &str| {
        let l = line.trim();
        l.starts_with('|') && l.contains("--") && l.chars().all(|c| "|-: ".contains(c))
    };
    let lines: Vec<&str> = output.lines().collect();
    let mut tables = Vec::new();
    // Notes with their line numbers: a note is a table's caption when it is the table's
    // nearest non-empty line above.
    let mut notes: Vec<(usize, String)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim_start().starts_with('|') && lines.get(i + 1).is_some_and(|l| is_rule(l)) {
            let above = (0..i).rev().find(|&j| !lines[j].trim().is_empty());
            let caption = match notes.last() {
                Some((at, _)) if Some(*at) == above => notes.pop().map(|n| n.1).unwrap_or_default(),
                _ => String::new(),
            };
            let mut table = Table {
                caption: caption.trim_end_matches(':').to_string(),
                columns: cells(line),
                rows: Vec::new(),
            };
            i += 2;
            while i < lines.len() && lines[i].trim_start().starts_with('|') {
                table.rows.push(cells(lines[i]));
                i += 1;
            }
            tables.push(table);
            continue;
        }
        if !line.trim().is_empty() {
            notes.push((i, line.trim().to_string()));
        }
        i += 1;
    }
    let notes = notes.into_iter().map(|n| n.1).collect();
    (tables, notes)
}

/// `YYYY-MM-DDTHH:MM:SSZ` of `secs` since the Unix epoch (the civil-from-days algorithm).
fn utc(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// A command's first line of output, or "" when it cannot run.
fn first_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_default()
}

impl Machine {
    /// This machine.
    fn here() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        Machine {
            cpu: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
                .unwrap_or_default(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: (kib / 1_048_576.0 * 10.0).round() / 10.0,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            rustc: first_line("rustc", &["--version"]),
        }
    }
}

/// The commit, whether the tree is dirty, and the date, now.
fn stamp() -> (String, bool, String) {
    let commit = first_line("git", &["rev-parse", "HEAD"]);
    // The results and the page they make are written by the runs themselves: not a change to
    // what is measured.
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no", "--", "."])
        .args([":(exclude)benchmarks", ":(exclude)docs/benchmarks.md"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (commit, dirty, utc(now))
}

/// Runs `suite` with `args`, its output shown as it comes, and returns the stamped run.
fn run(suite: &Suite, args: &[String], stamped: &(String, bool, String)) -> Result<Run, String> {
    let knobs: Vec<(String, String)> = suite
        .knobs
        .iter()
        .chain(COMMON_KNOBS)
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let mut command: Vec<String> = knobs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    command.push(suite.script.to_string());
    command.extend(args.iter().cloned());
    eprintln!("== {}: {}", suite.name, command.join(" "));
    let (commit, dirty, date) = stamped.clone();
    let binary = knobs
        .iter()
        .find(|(k, _)| k == "SECONDHIT_BIN")
        .map(|(_, path)| format!("{path} ({})", first_line(path, &["--version"])));
    let started = std::time::Instant::now();
    let passed = PASSED
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)));
    let mut child = Command::new("bash")
        .arg(suite.script)
        .args(args)
        .env_clear()
        .envs(passed.chain(knobs.iter().cloned()))
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", suite.script))?;
    let mut output = String::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.map_err(|e| format!("{}: reading its output: {e}", suite.script))?;
            println!("{line}");
            output.push_str(&line);
            output.push('\n');
        }
    }
    let status = child.wait().map_err(|e| format!("{}: {e}", suite.script))?;
    if !status.success() {
        return Err(format!("{} failed: {status}", suite.script));
    }
    let (tables, notes) = parse_tables(&output);
    if tables.is_empty() {
        return Err(format!("{} printed no table", suite.script));
    }
    Ok(Run {
        suite: suite.name.to_string(),
        title: suite.title.to_string(),
        peer: suite.peer.to_string(),
        command: command.join(" "),
        commit,
        dirty,
        date,
        machine: Machine::here(),
        wall_secs: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        binary,
        notes,
        tables,
    })
}

/// Where the results live.
fn results_dir() -> PathBuf {
    PathBuf::from("benchmarks")
}

/// A markdown table cell: a `|` inside would end the cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// docs/benchmarks.md from the runs, in [`SUITES`]' order.
fn report(runs: &[Run]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Benchmarks\n\n<!-- Generated by `cargo xtask bench-report` from benchmarks/*.json: edit those \
         (by running `cargo xtask bench SUITE`), not this page. -->\n\n\
         Every figure here was produced by `cargo xtask bench`, which runs each scenario against \
         its peer in the same run on the same machine, and is stamped with the commit, the \
         machine and the date. The machine is shared and noisy: compare the ratios within a run, \
         not absolute figures across runs. The nginx peer is one configuration for every suite \
         (`nginx_cache_conf` in `scripts/bench-common.sh`, with `proxy_cache_lock` on, as \
         secondhit coalesces misses); earlier figures, recorded by hand before the harness and \
         against each script's own nginx configuration, are in \
         [benchmarks-history.md](benchmarks-history.md).\n"
    );
    let order = |r: &Run| {
        SUITES
            .iter()
            .position(|s| s.name == r.suite)
            .unwrap_or(usize::MAX)
    };
    let mut runs: Vec<&Run> = runs.iter().collect();
    runs.sort_by_key(|r| order(r));
    let missing: Vec<&Suite> = SUITES
        .iter()
        .filter(|s| !runs.iter().any(|r| r.suite == s.name))
        .collect();
    if !missing.is_empty() {
        let _ = writeln!(md, "Suites not run yet:\n");
    }
    for s in missing {
        let _ = writeln!(
            md,
            "- {} (`{}`, against {}): not run yet; `cargo xtask bench {}`.",
            s.title, s.script, s.peer, s.name
        );
    }
    for r in runs {
        section(&mut md, r);
    }
    md
}

/// One run's section of the report: its stamp, its tables, what the script said.
fn section(md: &mut String, r: &Run) {
    let m = &r.machine;
    let _ = writeln!(md, "\n## {}\n", r.title);
    let _ =
        writeln!(
        md,
        "Against {}. `{}`, {} at commit `{}`{}, {} cores ({}), {} GiB, Linux {}, {}; {:.0} s.\n",
        r.peer,
        r.command,
        r.date,
        r.commit.get(..10).unwrap_or(&r.commit),
        if r.dirty { " with uncommitted changes" } else { "" },
        m.cores,
        m.cpu,
        m.memory_gib,
        m.kernel,
        m.rustc,
        r.wall_secs
    );
    if let Some(b) = &r.binary {
        let _ = writeln!(md, "The binary measured: `{b}`.\n");
    }
    for t in &r.tables {
        if !t.caption.is_empty() {
            let _ = writeln!(md, "{}:\n", t.caption);
        }
        let _ = writeln!(
            md,
            "| {} |",
            t.columns
                .iter()
                .map(|c| cell(c))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(md, "|{}", "---|".repeat(t.columns.len()));
        for row in &t.rows {
            let _ = writeln!(
                md,
                "| {} |",
                row.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
            );
        }
        md.push('\n');
    }
    if !r.notes.is_empty() {
        let _ = writeln!(md, "<details><summary>What the script said</summary>\n");
        for n in &r.notes {
            let _ = writeln!(md, "    {n}");
        }
        let _ = writeln!(md, "\n</details>");
    }
}

/// Every run kept in `dir`, by file name; a file that is not a run is an error naming it.
fn load_runs(dir: &Path) -> Result<Vec<Run>, String> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    files.sort();
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
        })
        .collect()
}

fn bench(args: &[String]) -> Result<(), String> {
    if args
        .iter()
        .take_while(|a| a.as_str() != "--")
        .any(|a| a == "--list")
    {
        for s in SUITES {
            println!(
                "{:<9} {}  (against {}; {})",
                s.name, s.title, s.peer, s.script
            );
        }
        return Ok(());
    }
    // `bench SUITE -- ARGS...`: ARGS go to the script (one suite only).
    let (names, script_args) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    let chosen: Vec<&Suite> = if names.is_empty() {
        SUITES.iter().collect()
    } else {
        names
            .iter()
            .map(|n| {
                SUITES.iter().find(|s| s.name == n.as_str()).ok_or_else(|| {
                    let all: Vec<&str> = SUITES.iter().map(|s| s.name).collect();
                    format!("no suite {n:?}: the suites are {}", all.join(", "))
                })
            })
            .collect::<Result<_, _>>()?
    };
    if !script_args.is_empty() && chosen.len() != 1 {
        return Err("arguments after -- go to one suite's script: name one suite".into());
    }
    std::fs::create_dir_all(results_dir()).map_err(|e| format!("benchmarks/: {e}"))?;
    // One stamp for the whole invocation, taken before any result is written.
    let stamped = stamp();
    let mut failed = Vec::new();
    for suite in chosen {
        let written = run(suite, script_args, &stamped).and_then(|run| {
            let path = results_dir().join(format!("{}.json", suite.name));
            let json = serde_json::to_string_pretty(&run).map_err(|e| e.to_string())?;
            std::fs::write(&path, json + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
            eprintln!(
                "== {}: {} tables in {}",
                suite.name,
                run.tables.len(),
                path.display()
            );
            Ok(())
        });
        if let Err(e) = written {
            eprintln!("== {}: failed: {e}", suite.name);
            failed.push(format!("{}: {e}", suite.name));
        }
    }
    // The page follows whatever results there are, failed suites or not.
    bench_report()?;
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} suite(s) failed: {}",
            failed.len(),
            failed.join("; ")
        ))
    }
}

fn bench_report() -> Result<(), String> {
    let runs = load_runs(&results_dir())?;
    let page = report(&runs);
    let path = Path::new("docs/benchmarks.md");
    std::fs::write(path, page).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("wrote {} ({} suites run)", path.display(), runs.len());
    Ok(())
}

const USAGE: &str =
    "usage: cargo xtask bench [SUITE...] [-- SCRIPT ARGS]   run suites (all when none)
       cargo xtask bench --list                      the suites
       cargo xtask bench-report                      docs/benchmarks.md from benchmarks/*.json";

fn main() -> ExitCode {
    // The scripts and the results are the repository's: run from its root wherever cargo was.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if let Err(e) = std::env::set_current_dir(&root) {
        eprintln!("xtask: {}: {e}", root.display());
        return ExitCode::FAILURE;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("bench") => bench(&args[1..]),
        Some("bench-report") => bench_report(),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_come_out_with_their_captions_and_the_rest_are_notes() {
        let out = "trace: zipf\n\nMedians over 3 rounds:\n\n| a | b |\n|---|---:|\n| 1 | x \\| y |\n| 2 | 3 |\nafter\n| no rule |\n";
        let (tables, notes) = parse_tables(out);
        assert_eq!(tables.len(), 1);
        assert_eq!(tables[0].caption, "Medians over 3 rounds");
        assert_eq!(tables[0].columns, ["a", "b"]);
        assert_eq!(tables[0].rows, [vec!["1", "x | y"], vec!["2", "3"]]);
        assert_eq!(notes, ["trace: zipf", "after", "| no rule |"]);
    }

    #[test]
    fn a_table_right_after_a_note_line_takes_it_as_caption_only_when_it_is_the_line_before() {
        let (tables, notes) = parse_tables("first\n| a |\n|---|\n| 1 |\n\n| b |\n|--|\n");
        assert_eq!(tables[0].caption, "first");
        assert_eq!(tables[1].caption, "");
        assert!(notes.is_empty());
    }

    #[test]
    fn docs_benchmarks_md_is_what_the_results_make() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let runs = load_runs(&root.join("benchmarks")).unwrap();
        let page = std::fs::read_to_string(root.join("docs/benchmarks.md")).unwrap();
        assert!(
            page == report(&runs),
            "docs/benchmarks.md is not what benchmarks/*.json make: run `cargo xtask bench-report` \
             (and never edit the page by hand)"
        );
    }

    #[test]
    fn dates_are_utc_civil_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_322_843), "2026-12-03T18:34:03Z");
    }

    #[test]
    fn the_report_stamps_each_run_and_names_the_suites_not_run() {
        let run = Run {
            suite: "proxy".into(),
            title: "T".into(),
            peer: "nginx".into(),
            command: "scripts/bench-proxy.sh".into(),
            commit: "0123456789abcdef".into(),
            dirty: false,
            date: "2026-12-03T18:34:03Z".into(),
            machine: Machine {
                cores: 2,
                ..Machine::default()
            },
            wall_secs: 60.0,
            binary: None,
            notes: vec!["n".into()],
            tables: vec![Table {
                caption: "c".into(),
                columns: vec!["x".into()],
                rows: vec![vec!["1".into()]],
            }],
        };
        let page = report(std::slice::from_ref(&run));
        assert!(page.contains("## T\n"), "{page}");
        assert!(
            page.contains("2026-12-03T18:34:03Z at commit `0123456789`"),
            "{page}"
        );
        assert!(page.contains("c:\n\n| x |\n|---|\n| 1 |\n"), "{page}");
        assert!(page.contains("`cargo xtask bench simulate`"), "{page}");
        // What the JSON keeps reads back the same.
        let json = serde_json::to_string(&run).unwrap();
        assert_eq!(serde_json::from_str::<Run>(&json).unwrap(), run);
    }
}
