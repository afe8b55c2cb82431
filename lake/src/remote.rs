//! [`LakeStorage`] over an S3 bucket (or any S3-compatible store): the lake a Parquet sink with
//! `path = "s3://bucket/prefix"` writes. The client is the one the sink writes with
//! (`gpuship_model::s3::ObjectStoreOptions`), so endpoint, region, credentials and plain-HTTP
//! permission come from the standard AWS environment (`AWS_ENDPOINT_URL` or `AWS_ENDPOINT`,
//! either meaning path-style addressing; `AWS_REGION`, `AWS_ALLOW_HTTP`, the credential chain).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::TryStreamExt;
use gpuship_model::s3::{ObjectStoreOptions, S3Url};
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};

use super::storage::{check_key, LakeStorage, Listing, StorageError};

/// A lake kept under `s3://bucket/prefix`.
pub struct ObjectStoreStorage {
    store: Arc<dyn ObjectStore>,
    url: S3Url,
    runtime: tokio::runtime::Runtime,
    /// What the listings said of each key (relative to the prefix): `stat` answers from here
    /// instead of asking the store again for every file.
    listed: Mutex<HashMap<String, ObjectMeta>>,
}

impl ObjectStoreStorage {
    /// The lake at `url`, with the client settings of the environment. Nothing is contacted
    /// until the first listing.
    pub fn open(url: S3Url) -> anyhow::Result<Self> {
        let store = ObjectStoreOptions::default()
            .build(&url)
            .map_err(|err| anyhow::anyhow!("{url}: {err}"))?;
        // Worker threads keep the client's connections served between calls, whichever
        // runtime (this one or the engine's) uses them next.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        Ok(Self {
            store,
            url,
            runtime,
            listed: Mutex::default(),
        })
    }

    fn path_of(&self, key: &str) -> ObjectPath {
        let prefix = self.url.prefix.trim_matches('/');
        let key = key.trim_matches('/');
        match (prefix.is_empty(), key.is_empty()) {
            (true, _) => ObjectPath::from(key),
            (false, true) => ObjectPath::from(prefix),
            (false, false) => ObjectPath::from(format!("{prefix}/{key}")),
        }
    }

    fn error(&self, what: &'static str, key: &str, err: object_store::Error) -> StorageError {
        StorageError::Io {
            what,
            target: format!("{}/{key}", self.url),
            // The store's message names the request's URL (endpoint, signature): redacted.
            source: std::io::Error::other(gpuship_model::redact::redact_text(
                &err.to_string(),
                &[],
            )),
        }
    }
}

impl LakeStorage for ObjectStoreStorage {
    fn list(&self, prefix: &str) -> Result<Listing, StorageError> {
        check_key(prefix)?;
        let path = self.path_of(prefix);
        let root = self.path_of("");
        let listing: Vec<_> = self
            .runtime
            .block_on(self.store.list(Some(&path)).try_collect())
            .map_err(|err| self.error("listing", prefix, err))?;
        let root = root.as_ref();
        let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        let mut keys: Vec<String> = listing
            .into_iter()
            .filter_map(|meta| {
                let location = meta.location.as_ref().to_string();
                let key = if root.is_empty() {
                    Some(location)
                } else {
                    location
                        .strip_prefix(root)
                        .and_then(|rest| rest.strip_prefix('/'))
                        .map(str::to_string)
                }?;
                let relative = ObjectMeta {
                    location: ObjectPath::from(key.as_str()),
                    ..meta
                };
                listed.insert(key.clone(), relative);
                Some(key)
            })
            .collect();
        keys.sort();
        Ok(Listing {
            keys,
            unreadable: Vec::new(),
        })
    }

    fn get(&self, key: &str) -> Result<Bytes, StorageError> {
        check_key(key)?;
        let path = self.path_of(key);
        self.runtime
            .block_on(async { self.store.get(&path).await?.bytes().await })
            .map_err(|err| self.error("reading", key, err))
    }

    fn tail(&self, key: &str, size: u64, len: u64) -> Result<Bytes, StorageError> {
        check_key(key)?;
        let path = self.path_of(key);
        self.runtime
            .block_on(self.store.get_range(&path, size.saturating_sub(len)..size))
            .map_err(|err| self.error("reading", key, err))
    }

    fn stat(&self, key: &str) -> Result<ObjectMeta, StorageError> {
        check_key(key)?;
        if let Some(meta) = self
            .listed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
        {
            return Ok(meta.clone());
        }
        let path = self.path_of(key);
        self.runtime
            .block_on(self.store.head(&path))
            .map(|meta| ObjectMeta {
                location: ObjectPath::from(key),
                ..meta
            })
            .map_err(|err| self.error("reading", key, err))
    }

    fn object_store(&self) -> Arc<dyn ObjectStore> {
        let prefix = self.path_of("");
        if prefix.as_ref().is_empty() {
            return self.store.clone();
        }
        Arc::new(PrefixStore::new(self.store.clone(), prefix))
    }

    fn describe(&self) -> String {
        self.url.to_string()
    }

    fn uri_of(&self, key: &str) -> String {
        let path = self.path_of(key);
        format!("s3://{}/{path}", self.url.bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::PutPayload;

    fn storage(prefix: &str) -> ObjectStoreStorage {
        let url = S3Url::parse(&format!("s3://gpu-lake/{prefix}"))
            .unwrap()
            .unwrap();
        ObjectStoreStorage {
            store: Arc::new(InMemory::new()),
            url,
            runtime: tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap(),
            listed: Mutex::default(),
        }
    }

    #[test]
    fn keys_are_relative_to_the_prefix_and_other_prefixes_stay_out() {
        let lake = storage("fleet");
        for key in [
            "fleet/cuda/dt=2026-11-23/hour=10/part-a.parquet",
            "fleet/_accounting/accounting-n.json",
            "fleetwide/cuda/dt=2026-11-23/hour=10/part-b.parquet",
        ] {
            lake.runtime
                .block_on(
                    lake.store
                        .put(&ObjectPath::from(key), PutPayload::from_static(b"x")),
                )
                .unwrap();
        }
        assert_eq!(
            lake.list("").unwrap().keys,
            [
                "_accounting/accounting-n.json",
                "cuda/dt=2026-11-23/hour=10/part-a.parquet"
            ]
        );
        assert_eq!(
            lake.list("cuda/dt=2026-11-23/").unwrap().keys,
            ["cuda/dt=2026-11-23/hour=10/part-a.parquet"]
        );
        assert!(lake.list("xid/").unwrap().keys.is_empty());
        assert_eq!(
            lake.get("cuda/dt=2026-11-23/hour=10/part-a.parquet")
                .unwrap(),
            Bytes::from_static(b"x")
        );
        let missing = lake.get("cuda/none.parquet").unwrap_err().to_string();
        assert!(
            missing.contains("s3://gpu-lake/fleet/cuda/none.parquet"),
            "{missing}"
        );
        assert!(lake.get("../secret").is_err());
    }
}
