//! [`LakeStorage`] over a folder on local disk: the Parquet sink's `path`. The engine reads the
//! files through object_store's `LocalFileSystem`, only those this module listed and checked.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::{ObjectMeta, ObjectStore};

use super::storage::{check_key, LakeStorage, Listing, StorageError, Unreadable};

/// A lake kept in a local folder.
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
    /// The same folder for the engine.
    store: Arc<LocalFileSystem>,
}

impl LocalStorage {
    /// The lake rooted at `root`, which must be an existing folder.
    pub fn open(root: &Path) -> Result<Self, StorageError> {
        let meta = std::fs::metadata(root).map_err(|source| StorageError::Io {
            what: "opening",
            target: root.display().to_string(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(StorageError::Io {
                what: "opening",
                target: root.display().to_string(),
                source: std::io::Error::other("not a folder"),
            });
        }
        let store = LocalFileSystem::new_with_prefix(root).map_err(|err| StorageError::Io {
            what: "opening",
            target: root.display().to_string(),
            source: std::io::Error::other(err.to_string()),
        })?;
        Ok(Self {
            root: root.to_path_buf(),
            store: Arc::new(store),
        })
    }

    /// The file `key` names (checked to stay below the root).
    pub(crate) fn path_of(&self, key: &str) -> Result<PathBuf, StorageError> {
        check_key(key)?;
        Ok(key
            .split('/')
            .filter(|p| !p.is_empty())
            .fold(self.root.clone(), |path, part| path.join(part)))
    }
}

impl LakeStorage for LocalStorage {
    fn list(&self, prefix: &str) -> Result<Listing, StorageError> {
        let start = self.path_of(prefix)?;
        let mut listing = Listing::default();
        let mut stack = vec![start];
        while let Some(dir) = stack.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => {
                    listing.unreadable.push(Unreadable {
                        key: self.key_of(&dir),
                        error: format!("cannot list this folder: {err}"),
                    });
                    continue;
                }
            };
            for entry in entries {
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(err) => {
                        listing.unreadable.push(Unreadable {
                            key: self.key_of(&dir),
                            error: format!("listing stopped part-way: {err}"),
                        });
                        break;
                    }
                };
                // A file deleted between read_dir and here is simply gone. Links are not
                // followed here (a link to a folder is not descended into); `get` decides
                // whether what a key names can be read.
                let Ok(file_type) = entry.file_type() else {
                    continue;
                };
                if file_type.is_dir() {
                    stack.push(entry.path());
                } else {
                    listing.keys.push(self.key_of(&entry.path()));
                }
            }
        }
        listing.keys.sort();
        Ok(listing)
    }

    fn get(&self, key: &str) -> Result<Bytes, StorageError> {
        let path = self.path_of(key)?;
        read_regular_file(&path)
    }

    fn stat(&self, key: &str) -> Result<ObjectMeta, StorageError> {
        let path = self.path_of(key)?;
        let (_, meta) = open_regular_file(&path)?;
        Ok(ObjectMeta {
            location: object_store::path::Path::from(key),
            last_modified: meta
                .modified()
                .map(chrono::DateTime::<chrono::Utc>::from)
                .unwrap_or_default(),
            size: meta.len(),
            e_tag: None,
            version: None,
        })
    }

    fn tail(&self, key: &str, size: u64, len: u64) -> Result<Bytes, StorageError> {
        use std::os::unix::fs::FileExt;
        let path = self.path_of(key)?;
        let (file, _) = open_regular_file(&path)?;
        let mut data = vec![0; usize::try_from(len.min(size)).unwrap_or(0)];
        file.read_exact_at(&mut data, size.saturating_sub(len))
            .map_err(|source| StorageError::Io {
                what: "reading",
                target: path.display().to_string(),
                source,
            })?;
        Ok(Bytes::from(data))
    }

    fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }

    fn uri_of(&self, key: &str) -> String {
        let root = std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
        let root = root.display().to_string();
        let root = root.trim_end_matches('/');
        if key.is_empty() {
            format!("file://{root}")
        } else {
            format!("file://{root}/{key}")
        }
    }

    fn as_local(&self) -> Option<&LocalStorage> {
        Some(self)
    }
}

impl LocalStorage {
    /// The key of `path` (below the root).
    fn key_of(&self, path: &Path) -> String {
        let relative = path.strip_prefix(&self.root).unwrap_or(path);
        relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// What a non-regular file is, for people.
fn describe_type(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a folder"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_char_device() {
        "a character device"
    } else {
        "not a plain file"
    }
}

/// Opens the regular file at `path` (following links), refusing anything else before it is
/// opened: opening a FIFO for reading waits for a writer, and opening a device can have
/// effects. The file is opened non-blocking and checked again through its descriptor, so one
/// swapped in between the two checks is refused too.
fn open_regular_file(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), StorageError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| StorageError::Io {
        what: "reading",
        target: path.display().to_string(),
        source,
    };
    let not_a_file = |file_type: &std::fs::FileType| StorageError::NotAFile {
        target: path.display().to_string(),
        file_type: describe_type(file_type),
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(not_a_file(&meta.file_type()));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(not_a_file(&meta.file_type()));
    }
    Ok((file, meta))
}

/// Reads the regular file at `path` whole ([`open_regular_file`] decides what may be read).
fn read_regular_file(path: &Path) -> Result<Bytes, StorageError> {
    use std::io::Read;
    let (mut file, meta) = open_regular_file(path)?;
    let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut data)
        .map_err(|source| StorageError::Io {
            what: "reading",
            target: path.display().to_string(),
            source,
        })?;
    Ok(Bytes::from(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keys_below_a_prefix_and_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("cuda/dt=2026-11-22/hour=03");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("part-a.parquet"), b"a").unwrap();
        std::fs::write(dir.path().join("cuda/top.txt"), b"t").unwrap();
        std::fs::create_dir_all(dir.path().join("xid")).unwrap();
        let lake = LocalStorage::open(dir.path()).unwrap();
        assert_eq!(
            lake.list("cuda/dt=2026-11-22/").unwrap().keys,
            ["cuda/dt=2026-11-22/hour=03/part-a.parquet"]
        );
        assert_eq!(lake.list("cuda").unwrap().keys.len(), 2);
        assert!(lake.list("xid/").unwrap().keys.is_empty());
        assert_eq!(
            lake.list("driver/").unwrap(),
            Listing::default(),
            "absent is empty"
        );
        assert_eq!(
            &lake
                .get("cuda/dt=2026-11-22/hour=03/part-a.parquet")
                .unwrap()[..],
            b"a"
        );
        assert!(lake.get("../x").is_err());
        assert!(lake.get("cuda/missing.parquet").is_err());
    }

    #[test]
    fn a_missing_root_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = LocalStorage::open(&dir.path().join("nope")).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo has no other memory effects.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }

    #[test]
    fn special_files_and_links_to_them_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let hour = dir.path().join("cuda/dt=2026-11-22/hour=03");
        std::fs::create_dir_all(&hour).unwrap();
        mkfifo(&hour.join("part-fifo.parquet"));
        std::os::unix::fs::symlink(hour.join("part-fifo.parquet"), hour.join("part-l.parquet"))
            .unwrap();
        std::os::unix::fs::symlink("/dev/zero", hour.join("part-dev.parquet")).unwrap();
        std::os::unix::fs::symlink("/nonexistent", hour.join("part-gone.parquet")).unwrap();
        std::fs::write(hour.join("part-ok.parquet"), b"ok").unwrap();
        std::os::unix::fs::symlink(hour.join("part-ok.parquet"), hour.join("part-ok2.parquet"))
            .unwrap();
        let lake = LocalStorage::open(dir.path()).unwrap();
        let keys = lake.list("cuda/").unwrap().keys;
        assert_eq!(keys.len(), 6, "{keys:?}");
        let get = |name: &str| lake.get(&format!("cuda/dt=2026-11-22/hour=03/{name}"));
        for (name, what) in [
            ("part-fifo.parquet", "a FIFO"),
            ("part-l.parquet", "a FIFO"),
            ("part-dev.parquet", "a character device"),
        ] {
            let err = get(name).unwrap_err().to_string();
            assert!(
                err.contains(name) && err.contains(&format!("not a regular file ({what})")),
                "{err}"
            );
        }
        assert!(get("part-gone.parquet").is_err());
        assert_eq!(&get("part-ok.parquet").unwrap()[..], b"ok");
        assert_eq!(
            &get("part-ok2.parquet").unwrap()[..],
            b"ok",
            "links to files are read"
        );
    }

    #[test]
    fn a_folder_that_cannot_be_listed_is_reported_and_the_rest_listed() {
        let dir = tempfile::tempdir().unwrap();
        let hours = dir.path().join("cuda/dt=2026-11-22");
        std::fs::create_dir_all(hours.join("hour=03")).unwrap();
        std::fs::write(hours.join("hour=03/part-a.parquet"), b"a").unwrap();
        // A "folder" that is a FIFO cannot be listed (root can list any real folder).
        mkfifo(&hours.join("hour=04"));
        let lake = LocalStorage::open(dir.path()).unwrap();
        let listing = lake.list("cuda/dt=2026-11-22/hour=04/").unwrap();
        assert!(listing.keys.is_empty());
        assert_eq!(listing.unreadable.len(), 1, "{listing:?}");
        assert_eq!(listing.unreadable[0].key, "cuda/dt=2026-11-22/hour=04");
        assert_eq!(
            lake.list("cuda/").unwrap().keys,
            [
                "cuda/dt=2026-11-22/hour=03/part-a.parquet",
                "cuda/dt=2026-11-22/hour=04"
            ]
        );
    }
}
