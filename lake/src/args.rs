//! The command-line arguments of the views, shared by the `gpuship` binary (which flattens
//! them into its own subcommands) and the standalone `gpuship-lake` binary, so both accept the
//! same flags.

use std::path::PathBuf;

use clap::Args;

use crate::limits::LimitArgs;

/// The time range and lake a view reads (`export-trace`, `report`).
#[derive(Debug, Args)]
pub struct RangeArgs {
    /// Start: a duration back from now (30m, 6h, 2d) or an RFC 3339 time (2026-11-22T03:00:00Z).
    #[arg(long)]
    pub since: String,
    /// End (exclusive), in the same forms; default now.
    #[arg(long)]
    pub until: Option<String>,
    /// The data lake: the Parquet sink's `path`, a folder or s3://bucket/prefix (AWS_ENDPOINT_URL
    /// or AWS_ENDPOINT, AWS_REGION and credentials from the environment). Exit status 3 when
    /// no file of the range can be read.
    #[arg(long, default_value = "./gpuship-data")]
    pub data: String,
    /// Read the lake's Iceberg tables (`<data>/iceberg/<kind>`, their current snapshots) instead
    /// of listing its folders: only hours `gpuship-lake compact` has committed are there.
    #[arg(long)]
    pub iceberg: bool,
    /// Memory and time the command may use.
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// `gpuship export-trace`.
#[derive(Debug, Args)]
pub struct ExportTraceArgs {
    /// Range and lake.
    #[command(flatten)]
    pub range: RangeArgs,
    /// Where to write the trace JSON; `-` is standard output.
    #[arg(long, short, default_value = "-")]
    pub output: PathBuf,
}

/// `gpuship report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Range and lake.
    #[command(flatten)]
    pub range: RangeArgs,
    /// Where to write the HTML; `-` is standard output.
    #[arg(long, short, default_value = "gpuship-report.html")]
    pub output: PathBuf,
}

/// How `gpuship query` prints its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QueryFormat {
    /// An aligned text table.
    Table,
    /// CSV with a header line.
    Csv,
    /// One JSON array of objects.
    Json,
}

/// `gpuship query`.
#[derive(Debug, Args)]
pub struct QueryArgs {
    /// The SQL (DataFusion's dialect) over the tables `xid`, `cuda`, `driver`, `cuda_stats` and
    /// `cuda_memory`: the rows of the range, with the hive partition columns `dt` and `hour`.
    /// Exit status 2 when the SQL is wrong.
    pub sql: String,
    /// Range and lake.
    #[command(flatten)]
    pub range: RangeArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: QueryFormat,
}
