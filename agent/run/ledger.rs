//! The accounting ledger kept beside the data: each run writes one JSON document per local
//! Parquet sink, `<path>/_accounting/accounting-<host>-<run start>.json`, holding the run's
//! window (start, last update) and its cumulative accounting. It is rewritten (atomically:
//! temporary file, then rename) every period and once more at shutdown, so a crash loses at
//! most one period of counters. `gpuship report` sums these documents (`lake::accounting`);
//! documents of different runs cover disjoint windows, so the sum is exact.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::accounting::{Accounting, Snapshot};
use crate::config::{SinkConfig, SinkEntry};

/// Where and under which name one run's accounting documents go.
#[derive(Debug, Clone)]
pub struct Ledger {
    files: Vec<PathBuf>,
    start: DateTime<Utc>,
    host: String,
}

#[derive(Serialize)]
struct Window {
    start: String,
    end: String,
}

#[derive(Serialize)]
struct Document<'a> {
    host: &'a str,
    window: Window,
    accounting: &'a Snapshot,
}

impl Ledger {
    /// A ledger for every local Parquet sink of `sinks`; `None` when there is none. Object-store
    /// sinks keep no ledger yet.
    pub fn for_sinks(sinks: &[SinkEntry], host: &str, start: DateTime<Utc>) -> Option<Ledger> {
        let name = format!(
            "accounting-{}-{}.json",
            sanitize(host),
            start.format("%Y%m%dT%H%M%S%.6fZ")
        );
        let files: Vec<PathBuf> = sinks
            .iter()
            .filter_map(|entry| match &entry.sink {
                SinkConfig::Parquet(parquet) if parquet.s3_url().is_none() => {
                    Some(parquet.path.join("_accounting").join(&name))
                }
                _ => None,
            })
            .collect();
        (!files.is_empty()).then(|| Ledger {
            files,
            start,
            host: host.to_string(),
        })
    }

    /// The documents this ledger writes.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Writes `snapshot` as the run's document, window ending now, into every file; a failure
    /// is logged and the next write tries again.
    pub fn write(&self, snapshot: &Snapshot) {
        let document = Document {
            host: &self.host,
            window: Window {
                start: self.start.to_rfc3339_opts(SecondsFormat::Micros, true),
                end: Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true),
            },
            accounting: snapshot,
        };
        let json = match serde_json::to_vec_pretty(&document) {
            Ok(json) => json,
            Err(err) => {
                tracing::error!(%err, "cannot encode the accounting document");
                return;
            }
        };
        for file in &self.files {
            if let Err(err) = write_atomically(file, &json) {
                tracing::warn!(file = %file.display(), err = format!("{err:#}"), "accounting document not written");
            }
        }
    }

    /// Rewrites the documents every `period` until the runtime stops.
    pub async fn keep_written(self, accounting: Arc<Accounting>, period: Duration) {
        let mut ticker = tokio::time::interval(period);
        loop {
            ticker.tick().await;
            let ledger = self.clone();
            let snapshot = accounting.snapshot();
            // File I/O off the async workers.
            let _ = tokio::task::spawn_blocking(move || ledger.write(&snapshot)).await;
        }
    }
}

fn write_atomically(file: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = file.parent().context("document path has no folder")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = file
        .file_name()
        .context("document path has no name")?
        .to_string_lossy();
    let temporary = dir.join(format!(".{name}.tmp"));
    std::fs::write(&temporary, bytes)
        .with_context(|| format!("writing {}", temporary.display()))?;
    std::fs::rename(&temporary, file)
        .with_context(|| format!("renaming {} into place", temporary.display()))?;
    Ok(())
}

/// A host name as a file-name part: anything but letters, digits, `-` and `.` becomes `_`.
fn sanitize(host: &str) -> String {
    host.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn sinks(toml: &str) -> Vec<SinkEntry> {
        Config::from_toml(toml, Path::new("test.toml"))
            .expect("config")
            .sinks
    }

    #[test]
    fn one_document_per_local_parquet_sink_named_after_host_and_start() {
        let start = DateTime::parse_from_rfc3339("2026-11-23T10:00:00.5Z")
            .unwrap()
            .with_timezone(&Utc);
        let sinks = sinks(
            "[[sinks]]\ntype = \"parquet\"\npath = \"/lake\"\n\
             [[sinks]]\ntype = \"parquet\"\npath = \"s3://gpu-lake/p\"\n\
             [[sinks]]\ntype = \"blackhole\"\n",
        );
        let ledger = Ledger::for_sinks(&sinks, "node/7", start).expect("ledger");
        assert_eq!(
            ledger.files(),
            [PathBuf::from(
                "/lake/_accounting/accounting-node_7-20261123T100000.500000Z.json"
            )]
        );
        assert!(Ledger::for_sinks(&sinks[2..], "n", start).is_none());
    }

    #[test]
    fn the_document_is_what_the_lake_reader_sums() {
        let dir = tempfile::tempdir().unwrap();
        let toml = format!(
            "[[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
            dir.path().display()
        );
        let start = Utc::now();
        let ledger = Ledger::for_sinks(&sinks(&toml), "n1", start).expect("ledger");
        let accounting = Accounting::default();
        ledger.write(&accounting.snapshot());
        ledger.write(&accounting.snapshot());
        let written = std::fs::read_dir(dir.path().join("_accounting"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect::<Vec<_>>();
        assert_eq!(
            written.len(),
            1,
            "rewritten in place, no temporary left: {written:?}"
        );
        let text = std::fs::read(&ledger.files()[0]).unwrap();
        let document: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(document["host"], "n1");
        assert!(document["accounting"]["sinks"].is_array());
        let window_start =
            DateTime::parse_from_rfc3339(document["window"]["start"].as_str().unwrap()).unwrap();
        assert_eq!(window_start.timestamp_micros(), start.timestamp_micros());
    }
}
