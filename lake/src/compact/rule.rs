//! The rule every reader of the lake follows so that it sees each row once, before, during and
//! after a compaction, and the job follows too. In one hour folder:
//!
//! - a compacted file (`compact-*.parquet`) is read only if a committed marker
//!   (`_compaction-*.json`) names it, and it is taken from the marker, not from the listing
//!   (a listing that races the job can show the marker without the file);
//! - an agent's file (`part-*.parquet`) is read unless a committed marker names it as a source;
//! - any other `*.parquet` is read as it is (compaction never touches it), hidden names (`.`)
//!   never.
//!
//! A marker that cannot be read or parsed is reported and counts as not committed: its
//! compacted files are skipped and its sources read, which is right until the job deletes them,
//! and the job never deletes the sources of a marker it cannot read. This module decides from
//! names and markers only; fetching markers is the caller's.

use std::collections::HashSet;

use super::marker::{is_marker, is_output, is_source, DamagedMarker, Marker};

/// The objects of one hour folder (`<table>/dt=YYYY-MM-DD/hour=HH`), by role, as keys.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HourFolder {
    /// `<table>/dt=.../hour=HH`, no trailing `/`.
    pub folder: String,
    /// Agents' finished files.
    pub sources: Vec<String>,
    /// Complete compacted files, committed or not.
    pub outputs: Vec<String>,
    /// Commit markers.
    pub markers: Vec<String>,
    /// Other Parquet files (not hidden): read as they are, never compacted.
    pub others: Vec<String>,
    /// Everything else (hidden files, unfinished uploads, other names): never read.
    pub rest: Vec<String>,
}

/// What a reader reads of one hour folder.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Visible {
    /// Keys to read: committed outputs (from their markers), agents' files no committed marker
    /// replaced, other Parquet files.
    pub read: Vec<String>,
    /// Agents' files still present whose rows a committed marker's outputs hold.
    pub replaced: usize,
    /// Compacted files no committed marker names (a run in progress, or one that was killed).
    pub uncommitted: usize,
}

/// The name part of a key.
pub fn name_of(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

impl HourFolder {
    /// Sorts the keys of `folder` (all directly inside it) by role.
    pub fn classify(folder: &str, keys: impl IntoIterator<Item = String>) -> HourFolder {
        let mut hour = HourFolder {
            folder: folder.trim_end_matches('/').to_string(),
            ..HourFolder::default()
        };
        for key in keys {
            let name = name_of(&key);
            let list = if is_source(name) {
                &mut hour.sources
            } else if is_output(name) {
                &mut hour.outputs
            } else if is_marker(name) {
                &mut hour.markers
            } else if !name.starts_with('.') && name.ends_with(".parquet") {
                &mut hour.others
            } else {
                &mut hour.rest
            };
            list.push(key);
        }
        hour
    }

    /// The key of `name` in this folder.
    pub fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.folder)
    }

    /// What a reader reads, given the markers that could be read (`committed`).
    pub fn visible<'a>(&self, committed: impl IntoIterator<Item = &'a Marker>) -> Visible {
        let mut outputs: Vec<String> = Vec::new();
        let mut replaced: HashSet<&str> = HashSet::new();
        for marker in committed {
            outputs.extend(marker.outputs.iter().map(|o| self.key(&o.name)));
            replaced.extend(marker.sources.iter().map(String::as_str));
        }
        let named: HashSet<&str> = outputs.iter().map(|k| name_of(k)).collect();
        let mut visible = Visible {
            uncommitted: self
                .outputs
                .iter()
                .filter(|k| !named.contains(name_of(k)))
                .count(),
            ..Visible::default()
        };
        for source in &self.sources {
            if replaced.contains(name_of(source)) {
                visible.replaced += 1;
            } else {
                visible.read.push(source.clone());
            }
        }
        visible.read.extend(self.others.iter().cloned());
        visible.read.extend(outputs);
        visible.read.sort();
        visible.read.dedup();
        visible
    }
}

/// Each marker of `hour` parsed from what `fetch` returns for its key; those that cannot be
/// fetched or parsed come back as errors (they count as not committed).
pub fn load_markers<E: std::fmt::Display>(
    hour: &HourFolder,
    mut fetch: impl FnMut(&str) -> Result<bytes::Bytes, E>,
) -> (Vec<Marker>, Vec<DamagedMarker>) {
    let mut markers = Vec::new();
    let mut damaged = Vec::new();
    for key in &hour.markers {
        let parsed = fetch(key)
            .map_err(|e| DamagedMarker {
                key: key.clone(),
                reason: format!("cannot be read: {e}"),
            })
            .and_then(|text| Marker::parse(key, &text));
        match parsed {
            Ok(marker) => markers.push(marker),
            Err(err) => damaged.push(err),
        }
    }
    (markers, damaged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::marker::{Output, FORMAT};

    const FOLDER: &str = "cuda/dt=2026-11-22/hour=03";

    fn hour(names: &[&str]) -> HourFolder {
        HourFolder::classify(FOLDER, names.iter().map(|n| format!("{FOLDER}/{n}")))
    }

    fn marker(outputs: &[&str], sources: &[&str]) -> Marker {
        Marker {
            format: FORMAT,
            run: "r".into(),
            committed_at: chrono::Utc::now(),
            rows: outputs.len() as u64,
            outputs: outputs
                .iter()
                .map(|n| Output {
                    name: n.to_string(),
                    size: 1,
                    rows: 1,
                })
                .collect(),
            sources: sources.iter().map(|s| s.to_string()).collect(),
            rollups: Vec::new(),
        }
    }

    fn names(visible: &Visible) -> Vec<&str> {
        visible.read.iter().map(|k| name_of(k)).collect()
    }

    #[test]
    fn every_phase_of_a_compaction_shows_each_file_once() {
        let before = hour(&[
            "part-a.parquet",
            "part-b.parquet",
            ".part-c.parquet.inprogress",
        ]);
        assert_eq!(
            names(&before.visible([])),
            ["part-a.parquet", "part-b.parquet"]
        );
        assert_eq!(before.rest.len(), 1);

        // Written, not committed (or killed before the marker): sources only.
        let writing = hour(&[
            "compact-r-0000.parquet",
            "compact-r-0001.parquet#1",
            "part-a.parquet",
            "part-b.parquet",
        ]);
        let v = writing.visible([]);
        assert_eq!(names(&v), ["part-a.parquet", "part-b.parquet"]);
        assert_eq!(v.uncommitted, 1);

        // Committed: the output (even if the listing missed it) and a late file.
        let m = marker(
            &["compact-r-0000.parquet"],
            &["part-a.parquet", "part-b.parquet"],
        );
        let committed = hour(&[
            "_compaction-r.json",
            "part-a.parquet",
            "part-b.parquet",
            "part-late.parquet",
            "other.parquet",
        ]);
        let v = committed.visible([&m]);
        assert_eq!(
            names(&v),
            [
                "compact-r-0000.parquet",
                "other.parquet",
                "part-late.parquet"
            ]
        );
        assert_eq!((v.replaced, v.uncommitted), (2, 0));

        // Half retired, then retired.
        let half = hour(&[
            "_compaction-r.json",
            "compact-r-0000.parquet",
            "part-b.parquet",
        ]);
        assert_eq!(names(&half.visible([&m])), ["compact-r-0000.parquet"]);
        let done = hour(&["_compaction-r.json", "compact-r-0000.parquet"]);
        assert_eq!(names(&done.visible([&m])), ["compact-r-0000.parquet"]);
    }

    #[test]
    fn unreadable_markers_are_reported_and_count_as_not_committed() {
        let h = hour(&[
            "_compaction-a.json",
            "_compaction-b.json",
            "compact-a-0000.parquet",
            "part-x.parquet",
        ]);
        assert_eq!(h.markers.len(), 2);
        let good = marker(&["compact-a-0000.parquet"], &["part-x.parquet"]);
        let (markers, damaged) = load_markers(&h, |key| {
            if key.ends_with("_compaction-a.json") {
                Ok(bytes::Bytes::from(good.to_json()))
            } else {
                Err("permission denied")
            }
        });
        assert_eq!(markers, [good]);
        assert_eq!(damaged.len(), 1);
        assert_eq!(
            damaged[0].to_string(),
            format!("compaction marker {FOLDER}/_compaction-b.json is damaged: cannot be read: permission denied")
        );
    }
}
