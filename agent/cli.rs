//! The command line: `gpuship run`, `validate`, `doctor`, `xid`, `top`, `export-trace`,
//! `report`, `query`, `completions` and `man`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// What `gpuship --version` prints after the name: the crate's version, the git commit it was
/// built from (`-dirty` when the tree had changes, `unknown` outside a git checkout) and the UTC
/// build date (`SOURCE_DATE_EPOCH` when set), from `build/version.rs`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("GPUSHIP_COMMIT"),
    ", built ",
    env!("GPUSHIP_BUILD_DATE"),
    ")"
);

/// gpuship: captures NVIDIA XID errors and CUDA driver API calls with eBPF and ships them as
/// Arrow record batches to Parquet (and more sinks). Runs as root.
#[derive(Debug, Parser)]
#[command(name = "gpuship", version = VERSION, about, long_about = None)]
pub struct Cli {
    /// Log filter (tracing `EnvFilter` syntax, e.g. `info`, `gpuship=debug`); RUST_LOG wins.
    /// Default `info` (`warn` for the lake's views).
    #[arg(long, global = true)]
    pub log_level: Option<String>,
    /// Log lines as `text` (coloured only on a terminal) or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: crate::logging::LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: CliCommand,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Capture until SIGINT/SIGTERM (or until the traced command or pid exits), then drain,
    /// close files and print the accounting and a summary.
    ///
    /// Without --config: every source this host allows, Parquet under ./gpuship-data.
    Run(RunArgs),
    /// Check a configuration file without running anything; lists every problem with its line.
    Validate(ValidateArgs),
    /// Check, by trying, which probes can work on this host, and for each that cannot, why and
    /// what to do. Exit status 0 when every configured source can run.
    Doctor(DoctorArgs),
    /// Explain an XID code from the built-in catalog (name, category, severity, recommended
    /// action), or list the whole catalog.
    Xid(XidArgs),
    /// Export a time range of the data lake as a Chrome/Perfetto trace (JSON): CUDA calls per
    /// process and thread, driver operations, XIDs as global markers. Open it in
    /// ui.perfetto.dev.
    ///
    /// Runs `gpuship-lake export-trace` (installed beside gpuship): `gpuship export-trace --help`
    /// lists its flags.
    #[command(disable_help_flag = true)]
    ExportTrace(LakeViewArgs),
    /// Write one self-contained HTML report of a time range of the data lake: per-GPU XID
    /// timeline with failed CUDA calls, incidents, CUDA call rates and latency, delivery
    /// accounting.
    ///
    /// Runs `gpuship-lake report` (installed beside gpuship): `gpuship report --help` lists its
    /// flags.
    #[command(disable_help_flag = true)]
    Report(LakeViewArgs),
    /// Ask the data lake anything in SQL (tables xid, cuda, driver, cuda_stats, cuda_memory; the
    /// rows of --since/--until) and print the rows as a table, CSV or JSON. Exit status 2 for
    /// wrong SQL.
    ///
    /// Runs `gpuship-lake query` (installed beside gpuship): `gpuship query --help` lists its
    /// flags.
    #[command(disable_help_flag = true)]
    Query(LakeViewArgs),
    /// Live terminal view of a running agent (read from its metrics server's /live): calls per
    /// second per CUDA function and per process, the latest XIDs, loss counters. q quits.
    Top(TopArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell (`make
    /// install` installs bash's, zsh's and fish's).
    Completions(CompletionsArgs),
    /// Print the gpuship(1) man page as roff, or write one page per command into a folder
    /// (`make install` installs them).
    Man(ManArgs),
}

/// `gpuship completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `gpuship man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write gpuship.1 and gpuship-<command>.1 for every command into this folder instead.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// `gpuship report`, `export-trace` and `query`: every argument goes to `gpuship-lake` unread
/// ([`crate::lake_views`]), `--help` included.
#[derive(Debug, Args)]
pub struct LakeViewArgs {
    /// The view's flags (see `--help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// `gpuship top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// The agent's metrics address (`[metrics] address` of `gpuship run`).
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub agent: String,
    /// Time between refreshes: 200ms, 1s, 1.5s, 2m.
    #[arg(long, default_value = "1s", value_parser = gpuship_top::parse_interval)]
    pub interval: std::time::Duration,
    /// Print one plain-text frame (two polls one interval apart, so rates exist) and exit;
    /// exit status 1 when the agent cannot be read.
    #[arg(long)]
    pub once: bool,
}

/// `gpuship xid`.
#[derive(Debug, Args)]
pub struct XidArgs {
    /// The XID code.
    #[arg(required_unless_present = "list", conflicts_with = "list")]
    pub code: Option<u32>,
    /// Print every code as a table.
    #[arg(long)]
    pub list: bool,
}

/// `gpuship doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Configuration whose sources are checked (default: the embedded default).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Print the checks as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `gpuship run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// TOML configuration file (documented default: config/gpuship.toml).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Trace only this process's CUDA calls (XIDs are always system-wide); stop when it exits.
    #[arg(long, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Write the final accounting and summary to this file as JSON.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Start this command, trace it and its children, and stop when it exits
    /// (`gpuship run -- python train.py`). gpuship exits with the command's exit code.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// `gpuship validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The file to check.
    #[arg(long, short)]
    pub config: PathBuf,
    /// Check the file alone: skip each sink's start check, which reads what `run` reads from
    /// this machine before it starts (secrets, `${env:NAME}` values, TLS files). For a file
    /// checked away from the nodes that will run it.
    #[arg(long)]
    pub syntax_only: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn top_defaults_to_the_local_agent_every_second() {
        let cli = Cli::parse_from(["gpuship", "top"]);
        let CliCommand::Top(args) = cli.command else {
            panic!()
        };
        assert_eq!(args.agent, "127.0.0.1:9464");
        assert_eq!(args.interval, std::time::Duration::from_secs(1));
        assert!(!args.once);
        assert!(Cli::try_parse_from(["gpuship", "top", "--interval", "1h"]).is_err());
    }

    #[test]
    fn views_take_every_argument_unread_for_gpuship_lake() {
        let cli = Cli::parse_from([
            "gpuship", "report", "--since", "2d", "--help", "--output", "r.html",
        ]);
        let CliCommand::Report(args) = cli.command else {
            panic!()
        };
        assert_eq!(
            args.args,
            ["--since", "2d", "--help", "--output", "r.html"].map(OsString::from)
        );
        assert_eq!(cli.log_level, None);
        let cli = Cli::parse_from(["gpuship", "--log-level", "debug", "query", "SELECT 1"]);
        let CliCommand::Query(args) = cli.command else {
            panic!()
        };
        assert_eq!(args.args, [OsString::from("SELECT 1")]);
        assert_eq!(cli.log_level.as_deref(), Some("debug"));
        let cli = Cli::parse_from(["gpuship", "export-trace"]);
        let CliCommand::ExportTrace(args) = cli.command else {
            panic!()
        };
        assert!(args.args.is_empty(), "gpuship-lake says what is missing");
    }

    #[test]
    fn command_after_double_dash_is_captured() {
        let cli = Cli::parse_from([
            "gpuship", "run", "--", "python3", "train.py", "--epochs", "2",
        ]);
        let CliCommand::Run(args) = cli.command else {
            panic!()
        };
        assert_eq!(args.command, vec!["python3", "train.py", "--epochs", "2"]);
        assert!(Cli::try_parse_from(["gpuship", "run", "--pid", "5", "--", "x"]).is_err());
    }
}
