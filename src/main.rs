//! The `secondhit` command line: the flags are parsed once ([`cli::args`]), then each
//! subcommand calls into the crates: `secondhit-proxy` for `serve`, `secondhit-lab` for the rest.

mod alloc;
mod cli;

use clap::Parser;
use cli::args::{Cli, Command};
use std::process::ExitCode;

/// mimalloc rather than glibc's malloc (see `alloc.rs` for why its fast paths are called
/// directly).
#[global_allocator]
static ALLOCATOR: alloc::MiMalloc = alloc::MiMalloc;

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
    let result = match Cli::parse().command {
        Command::Bloom(args) => cli::bloom::bloom(args),
        Command::TraceStats(args) => cli::traces::trace_stats(args),
        Command::Simulate(args) => cli::simulate::simulate(args),
        Command::Serve(args) => cli::serve::serve(args),
        Command::Demo(args) => cli::live::demo(args),
        Command::Origin(args) => cli::live::origin(args),
        Command::Replay(args) => cli::live::replay(args),
        Command::GenTrace(args) => cli::traces::gen_trace(args),
        Command::TraceConvert(args) => cli::traces::trace_convert(args),
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
