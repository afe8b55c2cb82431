//! A sink's disk spool: batches it could not take, kept in order on disk until it can, across
//! agent restarts.
//!
//! One segment file per batch, named by a sequence number so that order survives restarts:
//! `<dir>/<seq:016x>.seg`; the file format (header and Arrow IPC payload) is in [`segment`],
//! this module keeps the index of segments and their counts. A segment is written
//! under a temporary name, fsynced (per `fsync`), and renamed, so a crash leaves either a whole
//! segment or none. A segment that fails its checks is reported, renamed to `.corrupt` and
//! skipped; it never stops the spool. Folders are 0700 and segments 0600, created through
//! [`secure_fs`] (no symlink followed).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use enum_map::EnumMap;

use crate::secure_fs;
use crate::{EventBatch, EventKind};

mod config;
mod error;
mod segment;
mod write;

pub use config::{FsyncPolicy, SpoolConfig, WRITE_BUFFER_RANGE};
pub use error::SpoolError;
use segment::{claimed, read_header, read_segment};
pub use write::{SegmentWrite, WrittenSegment};

#[derive(Debug, Clone)]
struct Segment {
    seq: u64,
    path: PathBuf,
    bytes: u64,
    kind: EventKind,
    events: u64,
}

/// The segments of one sink, oldest first.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    config: SpoolConfig,
    segments: std::collections::VecDeque<Segment>,
    next_seq: u64,
    bytes: u64,
    /// Events in the segments, by kind (kept as segments come and go: read on every publish).
    pending: EnumMap<EventKind, u64>,
    /// Segments found corrupt by `open` (quarantined): kind and events where the header said.
    corrupt_at_open: Vec<(Option<EventKind>, Option<u64>)>,
}

/// The oldest segment of a spool as it was when [`Spool::front`] was called: reading it needs
/// no lock, since a segment's file never changes once indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontSegment {
    seq: u64,
    path: PathBuf,
}

impl FrontSegment {
    /// Reads and checks the segment (the disk and Arrow decoding: call it without the
    /// queue's lock, so capture never waits for a replay's read).
    pub fn read(&self) -> Result<EventBatch, SpoolError> {
        read_segment(&self.path)
    }
}

/// A segment that failed its checks: what its header said it held, when it could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorruptSegment {
    /// The kind, when the header was readable.
    pub kind: Option<EventKind>,
    /// Events the header claimed; None when the header is unreadable (empty file, garbage,
    /// not a regular file), so the number lost cannot be known.
    pub events: Option<u64>,
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Spool {
    /// Opens (creating) the spool at `dir` and indexes the segments a previous run left.
    pub fn open(dir: &Path, config: SpoolConfig) -> Result<Spool, SpoolError> {
        secure_fs::ensure_private_dir(dir).map_err(|e| private(dir, e))?;
        let mut segments = Vec::new();
        let mut corrupt_at_open = Vec::new();
        for entry in fs::read_dir(dir).map_err(io_err(dir))?.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                // A write cut short by a crash: never acknowledged as spooled.
                let _ = fs::remove_file(&path);
                continue;
            }
            let Some(seq) = name
                .strip_suffix(".seg")
                .and_then(|s| u64::from_str_radix(s, 16).ok())
            else {
                continue;
            };
            // A FIFO, folder or symlink under a segment's name: opening a FIFO blocks forever.
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                quarantine(&path, &corrupt(&path, "not a regular file"));
                corrupt_at_open.push((None, None));
                continue;
            }
            // Segments written by older versions were 0644.
            if let Err(err) = secure_fs::tighten(&path) {
                tracing::warn!(%err, "cannot make a spool segment private");
            }
            match read_header(&path) {
                Ok((kind, events, bytes)) => segments.push(Segment {
                    seq,
                    path,
                    bytes,
                    kind,
                    events,
                }),
                Err(err) => {
                    corrupt_at_open.push(claimed(&path));
                    quarantine(&path, &err);
                }
            }
        }
        segments.sort_by_key(|s| s.seq);
        let next_seq = segments.last().map_or(0, |s| s.seq + 1);
        let bytes = segments.iter().map(|s| s.bytes).sum();
        let mut pending = EnumMap::default();
        for segment in &segments {
            pending[segment.kind] += segment.events;
        }
        Ok(Spool {
            dir: dir.to_path_buf(),
            config,
            segments: segments.into(),
            next_seq,
            bytes,
            pending,
            corrupt_at_open,
        })
    }

    /// The folder of the segments.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Segments `open` found corrupt and quarantined (to be counted as `spool_corrupt`); taken
    /// once.
    pub fn take_corrupt_at_open(&mut self) -> Vec<CorruptSegment> {
        std::mem::take(&mut self.corrupt_at_open)
            .into_iter()
            .map(|(kind, events)| CorruptSegment { kind, events })
            .collect()
    }

    /// The batches of the readable segments in `dir`, oldest first, without changing anything
    /// there (no quarantine): for a reader that looks before the spool's owner opens it, so
    /// the owner still finds and counts the corrupt segments.
    pub fn read_only(dir: &Path) -> Vec<EventBatch> {
        let Ok(entries) = fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut found: Vec<(u64, PathBuf)> = entries
            .flatten()
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let seq = u64::from_str_radix(name.strip_suffix(".seg")?, 16).ok()?;
                Some((seq, entry.path()))
            })
            .collect();
        found.sort();
        found
            .into_iter()
            .filter_map(|(_, path)| read_segment(&path).ok())
            .collect()
    }

    /// Sequence numbers of the segments, oldest first.
    pub fn sequence_numbers(&self) -> Vec<u64> {
        self.segments.iter().map(|s| s.seq).collect()
    }

    /// Reads the segment `seq` without removing it.
    pub fn read(&self, seq: u64) -> Result<EventBatch, SpoolError> {
        let segment = self
            .segments
            .iter()
            .find(|s| s.seq == seq)
            .ok_or_else(|| corrupt(&self.dir, &format!("no segment {seq:016x}")))?;
        read_segment(&segment.path)
    }

    /// Deletes the segment `seq` wherever it is (a journal entry whose rows were delivered);
    /// returns its event count, None when there is no such segment.
    pub fn remove(&mut self, seq: u64) -> Option<u64> {
        let index = self.segments.iter().position(|s| s.seq == seq)?;
        self.delete_at(index)
    }

    /// The sequence number the next `store` gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Events waiting, by kind.
    pub fn pending_events(&self, kind: EventKind) -> u64 {
        self.pending[kind]
    }

    /// True when nothing is spooled.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Bytes on disk.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether a batch of `bytes` more fits under `max_size`.
    pub fn has_room(&self, bytes: u64) -> bool {
        self.bytes + bytes <= self.config.max_size
    }

    /// Appends `batch` as the newest segment; returns the bytes written.
    pub fn store(&mut self, batch: &EventBatch) -> Result<u64, SpoolError> {
        let written = self.reserve().write(batch)?;
        let bytes = written.bytes;
        self.commit(written);
        Ok(bytes)
    }

    /// The name of the next segment, to be written by [`SegmentWrite::write`] without this
    /// spool (another thread may write it while the spool is used) and then
    /// [`commit`](Self::commit)ted. A reserved name that is never committed is skipped.
    pub fn reserve(&mut self) -> SegmentWrite {
        let seq = self.next_seq;
        self.next_seq += 1;
        SegmentWrite {
            seq,
            dir: self.dir.clone(),
            fsync: self.config.fsync,
        }
    }

    /// Adds a written segment to the index, in sequence order (a segment written meanwhile
    /// by another path may have been committed first).
    pub fn commit(&mut self, written: WrittenSegment) {
        let WrittenSegment { segment, .. } = written;
        self.bytes += segment.bytes;
        self.pending[segment.kind] += segment.events;
        let at = self
            .segments
            .iter()
            .rposition(|s| s.seq < segment.seq)
            .map_or(0, |i| i + 1);
        self.segments.insert(at, segment);
    }

    /// Bytes of Arrow memory that may wait for the disk (`write_buffer`).
    pub fn write_buffer(&self) -> u64 {
        self.config.write_buffer
    }

    /// Reads the oldest segment without removing it (tests; the queue reads through
    /// [`Spool::front`] without its lock). Corrupt segments are quarantined and reported in the
    /// second value (kind, events lost), and the next one is tried.
    #[cfg(test)]
    pub fn peek(&mut self) -> (Option<EventBatch>, Vec<(EventKind, u64)>) {
        let mut corrupt = Vec::new();
        while let Some(front) = self.front() {
            match front.read() {
                Ok(batch) => return (Some(batch), corrupt),
                Err(err) => corrupt.extend(self.quarantine_front(&front, &err)),
            }
        }
        (None, corrupt)
    }

    /// Deletes the oldest segment (after [`Spool::peek`]'s batch was taken).
    #[cfg(test)]
    pub fn pop(&mut self) {
        self.delete_at(0);
    }

    /// The oldest segment, to be read without the queue's lock held ([`FrontSegment::read`]),
    /// then taken with [`Spool::take_front`] or set aside with [`Spool::quarantine_front`].
    pub fn front(&self) -> Option<FrontSegment> {
        self.segments.front().map(|segment| FrontSegment {
            seq: segment.seq,
            path: segment.path.clone(),
        })
    }

    /// Removes `front` from the index if it is still the oldest segment, and returns its file
    /// for the caller to delete once it holds no lock; None when the index changed meanwhile
    /// (the segment was dropped to make room: what was read must not be delivered).
    pub fn take_front(&mut self, front: &FrontSegment) -> Option<PathBuf> {
        if self.segments.front()?.seq != front.seq {
            return None;
        }
        let segment = self.segments.pop_front()?;
        self.uncount(&segment);
        Some(segment.path)
    }

    /// Sets `front` aside as corrupt (renamed to `.corrupt`) if it is still the oldest
    /// segment; returns its kind and the events it held.
    pub fn quarantine_front(
        &mut self,
        front: &FrontSegment,
        err: &SpoolError,
    ) -> Option<(EventKind, u64)> {
        let segment = self.segments.front().filter(|s| s.seq == front.seq)?;
        let lost = (segment.kind, segment.events);
        quarantine(&segment.path, err);
        self.forget_front();
        Some(lost)
    }

    /// Deletes the oldest segment of a droppable kind (CUDA, driver) to make room
    /// (drop_oldest); returns its kind and event count.
    pub fn drop_oldest_droppable(&mut self) -> Option<(EventKind, u64)> {
        let index = self.segments.iter().position(|s| s.kind.droppable())?;
        let kind = self.segments[index].kind;
        self.delete_at(index).map(|events| (kind, events))
    }

    /// Deletes the segment at `index` and its file; returns its event count.
    fn delete_at(&mut self, index: usize) -> Option<u64> {
        let segment = self.segments.remove(index)?;
        let _ = fs::remove_file(&segment.path);
        self.uncount(&segment);
        Some(segment.events)
    }

    /// Forgets the oldest segment (its file was set aside as corrupt).
    fn forget_front(&mut self) {
        if let Some(segment) = self.segments.pop_front() {
            self.uncount(&segment);
        }
    }

    fn uncount(&mut self, segment: &Segment) {
        self.bytes -= segment.bytes;
        self.pending[segment.kind] -= segment.events;
    }
}

pub(crate) fn private(path: &Path, err: secure_fs::SecureFsError) -> SpoolError {
    match err {
        secure_fs::SecureFsError::Io { path, source } => SpoolError::Io { path, source },
        other => SpoolError::Io {
            path: path.to_path_buf(),
            source: io::Error::other(other.to_string()),
        },
    }
}

pub(crate) fn corrupt(path: &Path, reason: &str) -> SpoolError {
    SpoolError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

fn quarantine(path: &Path, err: &SpoolError) {
    tracing::error!(%err, "skipping corrupt spool segment");
    let mut aside = path.as_os_str().to_owned();
    aside.push(".corrupt");
    let _ = fs::rename(path, aside);
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
