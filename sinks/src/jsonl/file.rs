//! The `jsonl` sink's file: appended to, rotated by size, and holding whole lines only.
//!
//! A line is in the file whole or not at all. A write that fails (a full disk takes what fits)
//! is cut back to the last whole line before the error goes back to the sink, which hands the
//! batch back for a retry of the whole batch; a file that does not end in a newline when it is
//! opened (a crash mid-write) loses that incomplete last line. So every line parses, and no
//! line is written twice by a retry.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;

use super::JsonlSinkConfig;

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
pub(super) struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    max_files: u32,
    fsync: bool,
    file: Option<(File, u64)>,
}

impl RotatingFile {
    pub(super) fn new(path: PathBuf, config: &JsonlSinkConfig) -> Self {
        Self {
            path,
            max_bytes: config.max_file_bytes,
            max_files: config.max_files,
            fsync: config.fsync,
            file: None,
        }
    }

    /// Appends `lines` (whole lines), rotating first when they would not fit.
    pub(super) fn append(&mut self, lines: &[u8]) -> io::Result<()> {
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
    use crate::jsonl::encode_lines;
    use crate::test_support::cuda_batch;

    fn parsed_lines(path: &std::path::Path) -> usize {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.is_empty() || text.ends_with('\n'), "ends mid-line");
        let lines: Vec<&str> = text.lines().collect();
        for line in &lines {
            serde_json::from_str::<serde_json::Value>(line).expect("every line is JSON");
        }
        lines.len()
    }

    #[test]
    fn an_incomplete_last_line_from_a_crash_is_removed_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let config = JsonlSinkConfig::default();
        let (mut two, mut three) = (Vec::new(), Vec::new());
        encode_lines(&cuda_batch(2, 1), &mut two).unwrap();
        encode_lines(&cuda_batch(3, 2), &mut three).unwrap();
        let mut earlier = two.clone();
        earlier.extend_from_slice(b"{\"kin");
        std::fs::write(&path, &earlier).unwrap();
        RotatingFile::new(path.clone(), &config)
            .append(&three)
            .unwrap();
        assert_eq!(parsed_lines(&path), 2 + 3);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            (two.len() + three.len()) as u64
        );

        // A file that is one incomplete line (no newline at all) is emptied.
        std::fs::write(&path, b"{\"kind\":\"cu").unwrap();
        let mut file = RotatingFile::new(path.clone(), &config);
        file.append(&two).unwrap();
        assert_eq!(parsed_lines(&path), 2);
        // Longer than one read-back chunk, ending mid-line.
        let mut long = Vec::new();
        while long.len() < 10_000 {
            long.extend_from_slice(&three);
        }
        let whole = long.len();
        long.extend_from_slice(&[b'x'; 5000]);
        std::fs::write(&path, &long).unwrap();
        RotatingFile::new(path.clone(), &config)
            .append(&two)
            .unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            (whole + two.len()) as u64
        );
    }
}
