//! `gpuship-lake`: the lake's views without the agent, for people who only read the lake (no
//! BPF, no root): `report`, `export-trace` and `query`, with the same flags and exit statuses as `gpuship
//! report`, `gpuship export-trace` and `gpuship query`; and `compact`, the fleet's one job that
//! rewrites closed hours into large files.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gpuship_lake::args::{ExportTraceArgs, QueryArgs, ReportArgs};

/// An allocation the system refuses is fatal in Rust; this says so in words before it is.
#[global_allocator]
static ALLOCATOR: gpuship_lake::limits::LoudAllocator = gpuship_lake::limits::LoudAllocator;

/// `gpuship-lake --version`: the version, git commit and UTC build date, as `gpuship --version`
/// (`build/version.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("GPUSHIP_COMMIT"),
    ", built ",
    env!("GPUSHIP_BUILD_DATE"),
    ")"
);

/// gpuship-lake: reads gpuship's Parquet data lake (a folder or s3://bucket/prefix).
#[derive(Debug, Parser)]
#[command(name = "gpuship-lake", version = VERSION, about, long_about = None)]
struct Cli {
    /// Log filter (tracing `EnvFilter` syntax, e.g. `info`, `gpuship_lake=debug`); RUST_LOG wins.
    #[arg(long, global = true, default_value = "warn")]
    log_level: String,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Write one self-contained HTML report of a time range of the lake (as `gpuship report`).
    Report(ReportArgs),
    /// Export a time range of the lake as a Chrome/Perfetto trace (as `gpuship export-trace`).
    ExportTrace(ExportTraceArgs),
    /// Ask the lake anything in SQL over the tables xid, cuda, driver and cuda_stats (as `gpuship query`).
    Query(QueryArgs),
    /// Rewrite the agents' small files of closed hours into large sorted files, exactly once
    /// (docs/operations.md, "Compacting the lake"); the one command that writes to the lake.
    Compact(gpuship_lake::compact::CompactArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&cli.log_level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colour only on a terminal, and not under NO_COLOR: a file or a pipe gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
    let result = match cli.command {
        Command::Report(args) => gpuship_lake::views::report(&args),
        Command::ExportTrace(args) => gpuship_lake::views::export_trace(&args),
        Command::Query(args) => gpuship_lake::views::query(&args),
        Command::Compact(args) => gpuship_lake::compact::compact(&args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("{}: {err:#}", program_name());
            ExitCode::from(1)
        }
    }
}

/// The name this binary was started as: `gpuship` when `gpuship report` runs it (the agent sets
/// argv[0]), so messages name the command the user typed.
fn program_name() -> String {
    std::env::args_os()
        .next()
        .as_deref()
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_name)
        .map_or_else(
            || "gpuship-lake".to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
