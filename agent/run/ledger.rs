//! The accounting ledger kept beside the data: each run writes one JSON document per Parquet
//! sink, `<path>/_accounting/accounting-<host>-<run start>.json` (on local disk or in the
//! sink's object store), holding the run's window (start, last update) and its cumulative
//! accounting. It is rewritten every period and once more at shutdown through the sink's own
//! destination, so each version appears whole (rename on disk, one PUT in a bucket) and a crash
//! loses at most one period of counters. `gpuship report` sums these documents
//! (`lake::accounting`); documents of different runs cover disjoint windows, so the sum is exact.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use gpuship_sinks::parquet::Destination;
use serde::Serialize;
use tokio::runtime::Handle;

use crate::accounting::{Accounting, Snapshot};
use crate::config::{SinkConfig, SinkEntry};

/// Where and under which name one run's accounting documents go.
#[derive(Clone)]
pub struct Ledger {
    destinations: Vec<Arc<dyn Destination>>,
    key: String,
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
    /// A ledger for every Parquet sink of `sinks`; `None` when there is none. Object-store
    /// documents are uploaded through `handle`.
    pub fn for_sinks(
        sinks: &[SinkEntry],
        host: &str,
        start: DateTime<Utc>,
        handle: &Handle,
    ) -> Option<Ledger> {
        let key = format!(
            "_accounting/accounting-{}-{}.json",
            sanitize(host),
            start.format("%Y%m%dT%H%M%S%.6fZ")
        );
        let destinations: Vec<Arc<dyn Destination>> = sinks
            .iter()
            .filter_map(|entry| match &entry.sink {
                SinkConfig::Parquet(parquet) => match parquet.destination(handle) {
                    Ok(destination) => Some(Arc::from(destination)),
                    Err(unavailable) => {
                        tracing::warn!(destination = %unavailable.destination, err = %unavailable.reason, "no accounting document for this sink");
                        None
                    }
                },
                _ => None,
            })
            .collect();
        (!destinations.is_empty()).then(|| Ledger {
            destinations,
            key,
            start,
            host: host.to_string(),
        })
    }

    /// Where the documents go (`/lake/_accounting/...`, `s3://bucket/prefix/_accounting/...`).
    pub fn locations(&self) -> Vec<String> {
        self.destinations
            .iter()
            .map(|d| format!("{}/{}", d.describe().trim_end_matches('/'), self.key))
            .collect()
    }

    /// The final write at shutdown: like [`write`](Self::write), but waits at most `limit`
    /// (an unreachable object store retries for a minute or more, longer than a service
    /// manager waits for a stop). Returns whether it finished; if not, the document written one
    /// period earlier stands and the write goes on in the background until the process exits.
    pub fn write_within(&self, snapshot: &Snapshot, limit: Duration) -> bool {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let (ledger, owned) = (self.clone(), snapshot.clone());
        let spawned = std::thread::Builder::new()
            .name("gpuship-ledger".into())
            .spawn(move || {
                ledger.write(&owned);
                let _ = done_tx.send(());
            });
        if spawned.is_err() {
            self.write(snapshot);
            return true;
        }
        let finished = done_rx.recv_timeout(limit).is_ok();
        if !finished {
            tracing::warn!(
                limit_s = limit.as_secs(),
                documents = ?self.locations(),
                "final accounting document not written in time; the previous one stands"
            );
        }
        finished
    }

    /// Writes `snapshot` as the run's document, window ending now, to every destination; a
    /// failure is logged and the next write tries again. Blocks (call off async workers).
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
            Ok(json) => bytes::Bytes::from(json),
            Err(err) => {
                tracing::error!(%err, "cannot encode the accounting document");
                return;
            }
        };
        for destination in &self.destinations {
            if let Err(err) = destination.persist(&self.key, &json) {
                tracing::warn!(destination = %destination.describe(), %err, "accounting document not written");
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
    use std::path::{Path, PathBuf};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn sinks(toml: &str) -> Vec<SinkEntry> {
        Config::from_toml(toml, Path::new("test.toml"))
            .expect("config")
            .sinks
    }

    #[test]
    fn one_document_per_parquet_sink_named_after_host_and_start() {
        let start = DateTime::parse_from_rfc3339("2026-11-23T10:00:00.5Z")
            .unwrap()
            .with_timezone(&Utc);
        let sinks = sinks(
            "[[sinks]]\ntype = \"parquet\"\npath = \"/lake\"\n\
             [[sinks]]\ntype = \"parquet\"\npath = \"s3://gpu-lake/p\"\n\
             [[sinks]]\ntype = \"blackhole\"\n",
        );
        let runtime = runtime();
        let handle = runtime.handle();
        let ledger = Ledger::for_sinks(&sinks, "node/7", start, handle).expect("ledger");
        assert_eq!(
            ledger.locations(),
            [
                "/lake/_accounting/accounting-node_7-20261123T100000.500000Z.json",
                "s3://gpu-lake/p/_accounting/accounting-node_7-20261123T100000.500000Z.json"
            ]
        );
        assert!(Ledger::for_sinks(&sinks[2..], "n", start, handle).is_none());
    }

    /// A destination that takes `delay` per document.
    struct Slow(Duration);

    impl Destination for Slow {
        fn persist(
            &self,
            key: &str,
            _bytes: &bytes::Bytes,
        ) -> Result<String, gpuship_sinks::parquet::FileError> {
            std::thread::sleep(self.0);
            Ok(key.to_string())
        }

        fn describe(&self) -> String {
            "slow://".into()
        }
    }

    fn ledger_to(destination: Slow) -> Ledger {
        Ledger {
            destinations: vec![Arc::new(destination)],
            key: "_accounting/a.json".into(),
            start: Utc::now(),
            host: "n".into(),
        }
    }

    #[test]
    fn the_final_write_waits_only_so_long() {
        let snapshot = Accounting::default().snapshot();
        assert!(ledger_to(Slow(Duration::ZERO)).write_within(&snapshot, Duration::from_secs(5)));
        // Returning false means it stopped waiting before the 30 s write finished.
        let stuck = ledger_to(Slow(Duration::from_secs(30)));
        assert!(!stuck.write_within(&snapshot, Duration::from_millis(100)));
    }

    #[test]
    fn the_document_is_what_the_lake_reader_sums() {
        let dir = tempfile::tempdir().unwrap();
        let toml = format!(
            "[[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
            dir.path().display()
        );
        let start = Utc::now();
        let runtime = runtime();
        let ledger =
            Ledger::for_sinks(&sinks(&toml), "n1", start, runtime.handle()).expect("ledger");
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
        let text = std::fs::read(PathBuf::from(&ledger.locations()[0])).unwrap();
        let document: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(document["host"], "n1");
        assert!(document["accounting"]["sinks"].is_array());
        let window_start =
            DateTime::parse_from_rfc3339(document["window"]["start"].as_str().unwrap()).unwrap();
        assert_eq!(window_start.timestamp_micros(), start.timestamp_micros());
    }
}
