//! The sink's own file encoder (`writer_properties`, `COUNTED_WHILE_CONSTANT`) on `cuda` rows:
//! which columns qualify for constant chunks in every kind, and that the counted columns of its
//! files keep their values, statistics and page index.

use std::sync::Arc;

use arrow_array::RecordBatch;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::statistics::Statistics;

use super::same_file_tests::read;
use crate::parquet::encoding_tests::varied_cuda_batches;
use crate::parquet::{file_encoder, ParquetSinkConfig};
use crate::EventKind;

/// `batches` through the sink's encoder of `cuda` files: the fields counted at the end, and the
/// file's metadata once its rows have read back exactly.
fn through_the_sinks_encoder(batches: &[RecordBatch]) -> (Vec<String>, Arc<ParquetMetaData>) {
    let config = ParquetSinkConfig::with_path("/unused");
    let schema = crate::schema::schema_for(EventKind::Cuda);
    let mut encoder =
        file_encoder(&config, EventKind::Cuda, schema.clone()).expect("the sink's encoder");
    assert!(
        encoder.counted_fields().is_empty(),
        "nothing counted before rows"
    );
    for batch in batches {
        encoder.write(batch).expect("the encoder takes the batch");
    }
    let counted = encoder
        .counted_fields()
        .iter()
        .map(|f| f.to_string())
        .collect();
    encoder.finish().expect("finishes");
    let (read_back, metadata) = read(std::mem::take(encoder.inner_mut()));
    let written = arrow_select::concat::concat_batches(&schema, batches).expect("concat");
    let read_back =
        arrow_select::concat::concat_batches(&read_back[0].schema(), &read_back).expect("concat");
    assert_eq!(read_back.num_rows(), written.num_rows());
    for (index, field) in schema.fields().iter().enumerate() {
        assert_eq!(
            read_back.column(index).to_data(),
            written.column(index).to_data(),
            "column {}",
            field.name()
        );
    }
    (counted, metadata)
}

/// Checks `name`'s chunks hold `value` in every row: values, statistics (when `statistics`), and
/// a page index of pages of 20,000 rows, some row group having several.
fn assert_constant_chunks(metadata: &ParquetMetaData, name: &str, value: &str, statistics: bool) {
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
        let page_index = metadata.page_index_for_row_group(group_index);
        let offsets = page_index.offset_index(leaf).expect("an offset index");
        if statistics {
            let Some(Statistics::ByteArray(chunk_statistics)) = chunk.statistics() else {
                panic!("{name} keeps its statistics");
            };
            assert_eq!(
                chunk_statistics.min_opt().map(|v| v.data()),
                Some(value.as_bytes())
            );
            assert_eq!(
                chunk_statistics.max_opt().map(|v| v.data()),
                Some(value.as_bytes())
            );
            assert_eq!(chunk_statistics.null_count_opt(), Some(0));
            let index = page_index
                .column_index(leaf)
                .expect("a column index")
                .clone();
            let ColumnIndexMetaData::BYTE_ARRAY(index) = index else {
                panic!("{name} has a byte-array column index");
            };
            assert_eq!(index.num_pages() as usize, offsets.page_locations().len());
            for page in 0..index.num_pages() as usize {
                assert_eq!(index.min_value(page), Some(value.as_bytes()));
                assert_eq!(index.max_value(page), Some(value.as_bytes()));
            }
        } else {
            assert!(chunk.statistics().is_none(), "{name} has no statistics");
            assert!(
                page_index.column_index(leaf).is_none(),
                "{name} has no column index"
            );
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

#[test]
fn the_sinks_files_keep_host_and_boot_id_statistics_and_page_index() {
    // Calls on two GPUs and on none: the GPU's columns go back to parquet-rs.
    let batches = varied_cuda_batches(3, 50_000, false);
    let (counted, metadata) = through_the_sinks_encoder(&batches);
    assert_eq!(counted, ["host", "boot_id"]);
    let identity = crate::test_support::identity();
    assert_constant_chunks(&metadata, "host", &identity.host, true);
    assert_constant_chunks(&metadata, "boot_id", &identity.boot_id, true);
}

#[test]
fn one_process_on_one_gpu_has_its_gpu_columns_counted_too() {
    let batches = varied_cuda_batches(3, 50_000, true);
    let (counted, metadata) = through_the_sinks_encoder(&batches);
    assert_eq!(counted, ["host", "boot_id", "gpu_uuid", "pci_bus_id"]);
    let gpu = crate::test_support::listed_gpu();
    assert_constant_chunks(&metadata, "gpu_uuid", &gpu.uuid, false);
    let bus_id = gpu
        .pci_bus_id
        .as_deref()
        .expect("the listed GPU has a bus id");
    assert_constant_chunks(&metadata, "pci_bus_id", bus_id, false);
}

#[test]
fn every_kinds_host_boot_id_and_gpu_qualify_for_constant_chunks() {
    let config = ParquetSinkConfig::with_path("/unused");
    for &kind in EventKind::ALL {
        let schema = crate::schema::schema_for(kind);
        let encoder = file_encoder(&config, kind, schema.clone()).expect("the sink's encoder");
        let expected: Vec<&str> = schema
            .fields()
            .iter()
            .map(|field| field.name().as_str())
            .filter(|name| ["host", "boot_id", "gpu_uuid", "pci_bus_id"].contains(name))
            .collect();
        assert!(expected.starts_with(&["host", "boot_id"]), "{kind:?}");
        assert_eq!(
            encoder.qualifying_fields(),
            expected,
            "{kind:?}: these columns must stay uncompressed with a dictionary"
        );
    }
    let cuda = file_encoder(
        &config,
        EventKind::Cuda,
        crate::schema::schema_for(EventKind::Cuda),
    )
    .expect("the sink's encoder");
    assert_eq!(
        cuda.qualifying_fields().len(),
        4,
        "the cuda table has a GPU"
    );
}
