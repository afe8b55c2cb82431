//! Reading back a small file the agent keeps under its state directory (the kernel-log cursor)
//! so that nothing found at its name can hang start-up, be read whole, or be trusted blindly,
//! and setting aside what cannot be used.
//!
//! The file is looked at before it is opened (a FIFO, socket, device, directory or symlink is
//! never opened), then opened with `O_NONBLOCK | O_NOFOLLOW` (a FIFO swapped in between cannot
//! block the open or a read) and checked again on the descriptor: a regular file, owned by this
//! user, no larger than the caller's cap. A mode other than 0600 is corrected through the
//! descriptor. What cannot be used is renamed to `<name>.bad-<unix ms>` (a directory or FIFO
//! too), never deleted, so that an operator can look at it.
//!
//! This module does not parse the content or decide what a refusal means; its callers do.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::accounting::state_files::SetAsideReason;

/// The mode of every state file.
const FILE_MODE: u32 = 0o600;

/// What was found at a state file's name.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// Nothing.
    Absent,
    /// A regular file of ours, within the cap: its content.
    Content(Vec<u8>),
    /// Something that must not be used: why, and what it was.
    Refused(SetAsideReason, String),
}

/// Reads the state file at `path`, at most `max_len` bytes, without blocking and without
/// following a symlink. I/O errors other than "not there" are returned as they are.
pub fn read(path: &Path, max_len: u64) -> io::Result<Found> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Found::Absent),
        Err(err) => return Err(err),
    };
    if let Some(refused) = check(&meta, max_len) {
        return Ok(refused);
    }
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Found::Absent),
        // Replaced by a symlink since it was looked at.
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
            return Ok(Found::Refused(SetAsideReason::NotAFile, "a symlink".into()))
        }
        Err(err) => return Err(err),
    };
    // Checked again on what was opened: the name may have been swapped in between.
    let meta = file.metadata()?;
    if let Some(refused) = check(&meta, max_len) {
        return Ok(refused);
    }
    let mode = meta.mode() & 0o7777;
    if mode != FILE_MODE {
        file.set_permissions(Permissions::from_mode(FILE_MODE))?;
        tracing::warn!(path = %path.display(), mode = %format!("{mode:04o}"), "state file was not private; its mode is now 0600");
    }
    let mut content = Vec::new();
    file.by_ref()
        .take(max_len.saturating_add(1))
        .read_to_end(&mut content)?;
    if content.len() as u64 > max_len {
        return Ok(too_large(content.len() as u64, max_len));
    }
    Ok(Found::Content(content))
}

/// Why `meta` cannot be a state file of ours, if it cannot.
fn check(meta: &fs::Metadata, max_len: u64) -> Option<Found> {
    let kind = meta.file_type();
    let what = if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_symlink() {
        Some("a symlink")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        Some("a device")
    };
    if let Some(what) = what {
        return Some(Found::Refused(SetAsideReason::NotAFile, what.into()));
    }
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid {
        return Some(Found::Refused(
            SetAsideReason::ForeignOwner,
            format!("owned by uid {}, not by this agent's uid {uid}", meta.uid()),
        ));
    }
    (meta.len() > max_len).then(|| too_large(meta.len(), max_len))
}

fn too_large(len: u64, max_len: u64) -> Found {
    Found::Refused(
        SetAsideReason::TooLarge,
        format!("{len} bytes, more than the {max_len} a state file may hold"),
    )
}

/// Renames whatever is at `path` (file, directory, FIFO, symlink itself) to
/// `<path>.bad-<unix ms>` (`-2`, `-3`, ... appended if taken) and returns the new name.
pub fn set_aside(path: &Path) -> io::Result<PathBuf> {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let base = format!("{}.bad-{ms}", path.display());
    for attempt in 1..=100u32 {
        let aside = PathBuf::from(if attempt == 1 {
            base.clone()
        } else {
            format!("{base}-{attempt}")
        });
        if fs::symlink_metadata(&aside).is_ok() {
            continue;
        }
        fs::rename(path, &aside)?;
        if let Some(dir) = path.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            File::open(dir)?.sync_all()?;
        }
        return Ok(aside);
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{base}: every name to set it aside under is taken"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_regular_file_is_read_and_made_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(read(&path, 64).unwrap(), Found::Absent);
        fs::write(&path, b"{}").unwrap();
        fs::set_permissions(&path, Permissions::from_mode(0o666)).unwrap();
        assert_eq!(read(&path, 64).unwrap(), Found::Content(b"{}".to_vec()));
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    #[cfg_attr(
        not(feature = "root-tests"),
        ignore = "needs root: `make test` runs it"
    )]
    fn what_is_not_a_small_regular_file_of_ours_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let refused = |what: &str| Found::Refused(SetAsideReason::NotAFile, what.into());

        fs::create_dir(&path).unwrap();
        assert_eq!(read(&path, 64).unwrap(), refused("a directory"));
        fs::remove_dir(&path).unwrap();

        let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        assert_eq!(read(&path, 64).unwrap(), refused("a FIFO"));
        fs::remove_file(&path).unwrap();

        fs::write(dir.path().join("elsewhere"), b"{}").unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &path).unwrap();
        assert_eq!(read(&path, 64).unwrap(), refused("a symlink"));
        fs::remove_file(&path).unwrap();

        let file = File::create(&path).unwrap();
        file.set_len(200 << 20).unwrap();
        assert_eq!(
            read(&path, 64 << 10).unwrap(),
            Found::Refused(
                SetAsideReason::TooLarge,
                "209715200 bytes, more than the 65536 a state file may hold".into()
            )
        );
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        assert!(matches!(
            read(&path, u64::MAX).unwrap(),
            Found::Refused(SetAsideReason::ForeignOwner, _)
        ));
    }

    #[test]
    fn set_aside_renames_anything_under_a_fresh_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("inside"), b"x").unwrap();
        let first = set_aside(&path).unwrap();
        assert!(first.join("inside").is_file());
        assert!(!path.exists());
        fs::write(&path, b"garbage").unwrap();
        let second = set_aside(&path).unwrap();
        assert_ne!(first, second);
        assert_eq!(fs::read(&second).unwrap(), b"garbage");
        let name = second.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("state.json.bad-"), "{name}");
    }
}
