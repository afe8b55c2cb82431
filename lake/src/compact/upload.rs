//! A `std::io::Write` that lands one object in the lake's store, for the Parquet writer: bytes
//! are sent in parts of `part_size` as they come (so a compacted file of hundreds of MB never
//! sits in memory whole), and the object appears only when [`Upload::finish`] completes it: an
//! S3 multipart upload, or on a local disk a staged file (`<name>#<n>`) renamed into place. A
//! file smaller than one part is sent in one PUT. Killed half-way, nothing appears under the
//! object's name.

use std::sync::Arc;

use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload};
use tokio::runtime::Runtime;

use super::phase::{Pauser, Phase};

/// One object being written.
pub struct Upload<'a> {
    store: Arc<dyn ObjectStore>,
    runtime: &'a Runtime,
    path: Path,
    part_size: usize,
    buffer: Vec<u8>,
    multipart: Option<Box<dyn MultipartUpload>>,
    /// Bytes taken so far.
    written: u64,
    /// The test hook, told when the first part is in the store.
    pauser: Pauser,
}

impl<'a> Upload<'a> {
    /// A new object at `path` in `store`, sent in parts of `part_size` bytes.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        runtime: &'a Runtime,
        path: Path,
        part_size: usize,
        pauser: Pauser,
    ) -> Self {
        Self {
            store,
            runtime,
            path,
            part_size,
            buffer: Vec::new(),
            multipart: None,
            written: 0,
            pauser,
        }
    }

    /// True once bytes have left for the store (a part was sent).
    #[cfg(test)]
    fn started(&self) -> bool {
        self.multipart.is_some()
    }

    fn send_part(&mut self) -> object_store::Result<()> {
        if self.multipart.is_none() {
            let upload = self
                .runtime
                .block_on(self.store.put_multipart(&self.path))?;
            self.multipart = Some(upload);
        }
        let part = PutPayload::from(std::mem::take(&mut self.buffer));
        if let Some(upload) = self.multipart.as_mut() {
            let sent = upload.put_part(part);
            self.runtime.block_on(sent)?;
        }
        self.pauser.reached(Phase::Writing);
        Ok(())
    }

    /// Completes the object: after this it is visible under its name. Returns its size.
    pub fn finish(mut self) -> object_store::Result<u64> {
        match self.multipart.take() {
            None => {
                let payload = PutPayload::from(std::mem::take(&mut self.buffer));
                self.runtime.block_on(self.store.put(&self.path, payload))?;
            }
            Some(upload) => {
                self.multipart = Some(upload);
                if !self.buffer.is_empty() {
                    self.send_part()?;
                }
                if let Some(mut upload) = self.multipart.take() {
                    self.runtime.block_on(upload.complete())?;
                }
            }
        }
        Ok(self.written)
    }
}

impl Drop for Upload<'_> {
    /// An upload that was not finished is aborted where the store can (S3 keeps the parts of
    /// an abandoned multipart upload until a lifecycle rule removes them).
    fn drop(&mut self) {
        if let Some(mut upload) = self.multipart.take() {
            let _ = self.runtime.block_on(upload.abort());
        }
    }
}

impl std::io::Write for Upload<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(data);
        self.written += data.len() as u64;
        if self.buffer.len() >= self.part_size {
            self.send_part().map_err(std::io::Error::other)?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use std::io::Write;

    #[test]
    fn objects_appear_whole_and_only_when_finished() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let exists = |name: &str| runtime.block_on(store.head(&Path::from(name))).is_ok();
        let mut big = Upload::new(
            store.clone(),
            &runtime,
            Path::from("big"),
            4,
            Pauser::default(),
        );
        big.write_all(b"0123456789").unwrap();
        assert!(
            big.started() && !exists("big"),
            "parts sent, object not there yet"
        );
        assert_eq!(big.finish().unwrap(), 10);
        let mut small = Upload::new(
            store.clone(),
            &runtime,
            Path::from("small"),
            100,
            Pauser::default(),
        );
        small.write_all(b"abc").unwrap();
        assert!(!small.started());
        assert_eq!(small.finish().unwrap(), 3);
        let abandoned = {
            let mut u = Upload::new(
                store.clone(),
                &runtime,
                Path::from("gone"),
                2,
                Pauser::default(),
            );
            u.write_all(b"xyz").unwrap();
            u.started()
        };
        assert!(abandoned && !exists("gone"));
        let get = |name: &str| {
            runtime.block_on(async {
                store
                    .get(&Path::from(name))
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap()
            })
        };
        assert_eq!(&get("big")[..], b"0123456789");
        assert_eq!(&get("small")[..], b"abc");
    }
}
