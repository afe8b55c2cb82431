//! The `jsonl` sink: one JSON object per event per line, on stdout or in a file rotated by size,
//! for people who read events with `jq` (`gpuship run | jq 'select(.kind == "xid")'`).
//!
//! Objects use the Parquet column names plus a leading `"kind"`. A batch counts as delivered
//! once its lines are written and flushed (and fsynced, with `fsync = true`). A write that fails
//! hands the batch back to the queue, which retries it and spools what does not fit.
//!
//! A line is in the file whole or not at all: a failed write (a full disk) is cut back to the
//! last whole line before the batch is handed back, and a file that does not end in a newline
//! when it is opened (a crash mid-write) loses that incomplete last line. So every line parses
//! and the file holds exactly the rows counted as delivered (plus what earlier runs wrote).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokio::runtime::Handle;

use crate::encode::json::JsonRows;
use crate::limits::out_of_range;
use crate::sink::{run_blocking, Sink, SinkInput, SinkRun};
use crate::EventBatch;

mod file;
mod sink_type;

use file::RotatingFile;

/// `[[sinks]] type = "jsonl"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlSinkConfig {
    /// File to append to; absent or `"-"` means standard output.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// The file is rotated (`name.1`, `name.2`, ...) once it would grow past this size.
    #[serde(default = "defaults::max_file_bytes")]
    pub max_file_bytes: u64,
    /// Rotated files kept; older ones are deleted.
    #[serde(default = "defaults::max_files")]
    pub max_files: u32,
    /// fsync the file after each batch.
    #[serde(default)]
    pub fsync: bool,
}

mod defaults {
    pub fn max_file_bytes() -> u64 {
        100 * 1024 * 1024
    }
    pub fn max_files() -> u32 {
        5
    }
}

impl Default for JsonlSinkConfig {
    fn default() -> Self {
        Self {
            path: None,
            max_file_bytes: defaults::max_file_bytes(),
            max_files: defaults::max_files(),
            fsync: false,
        }
    }
}

impl JsonlSinkConfig {
    /// The file, or None for standard output.
    pub fn file(&self) -> Option<&Path> {
        self.path.as_deref().filter(|p| *p != Path::new("-"))
    }

    /// Every problem with the values, as `(key, message)` pairs; empty when valid.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if let Some(message) = out_of_range(self.max_file_bytes, 1..=1 << 40) {
            problems.push(("max_file_bytes", message));
        }
        if let Some(message) = out_of_range(self.max_files, 0..=10_000) {
            problems.push(("max_files", message));
        }
        if self.path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            problems.push((
                "path",
                "must not be empty (leave it out for stdout)".to_string(),
            ));
        }
        problems
    }
}

/// The running JSON lines sink.
pub struct JsonlSink {
    name: String,
    config: JsonlSinkConfig,
}

impl JsonlSink {
    /// Builds the sink.
    pub fn new(name: impl Into<String>, config: JsonlSinkConfig) -> Self {
        Self {
            name: name.into(),
            config,
        }
    }
}

impl Sink for JsonlSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(self: Box<Self>, input: SinkInput) -> SinkRun {
        Box::pin(async move {
            let name = self.name.clone();
            run_blocking(name, move |handle| self.run_blocking(handle, input)).await
        })
    }
}

/// Where lines go.
enum Output {
    Stdout,
    File(RotatingFile),
}

impl JsonlSink {
    fn run_blocking(self, handle: Handle, mut input: SinkInput) {
        let mut output = match self.config.file() {
            None => Output::Stdout,
            Some(path) => Output::File(RotatingFile::new(path.to_path_buf(), &self.config)),
        };
        let mut lines = Vec::with_capacity(1 << 20);
        while let Some(batch) = handle.block_on(input.batches.recv()) {
            lines.clear();
            if let Err(err) = encode_lines(&batch, &mut lines) {
                input.stats.failed.add(batch.kind, batch.len() as u64);
                tracing::error!(sink = %self.name, %err, "cannot encode batch as JSON; rows lost");
                continue;
            }
            let written = match &mut output {
                Output::Stdout => {
                    let mut stdout = io::stdout().lock();
                    stdout.write_all(&lines).and_then(|()| stdout.flush())
                }
                Output::File(file) => file.append(&lines),
            };
            match written {
                Ok(()) => {
                    input.stats.delivered.add(batch.kind, batch.len() as u64);
                    input.batches.delivered();
                }
                Err(err) => {
                    input.stats.count_error("write", batch.len() as u64);
                    tracing::error!(sink = %self.name, %err, rows = batch.len(), "cannot write JSON lines; rows will be retried");
                    input.batches.reject(batch);
                }
            }
        }
        tracing::info!(sink = %self.name, "jsonl sink finished");
    }
}

/// The lines of one batch, each ending in `\n`.
pub fn encode_lines(batch: &EventBatch, out: &mut Vec<u8>) -> Result<(), arrow_schema::ArrowError> {
    let mut rows = JsonRows::new(&batch.records, Some(batch.kind))?;
    for row in 0..rows.len() {
        rows.write_row(row, out);
        out.push(b'\n');
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{queue, BufferConfig};
    use crate::stats::SinkStats;
    use crate::test_support::{cuda_batch, xid_batch};
    use crate::EventKind;
    use std::sync::Arc;

    fn run(config: JsonlSinkConfig, batches: Vec<EventBatch>) -> Arc<SinkStats> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let stats = Arc::new(SinkStats::default());
        let (sender, receiver) = queue(BufferConfig::default(), stats.clone());
        for batch in batches {
            sender.send_blocking(batch);
        }
        drop(sender);
        runtime
            .block_on(Box::new(JsonlSink::new("jsonl", config)).run(SinkInput {
                batches: receiver,
                stats: stats.clone(),
            }))
            .unwrap();
        stats
    }

    fn read_lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    #[test]
    fn each_event_is_one_line_with_its_kind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let config = JsonlSinkConfig {
            path: Some(path.clone()),
            ..Default::default()
        };
        let stats = run(config, vec![xid_batch(), cuda_batch(3, 700)]);
        assert_eq!(stats.delivered.get(EventKind::Xid), 1);
        assert_eq!(stats.delivered.get(EventKind::Cuda), 3);
        let lines = read_lines(&path);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["kind"], "xid");
        assert_eq!(lines[0]["code"], 79);
        for (i, line) in lines[1..].iter().enumerate() {
            assert_eq!(line["kind"], "cuda");
            assert_eq!(line["result"], 700);
            assert_eq!(line["bytes"], i as u64);
        }
    }

    #[test]
    fn files_rotate_by_size_and_keep_max_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut one_batch = Vec::new();
        encode_lines(&cuda_batch(10, 0), &mut one_batch).unwrap();
        let config = JsonlSinkConfig {
            path: Some(path.clone()),
            // Room for two batches per file.
            max_file_bytes: 2 * one_batch.len() as u64,
            max_files: 2,
            fsync: true,
        };
        let stats = run(config, (0..7).map(|_| cuda_batch(10, 0)).collect());
        assert_eq!(stats.delivered.get(EventKind::Cuda), 70);
        // 7 batches = files of 2, 2, 2, 1 batches; the oldest file was deleted.
        assert_eq!(read_lines(&path).len(), 10);
        assert_eq!(read_lines(&dir.path().join("events.jsonl.1")).len(), 20);
        assert_eq!(read_lines(&dir.path().join("events.jsonl.2")).len(), 20);
        assert!(!dir.path().join("events.jsonl.3").exists());
        let mode = std::fs::metadata(&path).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o640
        );
    }

    fn parsed_lines(path: &Path) -> usize {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.is_empty() || text.ends_with('\n'), "ends mid-line");
        text.lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("invalid line {line:?}: {e}"));
                assert_eq!(value["kind"], "cuda");
            })
            .count()
    }

    #[test]
    fn on_a_full_disk_every_line_is_whole_and_counted() {
        let Some(disk) = crate::small_disk::SmallDisk::mount("64k") else {
            eprintln!("no tmpfs (not root?): skipped");
            return;
        };
        let path = disk.path().join("events.jsonl");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let stats = Arc::new(SinkStats::default());
        let options = crate::QueueOptions {
            name: "jsonl".into(),
            buffer: BufferConfig::default(),
            spool: None,
            // Batches still failing then are dropped (shutdown_timeout): the run ends.
            shutdown_timeout: std::time::Duration::from_millis(300),
        };
        let (sender, receiver) = crate::queue_with(options, stats.clone());
        // About 130 KiB of lines for a 64 KiB disk, in batches of 7 rows.
        for tag in 0..50 {
            sender.send_blocking(cuda_batch(7, tag));
        }
        drop(sender);
        let config = JsonlSinkConfig {
            path: Some(path.clone()),
            ..Default::default()
        };
        runtime
            .block_on(Box::new(JsonlSink::new("jsonl", config)).run(SinkInput {
                batches: receiver,
                stats: stats.clone(),
            }))
            .unwrap();
        let delivered = stats.delivered.get(EventKind::Cuda);
        assert!(delivered > 0 && delivered < 350, "{delivered}");
        assert_eq!(parsed_lines(&path), delivered as usize);
        assert_eq!(
            delivered + stats.dropped(crate::DropReason::ShutdownTimeout, EventKind::Cuda),
            350
        );
        assert!(stats.errors()["write"] > 0);

        // The next run appends after the last whole line, and the file still matches.
        let stats = run(
            JsonlSinkConfig {
                path: Some(path.clone()),
                ..Default::default()
            },
            vec![],
        );
        assert_eq!(stats.delivered.get(EventKind::Cuda), 0);
        assert_eq!(parsed_lines(&path), delivered as usize);
    }

    #[test]
    fn dash_means_stdout() {
        let config: JsonlSinkConfig = toml::from_str("path = \"-\"").unwrap();
        assert_eq!(config.file(), None);
        assert_eq!(JsonlSinkConfig::default().file(), None);
        let bad = JsonlSinkConfig {
            max_file_bytes: 0,
            ..Default::default()
        };
        assert_eq!(bad.problems()[0].0, "max_file_bytes");
    }
}
