//! Small Parquet files read whole, in one request. The engine's own reader fetches a file's
//! footer first and then each range of column chunks it needs: two or three requests per file,
//! each a hop to a blocking thread for a local file or a round trip for an object in a bucket.
//! A fleet's lake is mostly small files (one per host, hour and kind; an XID file is a few
//! kilobytes, mostly footer), so the cost per request is most of the cost per file. Files up to
//! [`WHOLE_FILE_LIMIT`] are fetched with one request and every range is served from memory;
//! larger ones go through the engine's reader, which fetches only the columns asked for.
//!
//! A lake in a local folder is read in place, on the scan's own thread: object_store's local
//! store moves every read to a blocking thread and back, two thread wake-ups per file, which
//! for a file of a few KiB in the page cache cost more than the read (about a sixth of the CPU
//! of a scan of 24,000 XID files; docs/performance.md, "Fleet lake"). A slow disk then holds
//! one of the scan's partitions while it reads, which is what a scan of that disk waits for
//! anyway.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::ParquetFileReaderFactory;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures_util::future::{BoxFuture, FutureExt};
use object_store::path::Path;
use object_store::ObjectStore;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};

use crate::local::LocalStorage;
use crate::storage::LakeStorage;

/// Files up to this size are read whole.
pub const WHOLE_FILE_LIMIT: u64 = 1 << 20;

/// Makes a whole-file reader for small files and hands larger ones to `larger`.
#[derive(Debug)]
pub struct SmallFileReaderFactory {
    store: Arc<dyn ObjectStore>,
    local: Option<Arc<LocalStorage>>,
    larger: Arc<dyn ParquetFileReaderFactory>,
}

impl SmallFileReaderFactory {
    /// Small files of `store` read whole (from `local` in place, when the lake is a local
    /// folder), the others by `larger`.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        local: Option<LocalStorage>,
        larger: Arc<dyn ParquetFileReaderFactory>,
    ) -> Self {
        Self {
            store,
            local: local.map(Arc::new),
            larger,
        }
    }
}

impl ParquetFileReaderFactory for SmallFileReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> datafusion::error::Result<Box<dyn AsyncFileReader + Send>> {
        if file.object_meta.size > WHOLE_FILE_LIMIT {
            return self
                .larger
                .create_reader(partition_index, file, metadata_size_hint, metrics);
        }
        // No per-file metrics of our own: the engine keeps every file's metrics until the scan
        // ends (twenty counters with the file's name each), which over a fleet's day is a few
        // hundred bytes times tens of thousands of files for a number nobody reads here.
        Ok(Box::new(WholeFileReader {
            store: Arc::clone(&self.store),
            local: self.local.clone(),
            location: file.object_meta.location,
            bytes: None,
        }))
    }
}

/// One small file, fetched at the first request and served from memory after.
struct WholeFileReader {
    store: Arc<dyn ObjectStore>,
    local: Option<Arc<LocalStorage>>,
    location: Path,
    bytes: Option<Bytes>,
}

impl WholeFileReader {
    async fn whole(&mut self) -> Result<Bytes> {
        if let Some(bytes) = &self.bytes {
            return Ok(bytes.clone());
        }
        let fetched = if let Some(local) = &self.local {
            local
                .get(self.location.as_ref())
                .map_err(|err| ParquetError::External(Box::new(err)))?
        } else {
            self.fetch().await?
        };
        self.bytes = Some(fetched.clone());
        Ok(fetched)
    }

    /// The file from the store, in one request.
    async fn fetch(&self) -> Result<Bytes> {
        self.store
            .get_opts(&self.location, Default::default())
            .await
            .map_err(|err| ParquetError::External(Box::new(err)))?
            .bytes()
            .await
            .map_err(|err| ParquetError::External(Box::new(err)))
    }
}

/// `range` of `whole`; a range past its end (a footer that lies about its file) is an error,
/// never a panic.
fn slice(whole: &Bytes, range: Range<u64>) -> Result<Bytes> {
    let length = whole.len() as u64;
    if range.start > range.end || range.end > length {
        return Err(ParquetError::EOF(format!(
            "range {}..{} of a {length}-byte file",
            range.start, range.end
        )));
    }
    Ok(whole.slice(range.start as usize..range.end as usize))
}

impl AsyncFileReader for WholeFileReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        async move { slice(&self.whole().await?, range) }.boxed()
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, Result<Vec<Bytes>>> {
        async move {
            let whole = self.whole().await?;
            ranges.into_iter().map(|r| slice(&whole, r)).collect()
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>>> {
        let policy = options.map_or(PageIndexPolicy::Skip, |o| o.column_index_policy());
        async move {
            let whole = self.whole().await?;
            let metadata = ParquetMetaDataReader::new()
                .with_page_index_policy(policy)
                .parse_and_finish(&whole)?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_past_the_end_are_errors() {
        let whole = Bytes::from_static(b"0123456789");
        assert_eq!(slice(&whole, 2..5).unwrap(), Bytes::from_static(b"234"));
        assert_eq!(slice(&whole, 10..10).unwrap().len(), 0);
        assert!(slice(&whole, 8..11).is_err());
        assert!(slice(&whole, u64::MAX - 1..u64::MAX).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 5..2;
        assert!(slice(&whole, backwards).is_err());
    }
}
