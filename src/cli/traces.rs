//! The trace commands: `trace-stats`, `trace-convert` and `gen-trace`.

use super::args::{GenTraceArgs, TraceConvertArgs, TraceStatsArgs};
use super::progress;
use anyhow::Context;
use secondhit::sim::{Capacities, Progress as _};
use secondhit::trace::{self, synth};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub(crate) fn trace_stats(args: TraceStatsArgs) -> anyhow::Result<()> {
    let capacities = if args.capacity.is_empty() {
        if let Some(f) = args
            .capacity_fraction
            .iter()
            .find(|f| !(f.is_finite() && **f > 0.0))
        {
            anyhow::bail!(
                "--capacity-fraction {f}: give a positive fraction of the working set, e.g. 0.05"
            );
        }
        Capacities::Fractions(args.capacity_fraction.clone())
    } else {
        Capacities::Bytes(args.capacity.clone())
    };
    let format = args.input.format()?;
    let source = trace::Source::file(&args.file, format);
    let bar = progress::Bar::new();
    bar.begin("reading trace", source.request_count_hint());
    if args.no_distance {
        let stats =
            trace::stats::collect_with_progress(source.open()?, |n| bar.advance(n), |_| {})?;
        bar.end();
        return print_stats(&args, &stats);
    }
    let (mut stats, distances) = trace::stats::collect_all(source.open()?, |n| bar.advance(n))?;
    bar.end();
    let windows: Vec<(String, std::time::Duration)> = args
        .window
        .iter()
        .map(|&w| (secondhit::units::duration(Some(w)), w))
        .collect();
    stats.set_distances(&distances, &windows, &capacities);
    if let Some(path) = &args.plot {
        secondhit::sim::plot_distances(&stats, &distances, &trace_name(&args.file), path)?;
    }
    print_stats(&args, &stats)
}

/// Prints `trace-stats`' report, as text or JSON.
fn print_stats(args: &TraceStatsArgs, stats: &trace::stats::TraceStats) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, stats)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", args.file.display())?;
        write!(out, "{}", stats.to_text())?;
    }
    Ok(())
}

/// A trace's name for a title: its file name, without the directories.
pub(crate) fn trace_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Creates `path`, compressing by its extension (.gz, .zst).
pub(crate) fn create_output(path: &Path) -> anyhow::Result<Box<dyn Write>> {
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

pub(crate) fn trace_convert(args: TraceConvertArgs) -> anyhow::Result<()> {
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

pub(crate) fn gen_trace(args: GenTraceArgs) -> anyhow::Result<()> {
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
    let (sizes, min, max) = match args.media {
        true => ("lognormal:104857600:1.2", 20 << 20, 2 << 30),
        false => ("lognormal:8192:1.5", 1, u64::from(u32::MAX)),
    };
    let clamp = |v: Option<u64>, default: u64, flag: &str| -> anyhow::Result<u32> {
        let v = v.unwrap_or(default);
        u32::try_from(v).map_err(|_| {
            anyhow::anyhow!(
                "--{flag} {v}: at most 4 GiB less 1 byte (the largest size a trace record holds)"
            )
        })
    };
    let spec = synth::Spec {
        objects: args.objects,
        requests: args.requests,
        alpha: args.alpha,
        one_time_share: args.one_time_share,
        sizes: args
            .sizes
            .as_deref()
            .unwrap_or(sizes)
            .parse()
            .map_err(anyhow::Error::msg)?,
        rate: args.rate,
        seed: args.seed,
        min_size: clamp(args.min_size, min, "min-size")?,
        max_size: clamp(args.max_size, max, "max-size")?,
    };
    spec.validate().map_err(anyhow::Error::msg)?;
    let mut out = create_output(&args.out)?;
    let written = if args.media {
        let ranges = synth::Ranges {
            min: args.range_min,
            max: args.range_max,
            skew: args.range_skew,
        };
        ranges.validate().map_err(anyhow::Error::msg)?;
        spec.write_media(ranges, &mut out)
    } else {
        spec.write(format, &mut out)
    };
    let n = written.with_context(|| format!("writing {}", args.out.display()))?;
    drop(out);
    eprintln!(
        "wrote {} requests to {}",
        secondhit::units::count(n),
        args.out.display()
    );
    Ok(())
}
