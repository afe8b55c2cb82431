//! Where finished Parquet files go: a local directory or an object store.
//!
//! A destination receives a complete, encoded file and makes it visible atomically, or fails
//! without leaving anything a reader would pick up: on local disk through a hidden temporary
//! name, fsync and rename; on an object store through a single PUT, which the store makes
//! visible only once the whole body has arrived. What happens to the rows of a failed file
//! (retry, spool) is the sink's business, not the destination's.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::layout::FilePaths;
use super::remote::RemoteError;

/// Failures writing one file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Filesystem error with the path involved.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Encoding error from the Parquet writer.
    #[error("writing {path}: {source}")]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The writer's error.
        source: parquet::errors::ParquetError,
    },
    /// The destination could not be set up at all (e.g. an object-store client that cannot
    /// be built).
    #[error("destination {destination} unavailable: {}", crate::secret::redact_text(reason, &[]))]
    Unavailable {
        /// The configured root.
        destination: String,
        /// Why.
        reason: String,
    },
    /// The object store refused or failed the upload (after its own retries). The store's
    /// message names the request's URL, which is printed redacted.
    #[error("uploading {location}: {}", crate::secret::redact_text(&source.to_string(), &[]))]
    Upload {
        /// `s3://bucket/key`.
        location: String,
        /// The store's error.
        source: RemoteError,
    },
}

/// Makes complete files visible.
pub trait Destination: Send + Sync {
    /// Stores `bytes` as `key` (relative, `/`-separated) and returns where it now is.
    fn persist(&self, key: &str, bytes: &bytes::Bytes) -> Result<String, FileError>;

    /// The root, for logs and error messages (`/var/lib/gpuship/data`, `s3://bucket/prefix`).
    fn describe(&self) -> String;
}

/// A destination that could not be set up: every file fails, so its rows are retried and
/// spooled (and the sink reports unhealthy) instead of vanishing.
#[derive(Debug, Clone)]
pub struct Unavailable {
    /// The configured root.
    pub destination: String,
    /// Why it cannot be used.
    pub reason: String,
}

impl Destination for Unavailable {
    fn persist(&self, _key: &str, _bytes: &bytes::Bytes) -> Result<String, FileError> {
        Err(FileError::Unavailable {
            destination: self.destination.clone(),
            reason: self.reason.clone(),
        })
    }

    fn describe(&self) -> String {
        self.destination.clone()
    }
}

/// Files under a local directory.
pub struct LocalDirectory {
    root: PathBuf,
}

impl LocalDirectory {
    /// Files go under `root`, which is created when missing.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
}

impl Destination for LocalDirectory {
    fn persist(&self, key: &str, bytes: &bytes::Bytes) -> Result<String, FileError> {
        let paths = FilePaths::under(&self.root, key);
        let result = write_atomically(bytes, &paths.temp_path, &paths.final_path);
        if result.is_err() {
            let _ = fs::remove_file(&paths.temp_path);
        }
        result.map(|()| paths.final_path.display().to_string())
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}

/// Writes a complete file: temporary name, fsync, rename, directory fsync.
fn write_atomically(bytes: &[u8], temp: &Path, final_path: &Path) -> Result<(), FileError> {
    let io_err = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| FileError::Io {
            action,
            path,
            source,
        }
    };
    let dir = final_path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io_err("creating directory", dir))?;
    // Readable by the owner's group (the analysts), not by everyone.
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .open(temp)
        .map_err(io_err("creating", temp))?;
    file.write_all(bytes).map_err(io_err("writing", temp))?;
    file.sync_all().map_err(io_err("fsync", temp))?;
    drop(file);
    fs::rename(temp, final_path).map_err(io_err("renaming into place", final_path))?;
    // The file is in place and complete; a failed directory fsync only weakens durability
    // across a power loss, so it is reported rather than undone.
    if let Err(err) = File::open(dir).and_then(|d| d.sync_all()) {
        tracing::warn!(dir = %dir.display(), %err, "fsync of the directory failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_files_appear_complete_with_private_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let destination = LocalDirectory::new(dir.path());
        let key = "cuda/dt=2026-11-22/hour=03/part-h-1.parquet";
        let location = destination
            .persist(key, &bytes::Bytes::from_static(b"PAR1"))
            .unwrap();
        assert_eq!(location, dir.path().join(key).display().to_string());
        assert_eq!(fs::read(dir.path().join(key)).unwrap(), b"PAR1");
        let mode = fs::metadata(dir.path().join(key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
        let leftovers: Vec<_> = fs::read_dir(dir.path().join("cuda/dt=2026-11-22/hour=03"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    }

    #[test]
    fn a_root_that_is_a_file_fails_without_leaving_a_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("root");
        fs::write(&blocker, b"x").unwrap();
        let error = LocalDirectory::new(&blocker)
            .persist("xid/a.parquet", &bytes::Bytes::from_static(b"PAR1"))
            .unwrap_err();
        assert!(error.to_string().contains("creating directory"), "{error}");
    }
}
