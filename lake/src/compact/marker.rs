//! The commit marker of one compaction of one hour folder (`_compaction-<run>.json`), and the
//! names compaction gives what it writes. A marker is written in one piece (an object PUT, or a
//! rename on a local disk) after every file it names is complete: its existence is the commit.
//! It names the compacted files that hold the rows and the agents' files they replace, so a
//! reader that sees it reads the former and skips the latter ([`super::rule`]). This module
//! only names and parses; it never touches storage.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Names of commit markers start with this (`_` keeps Spark, Hive and Trino from reading it).
pub const MARKER_PREFIX: &str = "_compaction-";
/// ... and end with this.
pub const MARKER_SUFFIX: &str = ".json";
/// Names of compacted files start with this; they are read only when a marker names them.
pub const OUTPUT_PREFIX: &str = "compact-";
/// Names of the agents' files (the Parquet sink's `part-<host>-<uuid>.parquet`).
pub const SOURCE_PREFIX: &str = "part-";
/// The marker format this build writes and reads.
pub const FORMAT: u32 = 1;

/// One compacted file of a marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Output {
    /// Its name in the hour folder (`compact-<run>-<n>.parquet`).
    pub name: String,
    /// Its size in bytes when committed; retiring checks it before deleting any source.
    pub size: u64,
    /// Rows it holds.
    pub rows: u64,
}

/// A committed compaction of one hour folder of one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// [`FORMAT`]; a marker of another format is refused, never guessed at.
    pub format: u32,
    /// The run that wrote it (also in its name and its outputs' names).
    pub run: String,
    /// When it was written: its sources are deleted `--retire-after` later, so a reader that
    /// listed the folder just before sees its files until it is done.
    pub committed_at: DateTime<Utc>,
    /// Rows of the outputs together (equal to the rows of the sources).
    pub rows: u64,
    /// The compacted files, in the same folder.
    pub outputs: Vec<Output>,
    /// The agents' files whose rows the outputs hold, in the same folder.
    pub sources: Vec<String>,
    /// For a `cuda_stats` hour: the hourly roll-up of the outputs' rows, in the hour's
    /// `cuda_stats_hourly` folder ([`super::rollup`]). Empty for other tables and for markers
    /// written before the roll-up existed (they have no such field).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollups: Vec<Output>,
}

/// A marker that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("compaction marker {key} is damaged: {reason}")]
pub struct DamagedMarker {
    /// Its key.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Marker {
    /// The marker `key` holds (`text`), checked: the right format, names that stay in its
    /// folder, outputs that are compacted files and sources that are agents' files.
    pub fn parse(key: &str, text: &[u8]) -> Result<Marker, DamagedMarker> {
        let damaged = |reason: String| DamagedMarker {
            key: key.to_string(),
            reason,
        };
        let marker: Marker = serde_json::from_slice(text).map_err(|e| damaged(e.to_string()))?;
        if marker.format != FORMAT {
            return Err(damaged(format!(
                "format {} (this build reads format {FORMAT})",
                marker.format
            )));
        }
        if marker.outputs.is_empty() {
            return Err(damaged("it names no compacted file".into()));
        }
        for output in &marker.outputs {
            if !is_output(&output.name) {
                return Err(damaged(format!(
                    "{:?} is not a compacted file",
                    output.name
                )));
            }
        }
        for rollup in &marker.rollups {
            if !super::rollup::is_rollup(&rollup.name) {
                return Err(damaged(format!("{:?} is not a roll-up file", rollup.name)));
            }
        }
        for source in &marker.sources {
            if !is_source(source) {
                return Err(damaged(format!("{source:?} is not an agent's file")));
            }
        }
        let rows: u64 = marker.outputs.iter().map(|o| o.rows).sum();
        if rows != marker.rows {
            return Err(damaged(format!(
                "its outputs hold {rows} rows, it says {}",
                marker.rows
            )));
        }
        Ok(marker)
    }

    /// The marker as written.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising plain strings and numbers cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }
}

/// True for a name without a folder, `.` or `..`.
fn plain_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".."
}

/// A commit marker's name.
pub fn is_marker(name: &str) -> bool {
    name.starts_with(MARKER_PREFIX) && name.ends_with(MARKER_SUFFIX) && plain_name(name)
}

/// A compacted file's name (complete; staging names of an unfinished upload do not end in
/// `.parquet`).
pub fn is_output(name: &str) -> bool {
    name.starts_with(OUTPUT_PREFIX) && name.ends_with(".parquet") && plain_name(name)
}

/// An agent's finished file.
pub fn is_source(name: &str) -> bool {
    name.starts_with(SOURCE_PREFIX) && name.ends_with(".parquet") && plain_name(name)
}

/// Anything compaction may have left behind in an hour folder (a compacted file, a marker, or
/// an unfinished upload of either, which `object_store` stages as `<name>#<n>`).
pub fn is_compaction_debris(name: &str) -> bool {
    name.starts_with(OUTPUT_PREFIX) || name.starts_with(MARKER_PREFIX)
}

/// The marker name of `run`.
pub fn marker_name(run: &str) -> String {
    format!("{MARKER_PREFIX}{run}{MARKER_SUFFIX}")
}

/// The name of the `index`th compacted file of `run`.
pub fn output_name(run: &str, index: usize) -> String {
    format!("{OUTPUT_PREFIX}{run}-{index:04}.parquet")
}

/// The host an agent's file names (`part-<host>-<32 hex>.parquet`): the key rows are grouped
/// and ordered by. A name that does not end in a UUID is its own group.
pub fn source_host(name: &str) -> &str {
    let stem = name
        .strip_prefix(SOURCE_PREFIX)
        .and_then(|n| n.strip_suffix(".parquet"))
        .unwrap_or(name);
    match stem.rsplit_once('-') {
        Some((host, uuid)) if uuid.len() == 32 && uuid.bytes().all(|b| b.is_ascii_hexdigit()) => {
            host
        }
        _ => stem,
    }
}

/// A run's name: its start time (UTC) and the process id, unique for one writer per lake.
pub fn run_name(now: DateTime<Utc>) -> String {
    format!("{}-{}", now.format("%Y%m%dT%H%M%S%9fZ"), std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker() -> Marker {
        Marker {
            format: FORMAT,
            run: "r1".into(),
            committed_at: DateTime::from_timestamp(1_795_319_000, 0).unwrap(),
            rows: 5,
            outputs: vec![Output {
                name: output_name("r1", 0),
                size: 100,
                rows: 5,
            }],
            sources: vec!["part-node-a-0123456789abcdef0123456789abcdef.parquet".into()],
            rollups: Vec::new(),
        }
    }

    #[test]
    fn a_marker_round_trips() {
        let m = marker();
        assert_eq!(Marker::parse("k", &m.to_json()).unwrap(), m);
        assert_eq!(marker_name("r1"), "_compaction-r1.json");
        assert!(is_marker("_compaction-r1.json"));
        assert!(!is_marker("_compaction-r1.json#1"), "an unfinished put");
        assert!(is_output("compact-r1-0000.parquet"));
        assert!(!is_output("compact-r1-0000.parquet#3"));
        assert!(is_compaction_debris("compact-r1-0000.parquet#3"));
        assert!(!is_compaction_debris("part-a.parquet"));
    }

    #[test]
    fn damaged_markers_are_clear_errors() {
        let good = marker().to_json();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (good[..good.len() / 2].to_vec(), "EOF while parsing"),
            (b"\x00\xff garbage".to_vec(), "expected value"),
            (b"{}".to_vec(), "missing field"),
            (
                String::from_utf8(good.clone())
                    .unwrap()
                    .replace("\"format\": 1", "\"format\": 9")
                    .into_bytes(),
                "format 9 (this build reads format 1)",
            ),
            (
                String::from_utf8(good.clone())
                    .unwrap()
                    .replace("\"rows\": 5,\n  \"outputs\"", "\"rows\": 6,\n  \"outputs\"")
                    .into_bytes(),
                "its outputs hold 5 rows, it says 6",
            ),
            (
                String::from_utf8(good.clone())
                    .unwrap()
                    .replace("part-node-a", "../../etc/part-x")
                    .into_bytes(),
                "is not an agent's file",
            ),
            (
                String::from_utf8(good)
                    .unwrap()
                    .replace("compact-r1-0000.parquet", "part-x.parquet")
                    .into_bytes(),
                "is not a compacted file",
            ),
        ];
        for (text, expected) in cases {
            let err = Marker::parse("cuda/dt=2026-11-22/hour=03/_compaction-r1.json", &text)
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with(
                    "compaction marker cuda/dt=2026-11-22/hour=03/_compaction-r1.json is damaged: "
                ) && err.contains(expected),
                "{err} (expected {expected})"
            );
        }
    }

    #[test]
    fn hosts_come_from_the_agents_file_names() {
        assert_eq!(
            source_host("part-gpu-node-0001-0123456789abcdef0123456789abcdef.parquet"),
            "gpu-node-0001"
        );
        assert_eq!(source_host("part-odd-name.parquet"), "odd-name");
        assert!(run_name(DateTime::from_timestamp(0, 5).unwrap())
            .starts_with("19700101T000000000000005Z-"));
    }
}
