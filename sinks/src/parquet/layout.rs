//! Where a row goes on disk: `<root>/<kind>/dt=YYYY-MM-DD/hour=HH/part-<host>-<uuid>.parquet`.
//!
//! Partitions follow the event time in UTC, so a query for an hour reads one folder whatever
//! the write time was. Files are written under a hidden temporary name in the same folder and
//! renamed when complete, so readers globbing `*.parquet` never see a partial file.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Datelike, Timelike, Utc};

use crate::EventKind;

const MICROS_PER_HOUR: i64 = 3_600 * 1_000_000;

/// An hour of event time; the unit of partitioning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HourPartition(i64);

impl HourPartition {
    /// The partition holding a row whose `time` column is `micros` since the epoch.
    #[inline]
    pub fn of_micros(micros: i64) -> Self {
        Self(micros.div_euclid(MICROS_PER_HOUR))
    }

    /// `dt=YYYY-MM-DD/hour=HH`.
    pub fn relative_dir(self) -> PathBuf {
        let start = DateTime::<Utc>::from_timestamp(self.0 * 3_600, 0).unwrap_or_default();
        PathBuf::from(format!(
            "dt={:04}-{:02}-{:02}",
            start.year(),
            start.month(),
            start.day()
        ))
        .join(format!("hour={:02}", start.hour()))
    }
}

/// Final and temporary paths of one new file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePaths {
    /// Name it gets once complete.
    pub final_path: PathBuf,
    /// Hidden name while it is being written.
    pub temp_path: PathBuf,
}

/// Paths for a new file of `kind` in `partition` under `root`.
pub fn new_file_paths(
    root: &Path,
    kind: EventKind,
    partition: HourPartition,
    host: &str,
) -> FilePaths {
    let dir = root.join(kind.as_str()).join(partition.relative_dir());
    let name = format!(
        "part-{}-{}.parquet",
        sanitize(host),
        uuid::Uuid::new_v4().simple()
    );
    FilePaths {
        temp_path: dir.join(format!(".{name}.inprogress")),
        final_path: dir.join(name),
    }
}

/// Suffix of files still being written (or left behind by a crash).
pub const TEMP_SUFFIX: &str = ".inprogress";

/// Host names can hold characters that are awkward in file names; keep a safe subset.
fn sanitize(host: &str) -> String {
    let cleaned: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.is_empty() {
        "unknown-host".to_string()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_dirs_follow_utc_event_time() {
        // 2026-11-22T03:59:59.999999Z and the next microsecond.
        let before = 1_795_319_999_999_999;
        assert_eq!(
            HourPartition::of_micros(before).relative_dir(),
            PathBuf::from("dt=2026-11-22/hour=03")
        );
        assert_eq!(
            HourPartition::of_micros(before + 1).relative_dir(),
            PathBuf::from("dt=2026-11-22/hour=04")
        );
        assert_eq!(
            HourPartition::of_micros(0).relative_dir(),
            PathBuf::from("dt=1970-01-01/hour=00")
        );
    }

    #[test]
    fn file_names_are_hidden_until_final() {
        let paths = new_file_paths(
            Path::new("/data"),
            EventKind::Xid,
            HourPartition::of_micros(0),
            "node/1 a",
        );
        let final_name = paths.final_path.file_name().unwrap().to_str().unwrap();
        assert!(final_name.starts_with("part-node_1_a-"), "{final_name}");
        assert!(final_name.ends_with(".parquet"));
        assert_eq!(
            paths.final_path.parent().unwrap(),
            Path::new("/data/xid/dt=1970-01-01/hour=00")
        );
        let temp_name = paths.temp_path.file_name().unwrap().to_str().unwrap();
        assert_eq!(temp_name, format!(".{final_name}{TEMP_SUFFIX}"));
    }
}
