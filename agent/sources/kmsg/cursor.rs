//! The kernel-log cursor: how far the kmsg reader got, kept under `state_dir` so that a
//! restart within the same boot resumes after the last record whose XID is durable, and so
//! reads the XIDs logged while the agent was down (as far as the kernel's buffer still holds
//! them) without writing any twice.
//!
//! The cursor is `{"boot_id": ..., "seq": N}`: every record up to sequence number N of that
//! boot has been handled, and every XID among them was handed to the sinks (whose XID
//! journals made it durable). It is written atomically (temporary file, fsync, rename) and
//! only advanced past an XID once the XID stage has emitted it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::KmsgStart;

/// The cursor file's name under `state_dir`.
pub const CURSOR_FILE: &str = "kmsg-cursor.json";

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

    /// The saved cursor; None when there is none yet.
    pub fn load(&mut self) -> Result<Option<Cursor>, CursorError> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(CursorError::Io {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        let cursor: Cursor = serde_json::from_str(&text).map_err(|err| CursorError::Malformed {
            path: self.path.clone(),
            reason: err.to_string(),
        })?;
        if cursor.boot_id == self.boot_id {
            self.saved = Some(cursor.seq);
        }
        Ok(Some(cursor))
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
mod tests {
    use super::*;

    fn cursor(boot: &str, seq: u64) -> Cursor {
        Cursor {
            boot_id: boot.into(),
            seq,
        }
    }

    #[test]
    fn resumes_within_a_boot_reads_a_new_boot_whole_and_starts_as_configured_first() {
        let same = cursor("b1", 41);
        assert_eq!(plan(Some(&same), "b1", KmsgStart::End), Resume::After(41));
        assert_eq!(
            plan(Some(&same), "b1", KmsgStart::Beginning),
            Resume::After(41)
        );
        assert_eq!(
            plan(Some(&same), "b2", KmsgStart::End),
            Resume::FromBeginning
        );
        assert_eq!(plan(None, "b1", KmsgStart::End), Resume::FromEnd);
        assert_eq!(
            plan(None, "b1", KmsgStart::Beginning),
            Resume::FromBeginning
        );
    }

    #[test]
    fn saves_at_once_after_an_xid_and_otherwise_lazily() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = CursorFile::new(dir.path(), "boot-a");
        assert_eq!(file.load().unwrap(), None);
        file.advance(10, false).unwrap();
        assert_eq!(file.load().unwrap(), None, "no XID: not saved yet");
        file.xid_seen(11);
        file.advance(11, false).unwrap();
        assert_eq!(file.load().unwrap(), Some(cursor("boot-a", 11)));
        file.advance(12, true).unwrap();
        assert_eq!(file.load().unwrap(), Some(cursor("boot-a", 12)));
        file.advance(5, true).unwrap();
        assert_eq!(
            file.load().unwrap(),
            Some(cursor("boot-a", 12)),
            "never back"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(file.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_cursor_of_another_boot_is_read_but_not_taken_as_saved() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = CursorFile::new(dir.path(), "boot-a");
        old.advance(99, true).unwrap();
        let mut new = CursorFile::new(dir.path(), "boot-b");
        assert_eq!(new.load().unwrap(), Some(cursor("boot-a", 99)));
        assert_eq!(new.saved(), None);
        new.advance(3, true).unwrap();
        assert_eq!(new.load().unwrap(), Some(cursor("boot-b", 3)));
    }

    #[test]
    fn garbage_is_a_clear_error_and_a_planted_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = CursorFile::new(dir.path(), "b");
        fs::write(file.path(), "{\"boot_id\": 1}").unwrap();
        let err = file.load().unwrap_err().to_string();
        assert!(err.contains("kmsg-cursor.json is unreadable"), "{err}");
        let victim = dir.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let mut temp = file.path().as_os_str().to_owned();
        temp.push(".tmp");
        std::os::unix::fs::symlink(&victim, PathBuf::from(temp)).unwrap();
        file.advance(7, true).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(file.load().unwrap(), Some(cursor("b", 7)));
    }
}
