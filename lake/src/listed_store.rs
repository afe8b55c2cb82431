//! An [`ObjectStore`] that shows DataFusion exactly the files the lake's own listing kept
//! ([`crate::inventory`]): every listing is answered from that list, every read goes to the
//! real store. Files that were refused (special files, unreadable ones, damaged ones found by a
//! failed query) are therefore never opened by the engine, and nothing is listed twice. It
//! never writes: every write is refused.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// The files of one read, served over the store that holds them.
#[derive(Debug)]
pub struct ListedStore {
    inner: Arc<dyn ObjectStore>,
    files: BTreeMap<Path, ObjectMeta>,
}

impl ListedStore {
    /// `files` (keys relative to `inner`'s root) over `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>, files: impl IntoIterator<Item = ObjectMeta>) -> Self {
        Self {
            inner,
            files: files
                .into_iter()
                .map(|meta| (meta.location.clone(), meta))
                .collect(),
        }
    }

    /// The files below `prefix` (a folder; `None` for all), in key order.
    fn below<'a>(&'a self, prefix: Option<&'a Path>) -> impl Iterator<Item = &'a ObjectMeta> + 'a {
        self.files
            .values()
            .filter(move |meta| prefix.is_none_or(|p| meta.location.prefix_matches(p)))
    }
}

impl fmt::Display for ListedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ListedStore({} files over {})",
            self.files.len(),
            self.inner
        )
    }
}

fn read_only() -> object_store::Error {
    object_store::Error::NotSupported {
        source: "the lake is read-only here".into(),
    }
}

#[async_trait]
impl ObjectStore for ListedStore {
    async fn put_opts(&self, _: &Path, _: PutPayload, _: PutOptions) -> Result<PutResult> {
        Err(read_only())
    }

    async fn put_multipart_opts(
        &self,
        _: &Path,
        _: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        Err(read_only())
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        _: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        stream::once(async { Err(read_only()) }).boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let found: Vec<Result<ObjectMeta>> = self.below(prefix).cloned().map(Ok).collect();
        stream::iter(found).boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let depth = prefix.map_or(0, |p| p.parts().count());
        let mut common_prefixes: Vec<Path> = Vec::new();
        let mut objects = Vec::new();
        for meta in self.below(prefix) {
            let parts: Vec<_> = meta.location.parts().collect();
            if parts.len() == depth + 1 {
                objects.push(meta.clone());
            } else if let Some(folder) = parts.get(..=depth) {
                let folder = Path::from_iter(folder.iter().cloned());
                if common_prefixes.last() != Some(&folder) {
                    common_prefixes.push(folder);
                }
            }
        }
        Ok(ListResult {
            common_prefixes,
            objects,
        })
    }

    async fn copy_opts(&self, _: &Path, _: &Path, _: CopyOptions) -> Result<()> {
        Err(read_only())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    fn meta(key: &str) -> ObjectMeta {
        ObjectMeta {
            location: Path::from(key),
            last_modified: chrono::Utc::now(),
            size: 1,
            e_tag: None,
            version: None,
        }
    }

    #[test]
    fn lists_only_the_kept_files_and_reads_through() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let inner = Arc::new(InMemory::new());
        for key in [
            "cuda/dt=d/hour=01/a.parquet",
            "cuda/dt=d/hour=01/bad.parquet",
        ] {
            runtime
                .block_on(inner.put(&Path::from(key), PutPayload::from_static(b"x")))
                .unwrap();
        }
        let store = ListedStore::new(
            inner,
            [
                meta("cuda/dt=d/hour=01/a.parquet"),
                meta("cuda/dt=d/hour=02/b.parquet"),
                meta("xid/dt=d/hour=01/c.parquet"),
            ],
        );
        let all: Vec<_> = runtime
            .block_on(store.list(Some(&Path::from("cuda"))).collect::<Vec<_>>())
            .into_iter()
            .map(|m| m.unwrap().location.to_string())
            .collect();
        assert_eq!(
            all,
            ["cuda/dt=d/hour=01/a.parquet", "cuda/dt=d/hour=02/b.parquet"]
        );
        let hours = runtime
            .block_on(store.list_with_delimiter(Some(&Path::from("cuda/dt=d"))))
            .unwrap();
        assert_eq!(
            hours.common_prefixes,
            [
                Path::from("cuda/dt=d/hour=01"),
                Path::from("cuda/dt=d/hour=02")
            ]
        );
        assert!(hours.objects.is_empty());
        let data = runtime
            .block_on(async {
                store
                    .get(&Path::from("cuda/dt=d/hour=01/a.parquet"))
                    .await?
                    .bytes()
                    .await
            })
            .unwrap();
        assert_eq!(data, Bytes::from_static(b"x"));
        assert!(runtime
            .block_on(store.put(&Path::from("x"), PutPayload::from_static(b"y")))
            .is_err());
    }
}
