//! One Parquet object of the lake to record batches, keeping only the rows of a range. The
//! `time` column (microseconds, UTC) decides; files written by other tools that only have
//! `time_ns` are read through that.

use std::panic::AssertUnwindSafe;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMicrosecondType};
use arrow_array::{BooleanArray, RecordBatch};
use arrow_select::filter::filter_record_batch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::range::TimeRange;

/// Why a file's rows could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// Not Parquet, truncated, or not decodable.
    #[error("not readable as Parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// A batch could not be decoded or filtered.
    #[error("decoding rows: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// The Parquet decoder panicked on this file (a damaged file it does not check for).
    #[error("not readable as Parquet: the decoder failed on a damaged file")]
    DecoderPanicked,
    /// No column says when the rows happened.
    #[error("no `time` (Timestamp µs) or `time_ns` (Int64) column")]
    NoTime,
}

/// The rows of `data` (a whole Parquet file) that fall inside `range`, as batches; batches
/// left empty by the filter are not returned.
pub fn read_rows(data: Bytes, range: &TimeRange) -> Result<Vec<RecordBatch>, TableError> {
    // The Parquet reader panics on some damaged files (seen: a negative column chunk offset in
    // the footer) instead of failing. Nothing it touched is used after a panic.
    std::panic::catch_unwind(AssertUnwindSafe(|| decode_rows(data, range)))
        .unwrap_or(Err(TableError::DecoderPanicked))
}

fn decode_rows(data: Bytes, range: &TimeRange) -> Result<Vec<RecordBatch>, TableError> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(data)?.build()?;
    let mut batches = Vec::new();
    for batch in reader {
        let batch = batch?;
        let keep = in_range(&batch, range)?;
        if keep.true_count() == batch.num_rows() {
            batches.push(batch);
        } else if keep.true_count() > 0 {
            batches.push(filter_record_batch(&batch, &keep)?);
        }
    }
    Ok(batches)
}

/// Which rows of `batch` fall inside `range`.
fn in_range(batch: &RecordBatch, range: &TimeRange) -> Result<BooleanArray, TableError> {
    if let Some(time) = batch
        .column_by_name("time")
        .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>())
    {
        return Ok(time
            .iter()
            .map(|t| Some(t.is_some_and(|t| range.contains_micros(t))))
            .collect());
    }
    if let Some(time_ns) = batch
        .column_by_name("time_ns")
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
    {
        return Ok(time_ns
            .iter()
            .map(|t| Some(t.is_some_and(|t| range.contains_micros(t.div_euclid(1_000)))))
            .collect());
    }
    Err(TableError::NoTime)
}

/// Number of rows in `batches`.
pub fn row_count(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::views::fixtures::from_sinks;
    use gpuship_sinks::schema::{CudaBatchBuilder, CudaRow, HostIdentity};
    use parquet::arrow::ArrowWriter;

    /// A `cuda` Parquet file holding one call at each of `times_ns`.
    pub(crate) fn cuda_file(times_ns: &[i64]) -> Vec<u8> {
        let mut builder = CudaBatchBuilder::new(
            HostIdentity {
                host: "node-a".into(),
                boot_id: "boot".into(),
            },
            times_ns.len(),
        );
        for &time_ns in times_ns {
            builder.append(&CudaRow {
                time_ns,
                pid: 10,
                tid: 11,
                comm: "train",
                function: "cuMemAlloc_v2",
                duration_ns: 1_000,
                result: 0,
                result_name: "CUDA_SUCCESS",
                bytes: Some(64),
                device_ptr: Some(0x1000),
                stream: None,
                launch: None,
                workload: None,
                objects: Default::default(),
            });
        }
        let batch = from_sinks(&builder.finish().unwrap());
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        out
    }

    #[test]
    fn keeps_only_the_rows_of_the_range() {
        let base = 1_795_319_000_000_000_000i64; // 2026-11-22T03:43:20Z
        let data = cuda_file(&[
            base - 1_000,
            base,
            base + 5_000_000_000,
            base + 10_000_000_000,
        ]);
        let since = chrono::DateTime::from_timestamp_nanos(base);
        let range = TimeRange::new(since, since + chrono::Duration::seconds(10)).unwrap();
        let batches = read_rows(Bytes::from(data), &range).unwrap();
        assert_eq!(row_count(&batches), 2, "start inclusive, end exclusive");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let range = TimeRange::parse("1h", None, chrono::Utc::now()).unwrap();
        let err = read_rows(Bytes::from_static(b"PAR1 not really"), &range).unwrap_err();
        assert!(matches!(err, TableError::Parquet(_)), "{err}");
    }
}
