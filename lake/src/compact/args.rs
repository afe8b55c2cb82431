//! `gpuship-lake compact`'s command-line arguments.

use std::time::Duration;

use clap::Args;

use crate::limits::parse_size;

/// `gpuship-lake compact`.
#[derive(Debug, Clone, Args)]
pub struct CompactArgs {
    /// The data lake: the Parquet sink's `path`, a folder or s3://bucket/prefix (AWS_ENDPOINT_URL
    /// or AWS_ENDPOINT, AWS_REGION and credentials from the environment).
    #[arg(long, default_value = "./gpuship-data")]
    pub data: String,
    /// Input bytes per compacted file (e.g. 128MiB, 512MiB): the agents' files of an hour are
    /// written into files of at most this many of their bytes, one host never split.
    #[arg(long, value_parser = parse_size, default_value = "256MiB")]
    pub target_file_size: u64,
    /// An hour is compacted once it ended this long ago (e.g. 15m): long enough that no agent
    /// still writes into it (agents finalise a file within max_file_age_secs, 300 s by default,
    /// plus how late rows reach the sink).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "15m")]
    pub grace: Duration,
    /// The agents' files a compaction replaced are deleted this long after it committed (e.g.
    /// 1h, 0s): readers that listed the hour before the commit still read them meanwhile, so
    /// keep it above the longest read (`--timeout` of report, query, export-trace: 300 s).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
    pub retire_after: Duration,
    /// Decoded rows of one host held in memory for sorting, at most (e.g. 256MiB); a host with
    /// more is sorted in pieces of this size.
    #[arg(long, value_parser = parse_size, default_value = "256MiB")]
    pub sort_memory: u64,
    /// Only hours from this far back (30d) or this time (RFC 3339) on; default every hour of
    /// the lake.
    #[arg(long)]
    pub since: Option<String>,
    /// Do not add the compacted files to the Iceberg tables (`<data>/iceberg/<kind>`); by
    /// default every run appends the markers it finds uncommitted there as one snapshot per
    /// table.
    #[arg(long)]
    pub no_iceberg: bool,
    /// Manifests an Iceberg table's current snapshot may list: a run that would make more
    /// first merges the previous ones into one (readers open every manifest to plan a scan,
    /// and each run adds one). Iceberg's own default.
    #[arg(long, default_value_t = crate::iceberg::merge::MERGE_MANIFESTS_AT)]
    pub merge_manifests_at: usize,
    /// Snapshots an Iceberg table keeps (and earlier metadata files, for time travel): a run
    /// drops older ones and deletes the metadata files only they read. Data files are never
    /// deleted (every run only appends).
    #[arg(long, default_value_t = crate::iceberg::expire::KEEP_SNAPSHOTS)]
    pub keep_snapshots: usize,
    /// An Apache Iceberg REST catalog to keep in step with the tables (Polaris, Lakekeeper,
    /// Nessie, Glue's or S3 Tables' Iceberg endpoint): after each run every table is
    /// registered there from its newest metadata file, or its entry gets what it lacks in one
    /// commit. A bearer token is read from GPUSHIP_CATALOG_TOKEN only (an argument would show
    /// in `ps`).
    #[arg(long, env = "GPUSHIP_CATALOG_URI")]
    pub catalog_uri: Option<String>,
    /// The catalog's namespace of the tables (`<namespace>.<kind>`); dots separate levels.
    #[arg(long, default_value = "gpuship")]
    pub catalog_namespace: String,
    /// The warehouse to ask the catalog for, where it serves several.
    #[arg(long, env = "GPUSHIP_CATALOG_WAREHOUSE")]
    pub catalog_warehouse: Option<String>,
    /// Print what would be compacted, cleaned and deleted; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Bytes per upload part (S3 needs at least 5 MiB); smaller for tests.
    #[arg(long, default_value_t = 16 << 20, hide = true)]
    pub upload_part_bytes: u64,
}
