//! Files the agent keeps under its state directory (spool segments, the kmsg cursor, the lock):
//! private to the agent's user and never reached through a planted symlink.
//!
//! Directories are 0700 and files 0600, set explicitly (never left to the umask). Files are
//! opened with `O_NOFOLLOW`, and temporary files are created with `O_EXCL`, so a symlink or
//! file someone placed at one of our names is refused, not written through. A directory owned
//! by another user, or writable by group or others, is refused: whoever can write there could
//! replace our files between two calls.
//!
//! This module does not decide where files go or what they hold; its callers do.

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of every directory under the state directory.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file under the state directory.
pub const FILE_MODE: u32 = 0o600;

/// Why a private file or directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SecureFsError {
    /// Filesystem error.
    #[error("{path}: {source}")]
    Io {
        /// File or directory.
        path: PathBuf,
        /// OS error.
        source: io::Error,
    },
    /// The directory belongs to someone else.
    #[error(
        "{path} is owned by uid {owner}, not by this agent's uid {uid}: refusing to keep state \
         there (chown it, or choose another [agent] state_dir)"
    )]
    ForeignOwner {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The agent's effective uid.
        uid: u32,
    },
    /// Others could replace files in the directory.
    #[error(
        "{path} is writable by group or others (mode {mode:04o}): refusing to keep state there \
         (chmod 700 it)"
    )]
    Writable {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Not a directory (or a symlink where a file must be).
    #[error("{path}: {what}")]
    Unexpected {
        /// The path.
        path: PathBuf,
        /// What was found.
        what: &'static str,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SecureFsError + '_ {
    move |source| SecureFsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Creates `dir` (and missing parents) with mode 0700, or checks an existing one: it must be a
/// directory owned by this user and not writable by group or others. An existing directory
/// that passes is tightened to 0700 (a folder made by an older version was 0755).
pub fn ensure_private_dir(dir: &Path) -> Result<(), SecureFsError> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(io_err(dir))?;
    let meta = fs::metadata(dir).map_err(io_err(dir))?;
    if !meta.is_dir() {
        return Err(SecureFsError::Unexpected {
            path: dir.to_path_buf(),
            what: "not a directory",
        });
    }
    let uid = euid();
    if meta.uid() != uid {
        return Err(SecureFsError::ForeignOwner {
            path: dir.to_path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(SecureFsError::Writable {
            path: dir.to_path_buf(),
            mode,
        });
    }
    if mode & 0o777 != DIR_MODE {
        fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)).map_err(io_err(dir))?;
    }
    Ok(())
}

/// Creates `path` for writing, mode 0600; fails if anything (a file, a symlink) is already
/// there, and never follows a symlink.
pub fn create_new_private(path: &Path) -> Result<File, SecureFsError> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| match source.kind() {
            io::ErrorKind::AlreadyExists => SecureFsError::Io {
                path: path.to_path_buf(),
                source: io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "already exists (left over or planted); not writing through it",
                ),
            },
            _ => SecureFsError::Io {
                path: path.to_path_buf(),
                source,
            },
        })?;
    // The umask may have taken bits off, never added; set the mode exactly.
    file.set_permissions(Permissions::from_mode(FILE_MODE))
        .map_err(io_err(path))?;
    Ok(file)
}

/// Opens (creating, mode 0600) a file that lives as long as the agent, such as its lock file;
/// never through a symlink.
pub fn open_private(path: &Path) -> Result<File, SecureFsError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(io_err(path))?;
    restrict(&file, path)?;
    Ok(file)
}

/// Opens `path` for reading, never through a symlink (`ELOOP` if it is one).
pub fn open_read(path: &Path) -> Result<File, SecureFsError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(io_err(path))
}

/// The content of `path`, or None when there is no such file; never through a symlink.
pub fn read_private(path: &Path) -> Result<Option<Vec<u8>>, SecureFsError> {
    let mut file = match open_read(path) {
        Ok(file) => file,
        Err(SecureFsError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(err) => return Err(err),
    };
    let mut data = Vec::new();
    file.read_to_end(&mut data).map_err(io_err(path))?;
    Ok(Some(data))
}

/// Tightens an existing file to 0600 through a descriptor opened without following symlinks
/// (files written by older versions were 0644).
pub fn tighten(path: &Path) -> Result<(), SecureFsError> {
    restrict(&open_read(path)?, path)
}

fn restrict(file: &File, path: &Path) -> Result<(), SecureFsError> {
    let meta = file.metadata().map_err(io_err(path))?;
    if !meta.is_file() {
        return Err(SecureFsError::Unexpected {
            path: path.to_path_buf(),
            what: "not a regular file",
        });
    }
    if meta.mode() & 0o777 != FILE_MODE {
        file.set_permissions(Permissions::from_mode(FILE_MODE))
            .map_err(io_err(path))?;
    }
    Ok(())
}

/// The temporary name [`write_atomic`] writes `path` under: `<path>.tmp`.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Replaces `path` with `data` so that a crash leaves the old content or the new, never a mix:
/// written to `<path>.tmp` (created with `O_EXCL|O_NOFOLLOW`, mode 0600), fsynced, renamed over
/// `path`, and the directory fsynced. A regular file left at the temporary name by a crash is
/// removed first; anything else there (a symlink) is an error, and nothing is written.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), SecureFsError> {
    let temp = temp_path(path);
    match fs::symlink_metadata(&temp) {
        Ok(meta) if meta.is_file() && meta.uid() == euid() => {
            fs::remove_file(&temp).map_err(io_err(&temp))?
        }
        Ok(_) => {
            return Err(SecureFsError::Unexpected {
                path: temp,
                what: "something other than our own regular file is at the temporary name; \
                       not writing through it",
            })
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(io_err(&temp)(err)),
    }
    let mut file = create_new_private(&temp)?;
    file.write_all(data)
        .and_then(|()| file.sync_all())
        .map_err(io_err(&temp))?;
    drop(file);
    fs::rename(&temp, path).map_err(io_err(path))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// fsyncs a directory, so that a rename or creation in it survives a crash.
pub fn sync_dir(dir: &Path) -> Result<(), SecureFsError> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn directories_are_created_0700_and_loose_ones_tightened_or_refused() {
        let root = tempfile::tempdir().unwrap();
        let nested = root.path().join("a/b/c");
        ensure_private_dir(&nested).unwrap();
        for dir in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode(&root.path().join(dir)), 0o700, "{dir}");
        }
        let old = root.path().join("old");
        fs::create_dir(&old).unwrap();
        fs::set_permissions(&old, Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&old).unwrap();
        assert_eq!(mode(&old), 0o700);

        for loose in [0o777, 0o1777, 0o770, 0o702] {
            fs::set_permissions(&old, Permissions::from_mode(loose)).unwrap();
            let err = ensure_private_dir(&old).unwrap_err();
            assert!(matches!(err, SecureFsError::Writable { mode, .. } if mode == loose));
            assert!(
                err.to_string()
                    .contains(&format!("{} is writable by group or others", old.display())),
                "{err}"
            );
        }
        let file = root.path().join("file");
        fs::write(&file, b"").unwrap();
        assert!(matches!(
            ensure_private_dir(&file),
            Err(SecureFsError::Io { .. } | SecureFsError::Unexpected { .. })
        ));
    }

    #[test]
    #[cfg_attr(
        not(feature = "root-tests"),
        ignore = "needs root: `make test` runs it"
    )]
    fn a_directory_of_another_user_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let theirs = root.path().join("theirs");
        fs::create_dir(&theirs).unwrap();
        fs::set_permissions(&theirs, Permissions::from_mode(0o700)).unwrap();
        // Tests run as root here; elsewhere chown is refused and there is nothing to test.
        if std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).is_err() {
            return;
        }
        let err = ensure_private_dir(&theirs).unwrap_err();
        assert!(
            matches!(err, SecureFsError::ForeignOwner { owner: 65534, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("is owned by uid 65534"), "{err}");
    }

    #[test]
    fn a_planted_symlink_is_never_written_through() {
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("precious");
        fs::write(&target, b"root-owned content").unwrap();
        let planted = root.path().join("state.tmp");
        symlink(&target, &planted).unwrap();

        assert!(create_new_private(&planted).is_err());
        assert!(open_private(&planted).is_err());
        let err = write_atomic(&root.path().join("state"), b"new").unwrap_err();
        assert!(err.to_string().contains("not writing through it"), "{err}");
        assert!(!root.path().join("state").exists());
        assert_eq!(fs::read(&target).unwrap(), b"root-owned content");
        assert_eq!(mode(&target), 0o644);

        // Reading refuses a symlink too.
        let link = root.path().join("link");
        symlink(&target, &link).unwrap();
        assert!(open_read(&link).is_err());
        assert!(read_private(&link).is_err());
        assert!(tighten(&link).is_err());
        assert_eq!(read_private(&root.path().join("absent")).unwrap(), None);
    }

    #[test]
    fn atomic_writes_are_0600_and_replace_a_crash_leftover() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("cursor");
        write_atomic(&path, b"one").unwrap();
        assert_eq!(mode(&path), 0o600);
        // A crash between create and rename leaves the temporary file behind.
        fs::write(temp_path(&path), b"half").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(read_private(&path).unwrap().unwrap(), b"two");
        assert!(!temp_path(&path).exists());
        assert_eq!(mode(&path), 0o600);

        let lock = root.path().join("lock");
        fs::write(&lock, b"").unwrap();
        fs::set_permissions(&lock, Permissions::from_mode(0o644)).unwrap();
        open_private(&lock).unwrap();
        assert_eq!(mode(&lock), 0o600);
        let old = root.path().join("segment");
        fs::write(&old, b"x").unwrap();
        fs::set_permissions(&old, Permissions::from_mode(0o644)).unwrap();
        tighten(&old).unwrap();
        assert_eq!(mode(&old), 0o600);
    }
}
