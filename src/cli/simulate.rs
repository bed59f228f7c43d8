//! `secondhit simulate`: a sweep run here, split into a plan of separate runs (`--plan`), or
//! their reports merged (`--merge`); the report printed and written.

use super::args::{evictions, ExpectedItems, SimulateArgs};
use super::print_report;
use super::progress::Bar;
use super::source;
use anyhow::Context;
use secondhit::admission::{Policy, Settings};
use secondhit::sim::{self, Capacities};
use std::path::{Path, PathBuf};

/// A word for `sh`: as it is when it is plain, else in single quotes.
pub(crate) fn sh_word(s: &str) -> String {
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
pub(crate) fn plan(args: &SimulateArgs, dir: &Path) -> anyhow::Result<()> {
    let results = dir.join("results");
    std::fs::create_dir_all(&results)
        .with_context(|| format!("cannot create {}", results.display()))?;
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    let common = common_words(args, &exe);
    let (lines, n) = job_lines(args, &common, &results);
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

/// `p` made absolute (as it is, if that fails).
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The words every job's command line begins with: this program (`exe`), `simulate`, and every
/// option of the sweep but its policies, evictions and sizes, on one thread.
fn common_words(args: &SimulateArgs, exe: &Path) -> Vec<String> {
    let mut common = vec![absolute(exe).display().to_string(), "simulate".into()];
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
    for (name, value) in tier_and_cluster_options(args) {
        opt(name, value);
    }
    if args.slice_size > 0 {
        opt("slice-size", args.slice_size.to_string());
    }
    if args.object_cost > 0 {
        opt("object-cost", args.object_cost.to_string());
    }
    if args.stale_keep != std::time::Duration::from_secs(4 * 3600) {
        opt("stale-keep", format!("{}ms", args.stale_keep.as_millis()));
    }
    if let (Some(n), Some(c)) = (args.shield_nodes, args.shield_capacity) {
        opt("shield-nodes", n.to_string());
        opt("shield-capacity", c.to_string());
        opt("shield-policy", args.shield_policy.to_string());
    }
    if args.input.csv_header {
        common.push("--csv-header".into());
    }
    if args.no_decompose {
        common.push("--no-decompose".into());
    }
    common
}

/// The flash tier's options and the cluster's, as given: (name, value) pairs.
fn tier_and_cluster_options(args: &SimulateArgs) -> Vec<(&'static str, String)> {
    let mut options = Vec::new();
    if !args.disk_capacity.is_empty() {
        let join = |v: Vec<String>| v.join(",");
        options.push((
            "disk-capacity",
            join(args.disk_capacity.iter().map(u64::to_string).collect()),
        ));
        options.push((
            "disk-policy",
            join(args.disk_policy.iter().map(Policy::to_string).collect()),
        ));
        options.push(("disk-eviction", args.disk_eviction.to_string()));
        if let Some(r) = args.disk_write_rate {
            options.push(("disk-write-rate", r.to_string()));
        }
        if let Some(b) = args.disk_block_size {
            options.push(("disk-block-size", b.to_string()));
        }
    }
    if args.nodes != 1 {
        options.push(("nodes", args.nodes.to_string()));
        options.push((
            "node-capacity",
            match args.node_capacity {
                sim::NodeCapacity::Split => "split",
                sim::NodeCapacity::Each => "each",
            }
            .into(),
        ));
    }
    options
}

/// One `sh` command line per run, each writing its report into `results`, in the order of one
/// run's results: sizes, then evictions, then policies; and how many there are.
fn job_lines(args: &SimulateArgs, common: &[String], results: &Path) -> (String, usize) {
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
    let mut lines = String::new();
    let mut n = 0;
    for (size_opt, size) in &sizes {
        for eviction in &evictions(&args.eviction) {
            for policy in &args.policy {
                n += 1;
                let out = absolute(&results.join(format!("job-{n:04}.json")));
                let mut job = common.to_vec();
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
    (lines, n)
}

/// `simulate --merge FILE...`: the reports of separate runs as one.
pub(crate) fn merge(files: &[PathBuf]) -> anyhow::Result<sim::Report> {
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

pub(crate) fn simulate(args: SimulateArgs) -> anyhow::Result<()> {
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
            block_size: args.disk_block_size,
        }),
        decompose: !args.no_decompose,
        shield: match (args.shield_nodes, args.shield_capacity) {
            (Some(nodes), Some(capacity)) => Some(sim::ShieldOptions {
                nodes,
                capacity,
                policy: args.shield_policy,
            }),
            _ => None,
        },
        slice_size: (args.slice_size > 0).then_some(args.slice_size),
        object_cost: args.object_cost,
        stale_keep: args.stale_keep,
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
pub(crate) fn write_simulation(args: &SimulateArgs, report: &sim::Report) -> anyhow::Result<()> {
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
pub(crate) fn undersized_filters(report: &sim::Report) -> Vec<String> {
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
