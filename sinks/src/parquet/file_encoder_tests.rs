//! Tests of the file encoder and its constant chunks: with parquet-rs checking its page limit
//! after every row (`write_batch_size` 1), the encoder's files equal `ArrowWriter`'s byte for
//! byte, whether a column stays constant, changes between batches or within one; with the sink's
//! own settings the values, statistics and page index read back as written.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnPath;

use super::file_encoder::FileEncoder;
use super::{file_encoder, ParquetSinkConfig};
use crate::EventKind;

const BOOT_ID: &str = "0f3c1e9a-8d1b-4b7e-9a55-3c2d1e0f9a8b";

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("time_ns", DataType::Int64, false),
        Field::new("host", DataType::Utf8, false),
        Field::new("boot_id", DataType::Utf8, false),
        Field::new("comm", DataType::Utf8, true),
    ]))
}

/// `rows` rows whose host is `hosts[row % hosts.len()]`, counting on from `first`.
fn batch(first: i64, rows: usize, hosts: &[&str]) -> RecordBatch {
    let time: Int64Array = (first..first + rows as i64).collect();
    let host = StringArray::from_iter_values((0..rows).map(|row| hosts[row % hosts.len()]));
    let boot = StringArray::from_iter_values(std::iter::repeat_n(BOOT_ID, rows));
    let comm: StringArray = (0..rows)
        .map(|row| (row % 3 != 0).then_some(if row % 2 == 0 { "python3" } else { "worker" }))
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(time),
        Arc::new(host),
        Arc::new(boot),
        Arc::new(comm),
    ];
    RecordBatch::try_new(schema(), columns).expect("columns match the schema")
}

/// Settings under which parquet-rs closes a data page at exactly the row limit, as the
/// constant chunk does: it checks the limit after every `write_batch_size` rows.
fn exact_pages() -> WriterPropertiesBuilder {
    WriterProperties::builder()
        .set_write_batch_size(1)
        .set_data_page_row_count_limit(300)
        .set_max_row_group_row_count(Some(1_000))
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_column_compression(ColumnPath::from("host"), Compression::UNCOMPRESSED)
        .set_column_compression(ColumnPath::from("boot_id"), Compression::UNCOMPRESSED)
}

fn with_arrow_writer(props: WriterProperties, batches: &[RecordBatch]) -> Vec<u8> {
    let mut writer = ArrowWriter::try_new(Vec::new(), schema(), Some(props)).expect("writer");
    for batch in batches {
        writer.write(batch).expect("arrow writer takes the batch");
    }
    writer.into_inner().expect("arrow writer finishes")
}

fn with_file_encoder(props: WriterProperties, batches: &[RecordBatch]) -> Vec<u8> {
    let mut encoder = FileEncoder::try_new(schema(), props, &["host", "boot_id"]).expect("encoder");
    for batch in batches {
        encoder.write(batch).expect("encoder takes the batch");
    }
    encoder.finish().expect("encoder finishes");
    std::mem::take(encoder.inner_mut())
}

fn read(bytes: Vec<u8>) -> (Vec<RecordBatch>, Arc<ParquetMetaData>) {
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

#[test]
fn constant_columns_give_the_same_file_as_parquet_rs() {
    let host = ["gpu-node-017"];
    // Row groups of 1,000 rows split across batches; pages of 300, the last one short; a
    // batch of one row and batches shorter than one RLE group (8).
    let sizes = [1, 7, 8, 100, 999, 2_500, 3, 300, 301];
    let mut first = 0;
    let batches: Vec<_> = sizes
        .iter()
        .map(|&rows| {
            let batch = batch(first, rows, &host);
            first += rows as i64;
            batch
        })
        .collect();
    assert_same_file(exact_pages().build(), &batches);
    // Statistics for the chunk only, and none.
    let chunk_only = exact_pages()
        .set_column_statistics_enabled(ColumnPath::from("host"), EnabledStatistics::Chunk)
        .set_column_statistics_enabled(ColumnPath::from("boot_id"), EnabledStatistics::None)
        .build();
    assert_same_file(chunk_only, &batches);
    // No offset index; one row group for everything.
    let unbounded = exact_pages()
        .set_offset_index_disabled(true)
        .set_max_row_group_row_count(None)
        .build();
    assert_same_file(unbounded, &batches);
}

#[test]
fn a_value_that_changes_gives_the_same_file_as_parquet_rs() {
    let one = batch(0, 1_200, &["node-a"]);
    let other = batch(1_200, 500, &["node-b"]);
    let mixed = batch(1_700, 40, &["node-a", "node-b"]);
    let again = batch(1_740, 900, &["node-a"]);
    let empty = batch(2_640, 20, &[""]);
    // A value long enough that its statistics would be truncated (65 bytes) is encoded by
    // parquet-rs: the file is the same either way.
    let long_name = "n".repeat(65);
    let long = batch(2_660, 700, &[long_name.as_str()]);
    for batches in [
        vec![one.clone(), other.clone()],
        vec![one.clone(), mixed.clone(), again.clone()],
        vec![mixed, one.clone()],
        vec![empty.clone(), one.clone(), empty],
        vec![long.clone(), one, long],
    ] {
        assert_same_file(exact_pages().build(), &batches);
    }
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
    let mut encoder = FileEncoder::try_new(schema(), exact_pages().build(), &["host", "boot_id"])
        .expect("encoder");
    encoder.write(&good).expect("good rows");
    let error = encoder.write(&bad).expect_err("a null host is refused");
    assert!(error.to_string().contains("null"), "{error}");
}

#[test]
fn the_sinks_files_keep_constant_columns_statistics_and_page_index() {
    let config = ParquetSinkConfig::with_path("/unused");
    let mut encoder = file_encoder(
        &config,
        EventKind::Cuda,
        crate::schema::schema_for(EventKind::Cuda),
    )
    .expect("the sink's encoder");
    assert_eq!(
        encoder.counted_fields(),
        Vec::<&str>::new(),
        "nothing counted before rows"
    );
    let batches = super::encoding_tests::varied_cuda_batches(3, 50_000);
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    for batch in &batches {
        encoder.write(batch).expect("the encoder takes the batch");
    }
    assert_eq!(encoder.counted_fields(), ["host", "boot_id"]);
    encoder.finish().expect("finishes");
    let (read_back, metadata) = read(std::mem::take(encoder.inner_mut()));
    assert_eq!(
        read_back.iter().map(RecordBatch::num_rows).sum::<usize>(),
        rows
    );
    let schema = batches[0].schema();
    let written = arrow_select::concat::concat_batches(&schema, &batches).expect("concat");
    let read_back =
        arrow_select::concat::concat_batches(&read_back[0].schema(), &read_back).expect("concat");
    for (index, field) in schema.fields().iter().enumerate() {
        assert_eq!(
            read_back.column(index).to_data(),
            written.column(index).to_data(),
            "column {}",
            field.name()
        );
    }
    let identity = crate::test_support::identity();
    for (name, value) in [
        ("host", identity.host.as_ref()),
        ("boot_id", identity.boot_id.as_ref()),
    ] {
        let leaf = metadata
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|column| column.name() == name)
            .expect("the column is in the file");
        let mut pages = 0;
        for (group_index, group) in metadata.row_groups().iter().enumerate() {
            let chunk = group.column(leaf);
            assert_eq!(chunk.num_values(), group.num_rows(), "{name}");
            let Some(Statistics::ByteArray(statistics)) = chunk.statistics() else {
                panic!("{name} keeps its statistics");
            };
            assert_eq!(
                statistics.min_opt().map(|v| v.data()),
                Some(value.as_bytes())
            );
            assert_eq!(
                statistics.max_opt().map(|v| v.data()),
                Some(value.as_bytes())
            );
            assert_eq!(statistics.null_count_opt(), Some(0));
            let page_index = metadata.page_index_for_row_group(group_index);
            let index = page_index
                .column_index(leaf)
                .expect("a column index")
                .clone();
            let ColumnIndexMetaData::BYTE_ARRAY(index) = index else {
                panic!("{name} has a byte-array column index");
            };
            let offsets = page_index.offset_index(leaf).expect("an offset index");
            assert_eq!(index.num_pages() as usize, offsets.page_locations().len());
            for page in 0..index.num_pages() as usize {
                assert_eq!(index.min_value(page), Some(value.as_bytes()));
                assert_eq!(index.max_value(page), Some(value.as_bytes()));
            }
            let first_rows: Vec<i64> = offsets
                .page_locations()
                .iter()
                .map(|page| page.first_row_index)
                .collect();
            let expected: Vec<i64> = (0..group.num_rows()).step_by(20_000).collect();
            assert_eq!(first_rows, expected, "{name}: pages of 20,000 rows");
            pages += first_rows.len();
        }
        assert!(
            pages > metadata.num_row_groups(),
            "{name}: some row group has several pages"
        );
    }
}

#[test]
fn every_kinds_host_and_boot_id_qualify_for_constant_chunks() {
    let config = ParquetSinkConfig::with_path("/unused");
    for &kind in EventKind::ALL {
        let encoder = file_encoder(&config, kind, crate::schema::schema_for(kind))
            .expect("the sink's encoder");
        assert_eq!(
            encoder.qualifying_fields(),
            ["host", "boot_id"],
            "{kind:?}: host and boot_id must stay uncompressed with a dictionary"
        );
    }
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
    // `comm` is nullable, so it never qualifies either.
    assert_eq!(encoder.qualifying_fields(), Vec::<&str>::new());
    let batches = [batch(0, 700, &["node-a"]), batch(700, 700, &["node-a"])];
    assert_same_file(compressed, &batches);
    let bytes_limit = exact_pages().set_max_row_group_bytes(Some(1 << 20)).build();
    let error = FileEncoder::try_new(schema(), bytes_limit, &["host"])
        .err()
        .expect("a byte limit is the caller's");
    assert!(error.to_string().contains("max_row_group_bytes"), "{error}");
}
