//! The kernel-log cursor: how far the kmsg reader got, kept under `state_dir` so that a
//! restart within the same boot resumes after the last record whose XID is durable, and so
//! reads the XIDs logged while the agent was down (as far as the kernel's buffer still holds
//! them) without writing any twice.
//!
//! The cursor is `{"boot_id": ..., "seq": N}`: every record up to sequence number N of that
//! boot has been handled, and every XID among them was handed to the sinks (whose XID
//! journals made it durable). It is written atomically (temporary file, fsync, rename) and
//! only advanced past an XID once the XID stage has emitted it.
//!
//! A cursor that cannot be trusted (unreadable, too large, not a regular file of ours, or
//! ahead of the kernel log of this boot) is set aside at load, and the caller reads the boot's
//! log from its first record: a wrong cursor must never be able to skip XIDs.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::accounting::state_files::SetAsideReason;
use crate::sources::xid_config::KmsgStart;
use crate::state_file::{self, Found};

/// The cursor file's name under `state_dir`.
pub const CURSOR_FILE: &str = "kmsg-cursor.json";

/// The largest cursor file read (the agent writes about 80 bytes): anything larger is set
/// aside unread.
pub const MAX_CURSOR_LEN: u64 = 64 * 1024;

/// Without a new XID, the cursor is saved at most this often (a restart re-reads, and skips,
/// at most this much of the log).
const IDLE_SAVE_INTERVAL: Duration = Duration::from_secs(5);

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// `/proc/sys/kernel/random/boot_id` of the boot the sequence numbers belong to.
    pub boot_id: String,
    /// Every record up to this sequence number was handled.
    pub seq: u64,
}

/// What [`CursorFile::load`] found.
#[derive(Debug)]
pub enum Loaded {
    /// No cursor: a first start on this node.
    Absent,
    /// A usable cursor (of this boot, or of another).
    Cursor(Cursor),
    /// A cursor that cannot be used, renamed aside (`aside`: its new name, or why it could
    /// not be moved).
    SetAside {
        /// Why.
        reason: SetAsideReason,
        /// What was wrong with it, for the log.
        detail: String,
        /// Where it went.
        aside: io::Result<PathBuf>,
    },
}

/// Where reading starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Only records logged from now on.
    FromEnd,
    /// The oldest record the kernel still holds.
    FromBeginning,
    /// The oldest record, skipping those up to and including this sequence number.
    After(u64),
}

/// Decides where to start: after the cursor within the same boot; from the beginning of a
/// new boot when the agent ran here before (everything this boot logged is new to it); as
/// configured (`kmsg_start`, default the end) on a first start.
pub fn plan(cursor: Option<&Cursor>, boot_id: &str, configured: KmsgStart) -> Resume {
    match cursor {
        Some(cursor) if cursor.boot_id == boot_id => Resume::After(cursor.seq),
        Some(_) => Resume::FromBeginning,
        None => match configured {
            KmsgStart::End => Resume::FromEnd,
            KmsgStart::Beginning => Resume::FromBeginning,
        },
    }
}

/// The cursor in `bytes`: a JSON object (serde would also take `["boot", 3]` for the struct).
fn parse(bytes: &[u8]) -> Result<Cursor, serde_json::Error> {
    let value: serde_json::Value = serde_json::from_slice(bytes)?;
    if !value.is_object() {
        return Err(serde::de::Error::custom(format!(
            "a JSON {}, not an object",
            match value {
                serde_json::Value::Null => "null",
                serde_json::Value::Bool(_) => "boolean",
                serde_json::Value::Number(_) => "number",
                serde_json::Value::String(_) => "string",
                _ => "array",
            }
        )));
    }
    serde_json::from_value(value)
}

/// Errors reading or writing the cursor.
#[derive(Debug, thiserror::Error)]
pub enum CursorError {
    /// Filesystem error.
    #[error("kmsg cursor {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// OS error.
        source: io::Error,
    },
    /// Not a cursor.
    #[error("kmsg cursor {path} is unreadable: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// The cursor file and what was last saved to it.
#[derive(Debug)]
pub struct CursorFile {
    path: PathBuf,
    boot_id: String,
    saved: Option<u64>,
    saved_at: Instant,
    /// The newest record holding an XID not yet covered by a save: save as soon as it is
    /// durable.
    xid_pending: Option<u64>,
}

impl CursorFile {
    /// The cursor under `state_dir` for the boot `boot_id`.
    pub fn new(state_dir: &Path, boot_id: &str) -> Self {
        Self {
            path: state_dir.join(CURSOR_FILE),
            boot_id: boot_id.to_string(),
            saved: None,
            saved_at: Instant::now(),
            xid_pending: None,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved cursor, checked: read without blocking (a FIFO or a huge file at its name
    /// cannot hold start-up), parsed, and, for this boot, no further than `last_seq`, the last
    /// record the kernel log holds now (None: the log told nothing). A cursor that cannot be
    /// used is renamed aside (see [`crate::state_file`]); the caller logs and counts it.
    pub fn load(&mut self, last_seq: Option<u64>) -> Result<Loaded, CursorError> {
        let io_err = |source| CursorError::Io {
            path: self.path.clone(),
            source,
        };
        let (reason, detail) = match state_file::read(&self.path, MAX_CURSOR_LEN).map_err(io_err)? {
            Found::Absent => return Ok(Loaded::Absent),
            Found::Refused(reason, detail) => (reason, detail),
            Found::Content(bytes) => match parse(&bytes) {
                Err(err) => (SetAsideReason::Unreadable, format!("not a cursor: {err}")),
                Ok(cursor) if cursor.boot_id != self.boot_id => return Ok(Loaded::Cursor(cursor)),
                Ok(cursor) => match last_seq {
                    Some(last) if cursor.seq > last => (
                        SetAsideReason::AheadOfLog,
                        format!(
                            "sequence number {} of this boot, but the kernel log's last record is {last}",
                            cursor.seq
                        ),
                    ),
                    _ => {
                        self.saved = Some(cursor.seq);
                        return Ok(Loaded::Cursor(cursor));
                    }
                },
            },
        };
        Ok(Loaded::SetAside {
            reason,
            detail,
            aside: state_file::set_aside(&self.path),
        })
    }

    /// Notes that the record `seq` held an XID: advances are saved at once until one covers
    /// it.
    pub fn xid_seen(&mut self, seq: u64) {
        self.xid_pending = Some(self.xid_pending.map_or(seq, |s| s.max(seq)));
    }

    /// Records that every record up to `seq` is handled, saving it when an XID is among the
    /// new ones, when `force` is set, or when the last save is older than the idle interval.
    pub fn advance(&mut self, seq: u64, force: bool) -> Result<(), CursorError> {
        if self.saved.is_some_and(|saved| saved >= seq) {
            return Ok(());
        }
        let due =
            force || self.xid_pending.is_some() || self.saved_at.elapsed() >= IDLE_SAVE_INTERVAL;
        if !due {
            return Ok(());
        }
        self.write(seq)?;
        self.saved = Some(seq);
        self.saved_at = Instant::now();
        if self.xid_pending.is_some_and(|pending| pending <= seq) {
            self.xid_pending = None;
        }
        Ok(())
    }

    /// The last saved sequence number of this boot.
    pub fn saved(&self) -> Option<u64> {
        self.saved
    }

    fn write(&self, seq: u64) -> Result<(), CursorError> {
        let io_err = |source| CursorError::Io {
            path: self.path.clone(),
            source,
        };
        let cursor = Cursor {
            boot_id: self.boot_id.clone(),
            seq,
        };
        let text = serde_json::to_string(&cursor).map_err(|err| CursorError::Malformed {
            path: self.path.clone(),
            reason: err.to_string(),
        })?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_err)?;
        let mut temp_name = self.path.as_os_str().to_owned();
        temp_name.push(".tmp");
        let temp = PathBuf::from(temp_name);
        // A temporary left by a crash is ours to replace; never follow a planted link.
        match fs::remove_file(&temp) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(io_err(err)),
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)
            .map_err(io_err)?;
        // The umask may have taken bits off; the mode is exactly 0600.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io_err)?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.write_all(b"\n"))
            .and_then(|()| file.sync_all())
            .map_err(io_err)?;
        drop(file);
        fs::rename(&temp, &self.path).map_err(io_err)?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(io_err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
