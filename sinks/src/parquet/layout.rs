//! Where a row goes on disk: `<root>/<kind>/dt=YYYY-MM-DD/hour=HH/part-<host>-<uuid>.parquet`.
//!
//! Partitions follow the event time in UTC, so a query for an hour reads one folder whatever
//! the write time was. Files are written under a hidden temporary name in the same folder and
//! renamed when complete, so readers globbing `*.parquet` never see a partial file.

use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::RecordBatch;
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

/// Where a new file of `kind` in `partition` goes, relative to the sink's root:
/// `<kind>/dt=YYYY-MM-DD/hour=HH/part-<host>-<uuid>.parquet`, always with `/` separators (it is
/// an object key as much as a path).
pub fn new_file_key(kind: EventKind, partition: HourPartition, host: &str) -> String {
    format!(
        "{}/{}/part-{}-{}.parquet",
        kind.as_str(),
        partition.relative_dir().display(),
        sanitize(host),
        uuid::Uuid::new_v4().simple()
    )
}

/// Final and temporary paths of a file on local disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePaths {
    /// Name it gets once complete.
    pub final_path: PathBuf,
    /// Hidden name in the same folder while it is being written.
    pub temp_path: PathBuf,
}

impl FilePaths {
    /// The local paths of `key` (from [`new_file_key`]) under `root`.
    pub fn under(root: &Path, key: &str) -> Self {
        let final_path = root.join(key);
        let name = final_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self {
            temp_path: final_path.with_file_name(format!(".{name}{TEMP_SUFFIX}")),
            final_path,
        }
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

/// Contiguous runs of rows in the same hour, as zero-copy slices.
pub(super) fn split_by_hour(batch: &RecordBatch) -> Vec<(HourPartition, RecordBatch)> {
    let Some(times) = batch
        .column_by_name("time")
        .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>())
    else {
        return vec![(HourPartition::of_micros(0), batch.clone())];
    };
    let mut runs = Vec::new();
    let mut start = 0;
    while start < times.len() {
        let partition = HourPartition::of_micros(times.value(start));
        let mut end = start + 1;
        while end < times.len() && HourPartition::of_micros(times.value(end)) == partition {
            end += 1;
        }
        runs.push((partition, batch.slice(start, end - start)));
        start = end;
    }
    runs
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
        let key = new_file_key(EventKind::Xid, HourPartition::of_micros(0), "node/1 a");
        assert!(
            key.starts_with("xid/dt=1970-01-01/hour=00/part-node_1_a-"),
            "{key}"
        );
        let paths = FilePaths::under(Path::new("/data"), &key);
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
