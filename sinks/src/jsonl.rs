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

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokio::runtime::Handle;

use crate::encode::json::JsonRows;
use crate::limits::out_of_range;
use crate::sink::{run_blocking, Sink, SinkInput, SinkRun};
use crate::EventBatch;

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

/// The length of `file` up to and including its last newline (0 when it has none).
fn whole_lines_len(file: &File, len: u64) -> io::Result<u64> {
    let mut end = len;
    let mut chunk = [0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let part = &mut chunk[..(end - start) as usize];
        file.read_exact_at(part, start)?;
        if let Some(at) = part.iter().rposition(|&b| b == b'\n') {
            return Ok(start + at as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// An append-only file rotated by size: `name` -> `name.1` -> ... -> `name.<max_files>`.
struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    max_files: u32,
    fsync: bool,
    file: Option<(File, u64)>,
}

impl RotatingFile {
    fn new(path: PathBuf, config: &JsonlSinkConfig) -> Self {
        Self {
            path,
            max_bytes: config.max_file_bytes,
            max_files: config.max_files,
            fsync: config.fsync,
            file: None,
        }
    }

    fn append(&mut self, lines: &[u8]) -> io::Result<()> {
        if let Some((_, size)) = &self.file {
            if *size > 0 && size + lines.len() as u64 > self.max_bytes {
                self.rotate()?;
            }
        }
        if self.file.is_none() {
            let (file, size) = self.open()?;
            self.file = Some((file, size));
            if size > 0 && size + lines.len() as u64 > self.max_bytes {
                self.rotate()?;
                return self.append(lines);
            }
        }
        let fsync = self.fsync;
        let (file, size) = self.file.as_mut().expect("opened above");
        let written = file
            .write_all(lines)
            .and_then(|()| if fsync { file.sync_data() } else { Ok(()) });
        if let Err(err) = written {
            // Part of the batch may be in the file (a full disk takes what fits). Cut it back
            // to the last whole line: the batch is retried whole, so it is in the file whole
            // or not at all, and no line is glued to a fragment.
            if file.set_len(*size).is_err() {
                // Reopening trims the fragment.
                self.file = None;
            }
            return Err(err);
        }
        *size += lines.len() as u64;
        Ok(())
    }

    /// Opens the file for appending; a last line without its newline (a write cut short by a
    /// crash or a full disk in an earlier run) is removed, so the next line starts on its own.
    fn open(&self) -> io::Result<(File, u64)> {
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o640)
            .open(&self.path)?;
        let len = file.metadata()?.len();
        let whole = whole_lines_len(&file, len)?;
        if whole < len {
            file.set_len(whole)?;
            tracing::warn!(
                path = %self.path.display(),
                bytes = len - whole,
                "removed an incomplete last line left by an interrupted write"
            );
        }
        Ok((file, whole))
    }

    fn rotated(&self, n: u32) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        if self.max_files == 0 {
            return std::fs::remove_file(&self.path);
        }
        let _ = std::fs::remove_file(self.rotated(self.max_files));
        for n in (1..self.max_files).rev() {
            let from = self.rotated(n);
            if from.exists() {
                std::fs::rename(&from, self.rotated(n + 1))?;
            }
        }
        std::fs::rename(&self.path, self.rotated(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{queue, BufferConfig};
    use crate::sink::SinkStats;
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

    /// A small tmpfs, unmounted when dropped (tests run as root; elsewhere `None`).
    struct SmallDisk(tempfile::TempDir);

    impl SmallDisk {
        fn mount(size: &str) -> Option<SmallDisk> {
            let dir = tempfile::tempdir().unwrap();
            let status = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(dir.path())
                .status()
                .ok()?;
            status.success().then_some(SmallDisk(dir))
        }
    }

    impl Drop for SmallDisk {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg(self.0.path())
                .status();
        }
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
        let Some(disk) = SmallDisk::mount("64k") else {
            eprintln!("no tmpfs (not root?): skipped");
            return;
        };
        let path = disk.0.path().join("events.jsonl");
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
    fn an_incomplete_last_line_from_a_crash_is_removed_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut earlier = Vec::new();
        encode_lines(&cuda_batch(2, 1), &mut earlier).unwrap();
        earlier.extend_from_slice(b"{\"kin");
        std::fs::write(&path, &earlier).unwrap();
        let config = JsonlSinkConfig {
            path: Some(path.clone()),
            ..Default::default()
        };
        let stats = run(config, vec![cuda_batch(3, 2)]);
        assert_eq!(stats.delivered.get(EventKind::Cuda), 3);
        assert_eq!(parsed_lines(&path), 2 + 3);

        // A file that is one incomplete line (no newline at all) is emptied.
        std::fs::write(&path, b"{\"kind\":\"cu").unwrap();
        let config = JsonlSinkConfig {
            path: Some(path.clone()),
            ..Default::default()
        };
        run(config, vec![cuda_batch(1, 3)]);
        assert_eq!(parsed_lines(&path), 1);
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
