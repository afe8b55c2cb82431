//! The file encoder against parquet-rs's `ArrowWriter`: where parquet-rs splits pages at the
//! same rows as the constant chunks (it checks its page limit after every row of a required
//! column here, and after each page's worth of an optional one), the files are equal byte for
//! byte, whether a column stays constant, changes between batches or within one; elsewhere every
//! value, statistic and histogram is.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;

use super::FileEncoder;

const BOOT_ID: &str = "0f3c1e9a-8d1b-4b7e-9a55-3c2d1e0f9a8b";
const GPU: &str = "GPU-5b1f4c7e-2d3a-4f1b-9c8e-0a1b2c3d4e5f";
/// The columns counted while constant: two required, two optional (`comm` is never constant in
/// these rows, so it always goes back to parquet-rs).
const COUNTED: [&str; 4] = ["host", "boot_id", "comm", "gpu"];

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("time_ns", DataType::Int64, false),
        Field::new("host", DataType::Utf8, false),
        Field::new("boot_id", DataType::Utf8, false),
        Field::new("comm", DataType::Utf8, true),
        Field::new("gpu", DataType::Utf8, true),
    ]))
}

/// `rows` rows whose host is `hosts[row % hosts.len()]`, counting on from `first`, all on
/// [`GPU`].
fn batch(first: i64, rows: usize, hosts: &[&str]) -> RecordBatch {
    with_gpus(batch_without_gpu(first, rows, hosts), &[Some(GPU)])
}

/// `batch` with its rows' GPU `gpus[row % gpus.len()]`.
fn with_gpus(batch: RecordBatch, gpus: &[Option<&str>]) -> RecordBatch {
    let gpu: StringArray = (0..batch.num_rows())
        .map(|row| gpus[row % gpus.len()])
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[4] = Arc::new(gpu);
    RecordBatch::try_new(schema(), columns).expect("columns match the schema")
}

fn batch_without_gpu(first: i64, rows: usize, hosts: &[&str]) -> RecordBatch {
    let time: Int64Array = (first..first + rows as i64).collect();
    let host = StringArray::from_iter_values((0..rows).map(|row| hosts[row % hosts.len()]));
    let boot = StringArray::from_iter_values(std::iter::repeat_n(BOOT_ID, rows));
    let comm: StringArray = (0..rows)
        .map(|row| (row % 3 != 0).then_some(if row % 2 == 0 { "python3" } else { "worker" }))
        .collect();
    let gpu = StringArray::new_null(rows);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(time),
        Arc::new(host),
        Arc::new(boot),
        Arc::new(comm),
        Arc::new(gpu),
    ];
    RecordBatch::try_new(schema(), columns).expect("columns match the schema")
}

/// Settings under which parquet-rs closes a data page at exactly the row limit, as the
/// constant chunk does: it checks the limit after every `write_batch_size` rows.
fn exact_pages() -> WriterPropertiesBuilder {
    WriterProperties::builder()
        .set_write_batch_size(1)
        .set_data_page_row_count_limit(300)
        .set_max_row_group_row_count(Some(1_200))
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_column_compression(ColumnPath::from("host"), Compression::UNCOMPRESSED)
        .set_column_compression(ColumnPath::from("boot_id"), Compression::UNCOMPRESSED)
        .set_column_compression(ColumnPath::from("gpu"), Compression::UNCOMPRESSED)
        .set_column_compression(ColumnPath::from("comm"), Compression::UNCOMPRESSED)
}

fn with_arrow_writer(props: WriterProperties, batches: &[RecordBatch]) -> Vec<u8> {
    let mut writer = ArrowWriter::try_new(Vec::new(), schema(), Some(props)).expect("writer");
    for batch in batches {
        writer.write(batch).expect("arrow writer takes the batch");
    }
    writer.into_inner().expect("arrow writer finishes")
}

fn with_file_encoder(props: WriterProperties, batches: &[RecordBatch]) -> Vec<u8> {
    let mut encoder = FileEncoder::try_new(schema(), props, &COUNTED).expect("encoder");
    for batch in batches {
        encoder.write(batch).expect("encoder takes the batch");
    }
    encoder.finish().expect("encoder finishes");
    std::mem::take(encoder.inner_mut())
}

/// The rows of an encoded file and its metadata, with the page index where it has one.
pub(super) fn read(bytes: Vec<u8>) -> (Vec<RecordBatch>, Arc<ParquetMetaData>) {
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
    let builder =
        ParquetRecordBatchReaderBuilder::try_new_with_options(Bytes::from(bytes), options)
            .expect("a readable file");
    let metadata = builder.metadata().clone();
    let batches = builder
        .build()
        .expect("a reader")
        .collect::<Result<Vec<_>, _>>()
        .expect("every batch reads");
    (batches, metadata)
}

fn assert_same_file(props: WriterProperties, batches: &[RecordBatch]) {
    let expected = with_arrow_writer(props.clone(), batches);
    let encoded = with_file_encoder(props, batches);
    assert_eq!(encoded.len(), expected.len(), "file sizes differ");
    assert!(encoded == expected, "the files differ in their bytes");
    let (read_back, _) = read(encoded);
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(
        read_back.iter().map(RecordBatch::num_rows).sum::<usize>(),
        rows
    );
    let written = arrow_select::concat::concat_batches(&schema(), batches).expect("concat");
    let read_back = arrow_select::concat::concat_batches(&schema(), &read_back).expect("concat");
    assert_eq!(read_back, written);
}

/// Batches of `sizes` rows on one host, their GPU `gpus[row % gpus.len()]`.
fn batches_of(sizes: &[usize], gpus: &[Option<&str>]) -> Vec<RecordBatch> {
    let mut first = 0;
    sizes
        .iter()
        .map(|&rows| {
            let batch = with_gpus(batch(first, rows, &["gpu-node-017"]), gpus);
            first += rows as i64;
            batch
        })
        .collect()
}

/// The settings the byte-for-byte tests run under: pages of 300 rows, row groups of 1,200 or
/// 900 (whole pages, so that parquet-rs's pages of an optional column split where the chunk's
/// do) or unbounded, statistics per page, per chunk or none, with and without an offset index.
fn settings() -> Vec<WriterProperties> {
    let chunk_only = exact_pages()
        .set_column_statistics_enabled(ColumnPath::from("host"), EnabledStatistics::Chunk)
        .set_column_statistics_enabled(ColumnPath::from("boot_id"), EnabledStatistics::None)
        .set_column_statistics_enabled(ColumnPath::from("gpu"), EnabledStatistics::Chunk)
        .build();
    let no_statistics = exact_pages()
        .set_column_statistics_enabled(ColumnPath::from("gpu"), EnabledStatistics::None)
        .set_max_row_group_row_count(Some(900))
        .build();
    let unbounded = exact_pages()
        .set_offset_index_disabled(true)
        .set_max_row_group_row_count(None)
        .build();
    vec![exact_pages().build(), chunk_only, no_statistics, unbounded]
}

#[test]
fn constant_columns_give_the_same_file_as_parquet_rs() {
    // Required columns (`host`, `boot_id`): parquet-rs checks its page limit after every row
    // here, so any batch sizes: row groups split across batches, a batch of one row, batches
    // shorter than one RLE group (8). The GPU is unknown, so parquet-rs writes it.
    let any_sizes = batches_of(&[1, 7, 8, 100, 999, 2_500, 3, 300, 301], &[None]);
    // The optional column (`gpu`): parquet-rs checks its page limit after each page's worth of
    // a write's rows when all are set, so batches of whole pages give it the chunk's pages.
    let whole_pages = batches_of(&[300, 900, 1_500, 600, 300], &[Some(GPU)]);
    for batches in [any_sizes, whole_pages] {
        for props in settings() {
            assert_same_file(props, &batches);
        }
    }
}

#[test]
fn a_value_that_changes_gives_the_same_file_as_parquet_rs() {
    // Batches of whole pages (300 rows), so the optional column's pages split where
    // parquet-rs splits them.
    let one = batch(0, 1_200, &["node-a"]);
    let other = batch(0, 600, &["node-b"]);
    let mixed = batch(0, 300, &["node-a", "node-b"]);
    let again = batch(0, 900, &["node-a"]);
    let empty = batch(0, 300, &[""]);
    // A value long enough that its statistics would be truncated (65 bytes) is encoded by
    // parquet-rs: the file is the same either way.
    let long_name = "n".repeat(65);
    let long = batch(0, 600, &[long_name.as_str()]);
    // The optional column: another GPU, some rows without one, none at all, then set again.
    let other_gpu = with_gpus(batch(0, 600, &["node-a"]), &[Some("GPU-other")]);
    let some_unknown = with_gpus(batch(0, 300, &["node-a"]), &[Some(GPU), None]);
    let none_known = with_gpus(batch(0, 600, &["node-a"]), &[None]);
    for batches in [
        vec![one.clone(), other_gpu.clone(), one.clone()],
        vec![one.clone(), some_unknown.clone(), one.clone()],
        vec![none_known.clone(), one.clone(), none_known],
        vec![some_unknown, other_gpu],
        vec![one.clone(), other.clone()],
        vec![one.clone(), mixed.clone(), again.clone()],
        vec![mixed, one.clone()],
        vec![empty.clone(), one.clone(), empty],
        vec![long.clone(), one, long],
    ] {
        for props in settings() {
            assert_same_file(props, &batches);
        }
    }
}

#[test]
fn batches_of_any_size_differ_from_parquet_rs_only_in_where_pages_split() {
    // The sink's batch sizes and parquet-rs's default write batch: parquet-rs closes a page at
    // the first check past the limit, the constant chunk at the limit itself.
    let props = WriterProperties::builder()
        .set_data_page_row_count_limit(300)
        .set_max_row_group_row_count(Some(1_000))
        .set_column_compression(ColumnPath::from("host"), Compression::UNCOMPRESSED)
        .set_column_compression(ColumnPath::from("boot_id"), Compression::UNCOMPRESSED)
        .set_column_compression(ColumnPath::from("gpu"), Compression::UNCOMPRESSED)
        .build();
    let batches = batches_of(&[1, 7, 8, 100, 999, 2_500, 3, 300, 301], &[Some(GPU)]);
    let expected = with_arrow_writer(props.clone(), &batches);
    let encoded = with_file_encoder(props, &batches);
    let (expected_rows, expected) = read(expected);
    let (encoded_rows, encoded) = read(encoded);
    assert_eq!(encoded_rows, expected_rows);
    assert_eq!(encoded.num_row_groups(), expected.num_row_groups());
    let mut split_elsewhere = 0;
    for (group, (ours, theirs)) in encoded
        .row_groups()
        .iter()
        .zip(expected.row_groups())
        .enumerate()
    {
        assert_eq!(ours.num_rows(), theirs.num_rows());
        for (leaf, (ours, theirs)) in ours.columns().iter().zip(theirs.columns()).enumerate() {
            let name = ours.column_path().string();
            assert_eq!(ours.num_values(), theirs.num_values(), "{name}");
            assert_eq!(ours.statistics(), theirs.statistics(), "{name}");
            assert_eq!(ours.compression(), theirs.compression(), "{name}");
            assert_eq!(ours.encodings_mask(), theirs.encodings_mask(), "{name}");
            assert_eq!(
                ours.unencoded_byte_array_data_bytes(),
                theirs.unencoded_byte_array_data_bytes(),
                "{name}"
            );
            assert_eq!(
                ours.definition_level_histogram(),
                theirs.definition_level_histogram(),
                "{name}"
            );
            let first_rows = |metadata: &ParquetMetaData| -> Vec<i64> {
                metadata
                    .page_index_for_row_group(group)
                    .offset_index(leaf)
                    .expect("an offset index")
                    .page_locations()
                    .iter()
                    .map(|page| page.first_row_index)
                    .collect()
            };
            if ["host", "boot_id", "gpu"].contains(&name.as_str()) {
                let exact: Vec<i64> = (0..ours.num_values()).step_by(300).collect();
                assert_eq!(
                    first_rows(&encoded),
                    exact,
                    "{name}: pages of exactly 300 rows"
                );
                split_elsewhere += usize::from(first_rows(&expected) != exact);
            } else {
                assert_eq!(first_rows(&encoded), first_rows(&expected), "{name}");
            }
        }
    }
    assert!(
        split_elsewhere > 0,
        "parquet-rs split some page past the limit"
    );
}

#[test]
fn a_null_in_a_required_column_is_an_error_as_in_parquet_rs() {
    let good = batch(0, 10, &["node-a"]);
    let host: StringArray = [Some("node-a"), None, Some("node-a")].into_iter().collect();
    let mut columns = good.slice(0, 3).columns().to_vec();
    columns[1] = Arc::new(host);
    // Built without validation, as a buggy upstream might; the writers must refuse it.
    let bad = unsafe { RecordBatch::new_unchecked(schema(), columns, 3) };
    let mut writer =
        ArrowWriter::try_new(Vec::new(), schema(), Some(exact_pages().build())).expect("writer");
    writer.write(&good).expect("good rows");
    assert!(writer.write(&bad).is_err());
    let mut encoder =
        FileEncoder::try_new(schema(), exact_pages().build(), &COUNTED).expect("encoder");
    encoder.write(&good).expect("good rows");
    let error = encoder.write(&bad).expect_err("a null host is refused");
    assert!(error.to_string().contains("null"), "{error}");
}

#[test]
fn a_column_without_a_dictionary_or_compressed_is_encoded_by_parquet_rs() {
    let compressed = exact_pages()
        .set_column_compression(
            ColumnPath::from("host"),
            Compression::ZSTD(ZstdLevel::default()),
        )
        .set_column_dictionary_enabled(ColumnPath::from("boot_id"), false)
        .build();
    let encoder = FileEncoder::try_new(schema(), compressed.clone(), &["host", "boot_id", "comm"])
        .expect("encoder");
    assert_eq!(encoder.qualifying_fields(), ["comm"]);
    let batches = [batch(0, 600, &["node-a"]), batch(600, 900, &["node-a"])];
    assert_same_file(compressed, &batches);
    let bytes_limit = exact_pages().set_max_row_group_bytes(Some(1 << 20)).build();
    let error = FileEncoder::try_new(schema(), bytes_limit, &["host"])
        .err()
        .expect("a byte limit is the caller's");
    assert!(error.to_string().contains("max_row_group_bytes"), "{error}");
}
