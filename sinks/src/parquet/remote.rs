//! Parquet files on an S3-compatible object store (`path = "s3://bucket/prefix"`), through the
//! arrow-rs project's `object_store` crate. The address ([`S3Url`]) and the client
//! ([`ObjectStoreOptions`]: endpoint, region, retries, credentials from the AWS chain) are the
//! event model's (`gpuship_model::s3`), shared with the lake that reads the files.
//!
//! Each file is one PUT: S3 makes an object visible only when its whole body has arrived, so a
//! reader never sees a partial file, and a failed upload leaves nothing behind. Transient
//! failures are retried by the store with backoff; what still fails goes back to the sink, which
//! retries the rows and spools them while the outage lasts. This module must not block an async
//! task: it runs on the Parquet sink's blocking thread.

use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::runtime::Handle;

use super::destination::{Destination, FileError};

/// The address and the client settings are the event model's (the lake reads with the same).
pub use gpuship_model::s3::{ObjectStoreOptions, RemoteError, S3Url};

/// Files under `s3://bucket/prefix`.
pub struct ObjectStoreDestination {
    store: Arc<dyn ObjectStore>,
    url: S3Url,
    runtime: Handle,
}

impl ObjectStoreDestination {
    /// Uploads through `store` using `runtime` (the caller is a blocking thread).
    pub fn new(store: Arc<dyn ObjectStore>, url: S3Url, runtime: Handle) -> Self {
        Self {
            store,
            url,
            runtime,
        }
    }

    fn object_path(&self, key: &str) -> ObjectPath {
        if self.url.prefix.is_empty() {
            ObjectPath::from(key)
        } else {
            ObjectPath::from(format!("{}/{key}", self.url.prefix))
        }
    }
}

impl Destination for ObjectStoreDestination {
    fn persist(&self, key: &str, bytes: &bytes::Bytes) -> Result<String, FileError> {
        let path = self.object_path(key);
        let location = format!("s3://{}/{path}", self.url.bucket);
        let payload = object_store::PutPayload::from_bytes(bytes.clone());
        match self.runtime.block_on(self.store.put(&path, payload)) {
            Ok(_) => Ok(location),
            Err(source) => Err(FileError::Upload { location, source }),
        }
    }

    fn describe(&self) -> String {
        self.url.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_errors_print_the_request_url_redacted() {
        let error = FileError::Upload {
            location: "s3://gpu-lake/fleet/xid/part.parquet".into(),
            source: object_store::Error::Generic {
                store: "S3",
                source: "Error performing PUT https://user:wJalrXUtnFEMI@minio:9000/gpu-lake/x?X-Amz-Signature=deadbeef in 1s".into(),
            },
        };
        let shown = error.to_string();
        assert!(!shown.contains("wJalrXUtnFEMI"), "{shown}");
        assert!(!shown.contains("deadbeef"), "{shown}");
        assert!(
            shown.contains("PUT https://***@minio:9000/gpu-lake/x?X-Amz-Signature=***"),
            "{shown}"
        );
    }

    #[test]
    fn uploads_land_under_the_prefix_and_failures_name_the_location() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let url = S3Url::parse("s3://gpu-lake/fleet").unwrap().unwrap();
        let destination = ObjectStoreDestination::new(store.clone(), url, runtime.handle().clone());
        let location = destination
            .persist(
                "xid/dt=2026-11-22/hour=03/part-h-1.parquet",
                &bytes::Bytes::from_static(b"PAR1"),
            )
            .unwrap();
        assert_eq!(
            location,
            "s3://gpu-lake/fleet/xid/dt=2026-11-22/hour=03/part-h-1.parquet"
        );
        let got = runtime
            .block_on(async {
                store
                    .get(&ObjectPath::from(
                        "fleet/xid/dt=2026-11-22/hour=03/part-h-1.parquet",
                    ))
                    .await?
                    .bytes()
                    .await
            })
            .unwrap();
        assert_eq!(&got[..], b"PAR1");
    }
}
