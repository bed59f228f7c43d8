//! The command line, one module per subcommand family:
//!
//! - [`args`]: every flag, parsed once with clap, and how each set becomes the crates' typed
//!   settings (`serve`'s flags over its configuration file, `simulate`'s into a sweep).
//! - [`serve`]: the proxy, its logger and its signals.
//! - [`simulate`]: a sweep, its plan of separate runs, the merge of their reports.
//! - [`live`]: `demo`, `origin` and `replay`.
//! - [`traces`]: `trace-stats`, `trace-convert`, `gen-trace`.
//! - [`bloom`]: a filter's size and its measurement.
//! - [`progress`]: the progress bar of long runs.

pub(crate) mod args;
pub(crate) mod bloom;
pub(crate) mod live;
pub(crate) mod progress;
pub(crate) mod serve;
pub(crate) mod simulate;
pub(crate) mod traces;

use anyhow::Context;
use secondhit::trace::{self, Format};
use std::io::Write;
use std::path::Path;

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The trace a command reads: `--trace FILE`, or the bundled one.
pub(crate) fn source(path: Option<&Path>, format: Option<Format>) -> trace::Source {
    match path {
        Some(p) => trace::Source::file(p, format),
        None => trace::Source::bundled(format),
    }
}

/// Prints the table on stdout and writes the JSON to `json` (a file, or stdout instead of the
/// table with `-`).
pub(crate) fn print_report(
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
