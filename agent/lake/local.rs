//! [`LakeStorage`] over a folder on local disk: the Parquet sink's `path`.

use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::storage::{check_key, LakeStorage, StorageError};

/// A lake kept in a local folder.
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
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
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    fn path_of(&self, key: &str) -> Result<PathBuf, StorageError> {
        check_key(key)?;
        Ok(key
            .split('/')
            .filter(|p| !p.is_empty())
            .fold(self.root.clone(), |path, part| path.join(part)))
    }
}

impl LakeStorage for LocalStorage {
    fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let start = self.path_of(prefix)?;
        let mut keys = Vec::new();
        let mut stack = vec![start];
        while let Some(dir) = stack.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(StorageError::Io {
                        what: "listing",
                        target: dir.display().to_string(),
                        source,
                    })
                }
            };
            for entry in entries {
                let entry = entry.map_err(|source| StorageError::Io {
                    what: "listing",
                    target: dir.display().to_string(),
                    source,
                })?;
                let path = entry.path();
                // A file deleted between read_dir and here is simply gone.
                let Ok(file_type) = entry.file_type() else {
                    continue;
                };
                if file_type.is_dir() {
                    stack.push(path);
                } else if let Ok(relative) = path.strip_prefix(&self.root) {
                    let key: Vec<String> = relative
                        .components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect();
                    keys.push(key.join("/"));
                }
            }
        }
        keys.sort();
        Ok(keys)
    }

    fn get(&self, key: &str) -> Result<Bytes, StorageError> {
        let path = self.path_of(key)?;
        std::fs::read(&path)
            .map(Bytes::from)
            .map_err(|source| StorageError::Io {
                what: "reading",
                target: path.display().to_string(),
                source,
            })
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
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
            lake.list("cuda/dt=2026-11-22/").unwrap(),
            ["cuda/dt=2026-11-22/hour=03/part-a.parquet"]
        );
        assert_eq!(lake.list("cuda").unwrap().len(), 2);
        assert!(lake.list("xid/").unwrap().is_empty());
        assert!(lake.list("driver/").unwrap().is_empty(), "absent is empty");
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
}
