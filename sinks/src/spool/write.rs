//! Writing one spool segment away from the spool's index: [`Spool::reserve`] names it, the
//! spool's writer thread writes and fsyncs it with [`SegmentWrite::write`] (without the
//! queue's lock), and [`Spool::commit`] adds it to the index.

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use super::segment::{self, HEADER_LEN};
use super::{corrupt, io_err, private, FsyncPolicy, Segment, SpoolError};
use crate::secure_fs;
use crate::EventBatch;

/// A reserved segment name (see [`Spool::reserve`]).
#[derive(Debug)]
pub struct SegmentWrite {
    pub(super) seq: u64,
    pub(super) dir: PathBuf,
    pub(super) fsync: FsyncPolicy,
}

/// A segment on disk, not yet in its spool's index.
#[derive(Debug)]
pub struct WrittenSegment {
    pub(super) segment: Segment,
    /// Bytes on disk.
    pub bytes: u64,
}

impl SegmentWrite {
    /// Writes `batch` under a temporary name, fsyncs it (per the spool's `fsync`), and renames
    /// it into place: a crash leaves a whole segment or none.
    pub fn write(self, batch: &EventBatch) -> Result<WrittenSegment, SpoolError> {
        let (header, payload) = segment::encode(batch)
            .map_err(|e| corrupt(&self.dir, &format!("encoding the batch: {e}")))?;
        let path = self.dir.join(format!("{:016x}.seg", self.seq));
        let temp = self.dir.join(format!("{:016x}.seg.tmp", self.seq));
        // O_EXCL|O_NOFOLLOW: a file or symlink planted at this name is refused, never written
        // through; the name is skipped, so it costs this batch only.
        let mut file = secure_fs::create_new_private(&temp).map_err(|e| private(&temp, e))?;
        let written = file
            .write_all(&header)
            .and_then(|()| file.write_all(&payload))
            .and_then(|()| match self.fsync {
                FsyncPolicy::Always => file.sync_all(),
                FsyncPolicy::Never => Ok(()),
            });
        drop(file);
        if let Err(err) = written {
            // Ours (created just now): remove it, or the next store at this name would fail.
            let _ = fs::remove_file(&temp);
            return Err(io_err(&temp)(err));
        }
        fs::rename(&temp, &path).map_err(io_err(&path))?;
        if self.fsync == FsyncPolicy::Always {
            secure_fs::sync_dir(&self.dir).map_err(|e| private(&self.dir, e))?;
        }
        let bytes = (HEADER_LEN + payload.len()) as u64;
        Ok(WrittenSegment {
            segment: Segment {
                seq: self.seq,
                path,
                bytes,
                kind: batch.kind,
                events: batch.len() as u64,
            },
            bytes,
        })
    }
}
