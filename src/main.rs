//! The `secondhit` command line: parses arguments, then calls into the library.

use anyhow::Context;
use clap::{Parser, Subcommand};
use secondhit::bloom::Layout;
use secondhit::plan::Plan;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

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
    /// Size a Bloom filter generation (bits, hashes, memory) and optionally measure it.
    ///
    /// Example: secondhit bloom --items 100000000 --fpr 0.01 --measure
    Bloom(BloomArgs),
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
        let total = 2 * args.items;
        let show = std::io::stderr().is_terminal();
        plan.measure(|done| {
            if show {
                eprint!("\rmeasuring: {:>5.1} %", done as f64 * 100.0 / total as f64);
                if done == total {
                    eprintln!();
                }
            }
        });
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bloom(args) => bloom(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("secondhit: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
