//! The one seam between the lake reader and where the lake is kept. A lake is a set of objects
//! named by `/`-separated keys relative to its root (`cuda/dt=2026-11-22/hour=03/part-a.parquet`);
//! everything above this trait works on keys only, so a local folder and an object store (S3)
//! read the same way. The listing and the checks are the lake's own (object_store's local
//! listing hides FIFOs and stops at a folder it cannot read; both must be reported); the rows
//! are read by the engine through [`LakeStorage::object_store`]. Implementations only read:
//! nothing here writes or deletes.

use std::sync::Arc;

use bytes::Bytes;
use object_store::{ObjectMeta, ObjectStore};

/// Why storage could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The key cannot name an object of this lake (absolute, or climbing out with `..`).
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The key as given.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The key names something that is not a regular file (a FIFO, a socket, a device, a
    /// folder); it is never opened for reading, since that could block forever.
    #[error("{target}: not a regular file ({file_type}); skipped")]
    NotAFile {
        /// The path, as the storage names it.
        target: String,
        /// What it is instead.
        file_type: &'static str,
    },
    /// Listing or reading failed.
    #[error("{what} {target}: {source}")]
    Io {
        /// `listing` or `reading`.
        what: &'static str,
        /// The folder or object, as the storage names it.
        target: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// A file (or folder, or accounting document) that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// Its key in the lake.
    pub key: String,
    /// What went wrong.
    pub error: String,
}

/// What a listing found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Keys of the objects found, sorted.
    pub keys: Vec<String>,
    /// Folders below the prefix that could not be listed; what they hold is missing from
    /// `keys`.
    pub unreadable: Vec<Unreadable>,
}

/// Read access to the objects of one lake.
pub trait LakeStorage: Send + Sync {
    /// Every object whose key starts with the folder `prefix` (`cuda/dt=2026-11-22/`; empty
    /// for the whole lake), at any depth, as keys relative to the root. A prefix that does not
    /// exist lists nothing; that is not an error. A folder below it that cannot be listed is
    /// reported in [`Listing::unreadable`] and the rest is listed. Must not block on anything
    /// but the storage itself.
    fn list(&self, prefix: &str) -> Result<Listing, StorageError>;

    /// The whole content of one object. Anything that is not a plain object with content
    /// (a FIFO, socket or device, or a link to one) is an error, never a wait.
    fn get(&self, key: &str) -> Result<Bytes, StorageError>;

    /// Size and modification time of one object, checked without reading it: anything that is
    /// not a plain object with content (a FIFO, socket or device, or a link to one), or that
    /// cannot be opened, is an error, never a wait.
    fn stat(&self, key: &str) -> Result<ObjectMeta, StorageError>;

    /// The last `len` bytes of the `size`-byte object `key` (a Parquet file's footer length and
    /// magic), without reading the rest.
    fn tail(&self, key: &str, size: u64, len: u64) -> Result<Bytes, StorageError>;

    /// The store the engine reads objects through, keys relative to the lake's root.
    fn object_store(&self) -> Arc<dyn ObjectStore>;

    /// How the lake is named to people (`/var/lib/gpuship/data`, `s3://bucket/prefix`).
    fn describe(&self) -> String;

    /// The absolute location of `key` as table formats name files (`file:///var/lib/...`,
    /// `s3://bucket/prefix/...`); `key` empty for the lake's root.
    fn uri_of(&self, key: &str) -> String;

    /// The key of an absolute location inside the lake ([`Self::uri_of`]'s inverse); `None`
    /// for one outside it.
    fn key_of(&self, uri: &str) -> Option<String> {
        let root = self.uri_of("");
        let key = uri
            .strip_prefix(root.trim_end_matches('/'))?
            .strip_prefix('/')?;
        (!key.is_empty()).then(|| key.to_string())
    }

    /// The lake as a local folder, when it is one: the engine then reads small files in place
    /// ([`crate::whole_file`]) instead of through [`object_store`](Self::object_store).
    fn as_local(&self) -> Option<&crate::local::LocalStorage> {
        None
    }
}

/// The content of each of `keys`, in their order, fetched `at_once` at a time (on S3 each is a
/// request of tens of milliseconds; one after another they would add up). A fetch whose thread
/// failed is an error for its key.
pub fn get_many(
    storage: &dyn LakeStorage,
    keys: &[&str],
    at_once: usize,
) -> Vec<Result<Bytes, String>> {
    let threads = at_once.clamp(1, keys.len().max(1));
    let fetch = |t: usize| -> Vec<(usize, Result<Bytes, String>)> {
        (t..keys.len())
            .step_by(threads)
            .map(|i| (i, storage.get(keys[i]).map_err(|e| e.to_string())))
            .collect()
    };
    let mut found: Vec<Result<Bytes, String>> =
        vec![Err("not fetched: its reader failed".to_string()); keys.len()];
    let fetched: Vec<(usize, Result<Bytes, String>)> = if threads == 1 {
        fetch(0)
    } else {
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|t| scope.spawn(move || fetch(t)))
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_default())
                .collect()
        })
    };
    for (i, result) in fetched {
        found[i] = result;
    }
    found
}

/// Rejects keys that could reach outside the lake's root.
pub(crate) fn check_key(key: &str) -> Result<(), StorageError> {
    let invalid = |reason| StorageError::InvalidKey {
        key: key.to_string(),
        reason,
    };
    if key.starts_with('/') {
        return Err(invalid("keys are relative to the lake's root"));
    }
    if key.split('/').any(|part| part == "..") {
        return Err(invalid("keys must not contain '..'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_stay_inside_the_lake() {
        assert!(check_key("cuda/dt=2026-11-22/hour=03/part-a.parquet").is_ok());
        assert!(check_key("").is_ok());
        assert!(check_key("/etc/passwd").is_err());
        assert!(check_key("cuda/../../etc/passwd").is_err());
        // A name that merely contains dots is fine.
        assert!(check_key("cuda/..part.parquet").is_ok());
    }
}
