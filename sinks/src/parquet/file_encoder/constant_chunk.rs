//! A column chunk whose every row holds the same string, encoded in a few bytes without looking
//! at the rows.
//!
//! `host` and `boot_id` are the same in every row an agent writes, and a GPU's UUID and bus id in
//! every row of a process on one GPU, yet parquet-rs's column writer hashes and looks up each
//! row's value in its dictionary (13-41 ns a row each, `benches/column_cost.rs`). The chunk it
//! ends up with is always the same shape: a dictionary page of one value and data pages whose
//! indices are one run of zeros. This module writes that chunk directly for any row count, with
//! the metadata, statistics, page index and size statistics parquet-rs would write for it, so the
//! cost no longer depends on the number of rows. Its data pages hold exactly the page row limit
//! (the last fewer); parquet-rs closes a page at its first check past the limit, which depends on
//! how the rows were handed to it. Where the two split pages at the same rows, the files are
//! equal byte for byte (`same_file_tests.rs`).
//!
//! Only plain cases qualify ([`ConstantChunkColumn::new`]): an unnested byte-array column,
//! required or optional (an optional one's rows must all be set: its definition levels are then
//! one run of ones), with a dictionary, uncompressed, data pages v1, no bloom filter, no
//! statistics in page headers, and a value short enough that no statistic is truncated.
//! Anything else is written by parquet-rs as before.

use bytes::Bytes;
use parquet::basic::{BoundaryOrder, Compression, Encoding, PageType, Type as PhysicalType};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::data_type::ByteArray;
use parquet::errors::Result;
use parquet::file::metadata::{
    ColumnChunkMetaData, ColumnIndexBuilder, LevelHistogram, OffsetIndexBuilder, PageEncodingStats,
};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use parquet::file::statistics::{Statistics, ValueStatistics};
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;

/// A leaf column that [`ConstantChunkColumn::chunk`] can write, with the settings it needs.
#[derive(Debug, Clone)]
pub(super) struct ConstantChunkColumn {
    descr: ColumnDescPtr,
    /// Optional (definition levels written before the values), not required.
    optional: bool,
    statistics: EnabledStatistics,
    offset_index: bool,
    page_rows: usize,
    /// The longest value whose statistics are written untruncated.
    max_value_len: usize,
}

impl ConstantChunkColumn {
    /// The column's settings, or `None` when its chunk is not the plain shape this module
    /// writes (the caller then encodes it with parquet-rs).
    pub(super) fn new(descr: ColumnDescPtr, props: &WriterProperties) -> Option<Self> {
        let path = descr.path();
        let plain_shape = descr.physical_type() == PhysicalType::BYTE_ARRAY
            && descr.max_def_level() <= 1
            && descr.max_rep_level() == 0
            && props.dictionary_enabled(path)
            && props.compression(path) == Compression::UNCOMPRESSED
            && props.writer_version() == WriterVersion::PARQUET_1_0
            && props.bloom_filter_properties(path).is_none()
            && !props.write_page_header_statistics(path)
            && props.content_defined_chunking().is_none()
            && !props.write_row_group_number_distinct_values();
        if !plain_shape {
            return None;
        }
        let max_value_len = [
            props.statistics_truncate_length(),
            props.column_index_truncate_length(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(usize::MAX);
        Some(Self {
            optional: descr.max_def_level() == 1,
            statistics: props.statistics_enabled(path),
            offset_index: !props.offset_index_disabled(),
            // A page's value count is a u32 in its header.
            page_rows: props
                .column_data_page_row_count_limit(path)
                .clamp(1, u32::MAX as usize),
            max_value_len,
            descr,
        })
    }

    /// Whether a chunk of `value` can be written here (its statistics would not be truncated).
    pub(super) fn accepts(&self, value: &[u8]) -> bool {
        value.len() <= self.max_value_len
    }

    /// The encoded chunk of `rows` rows holding `value` (`rows` > 0, `value` accepted), and
    /// what closing parquet-rs's column writer would have returned for it. Offsets are relative
    /// to the returned bytes, as `SerializedRowGroupWriter::append_column` expects.
    pub(super) fn chunk(&self, value: &[u8], rows: usize) -> Result<(Bytes, ColumnCloseResult)> {
        let mut sink = TrackedWrite::new(Vec::with_capacity(64 + value.len()));
        let mut pages = SerializedPageWriter::new(&mut sink);

        let dictionary = dictionary_page(value);
        let dictionary_size = dictionary.len();
        let dictionary = pages.write_page(CompressedPage::new(
            Page::DictionaryPage {
                buf: dictionary,
                num_values: 1,
                encoding: Encoding::PLAIN,
                is_sorted: false,
            },
            dictionary_size,
        ))?;

        let page_statistics = self.statistics == EnabledStatistics::Page;
        let mut column_index = ColumnIndexBuilder::new(PhysicalType::BYTE_ARRAY);
        column_index.set_boundary_order(BoundaryOrder::ASCENDING);
        let mut offset_index = OffsetIndexBuilder::new();
        let mut data_pages = 0;
        let mut data_page_offset = None;
        let (mut compressed, mut uncompressed) = (
            dictionary.compressed_size as i64,
            dictionary.uncompressed_size as i64,
        );
        let mut remaining = rows;
        while remaining > 0 {
            let page_rows = remaining.min(self.page_rows);
            remaining -= page_rows;
            let values = data_page(self.optional, page_rows);
            let values_size = values.len();
            let spec = pages.write_page(CompressedPage::new(
                Page::DataPage {
                    buf: values,
                    num_values: page_rows as u32,
                    encoding: Encoding::RLE_DICTIONARY,
                    def_level_encoding: Encoding::RLE,
                    rep_level_encoding: Encoding::RLE,
                    statistics: None,
                },
                values_size,
            ))?;
            data_pages += 1;
            data_page_offset.get_or_insert(spec.offset as i64);
            compressed += spec.compressed_size as i64;
            uncompressed += spec.uncompressed_size as i64;
            if page_statistics {
                column_index.append(false, value.to_vec(), value.to_vec(), 0, None);
                column_index.append_histograms(&None, &self.set_levels(page_rows));
            }
            offset_index.append_offset_and_size(spec.offset as i64, spec.compressed_size as i32);
            offset_index.append_row_count(page_rows as i64);
            offset_index.append_unencoded_byte_array_data_bytes(Some(byte_count(value, page_rows)));
        }
        pages.close()?;
        let bytes = Bytes::from(sink.into_inner()?);

        let mut metadata = ColumnChunkMetaData::builder(self.descr.clone())
            .set_compression(Compression::UNCOMPRESSED)
            .set_encodings(vec![
                Encoding::PLAIN,
                Encoding::RLE,
                Encoding::RLE_DICTIONARY,
            ])
            .set_page_encoding_stats(vec![
                PageEncodingStats {
                    page_type: PageType::DICTIONARY_PAGE,
                    encoding: Encoding::PLAIN,
                    count: 1,
                },
                PageEncodingStats {
                    page_type: PageType::DATA_PAGE,
                    encoding: Encoding::RLE_DICTIONARY,
                    count: data_pages,
                },
            ])
            .set_total_compressed_size(compressed)
            .set_total_uncompressed_size(uncompressed)
            .set_num_values(rows as i64)
            .set_data_page_offset(data_page_offset.unwrap_or_default())
            .set_dictionary_page_offset(Some(dictionary.offset as i64));
        if self.statistics != EnabledStatistics::None {
            let stored = ByteArray::from(value.to_vec());
            let statistics =
                ValueStatistics::new(Some(stored.clone()), Some(stored), None, Some(0), false)
                    .with_backwards_compatible_min_max(self.descr.sort_order().is_signed());
            metadata = metadata
                .set_statistics(Statistics::from(statistics))
                .set_unencoded_byte_array_data_bytes(Some(byte_count(value, rows)))
                .set_definition_level_histogram(self.set_levels(rows));
        }
        let column_index = if page_statistics {
            Some(column_index.build()?)
        } else {
            None
        };
        let close = ColumnCloseResult {
            bytes_written: bytes.len() as u64,
            rows_written: rows as u64,
            metadata: metadata.build()?,
            bloom_filter: None,
            column_index,
            offset_index: self.offset_index.then(|| offset_index.build()),
        };
        Ok((bytes, close))
    }
}

impl ConstantChunkColumn {
    /// The definition-level histogram of `rows` rows that are all set: none at level 0, every
    /// one at 1 (none for a required column, which has no levels).
    fn set_levels(&self, rows: usize) -> Option<LevelHistogram> {
        self.optional
            .then(|| LevelHistogram::from(vec![0, rows as i64]))
    }
}

/// The dictionary page's values: the one value, PLAIN-encoded (its length, then its bytes).
fn dictionary_page(value: &[u8]) -> Bytes {
    let mut page = Vec::with_capacity(4 + value.len());
    page.extend_from_slice(&(value.len() as u32).to_le_bytes());
    page.extend_from_slice(value);
    Bytes::from(page)
}

/// A data page of `rows` rows of the one value. An optional column's definition levels come
/// first: their byte length (4 bytes, little-endian), then one RLE run of ones, one bit wide.
/// Then the dictionary indices, all 0: a bit width of 0 (a one-value dictionary needs no bits,
/// as parquet-rs writes it) and one RLE run of zero-bit values, which has no value bytes.
fn data_page(optional: bool, rows: usize) -> Bytes {
    let mut page = Vec::with_capacity(24);
    if optional {
        let mut levels = Vec::with_capacity(12);
        rle_run(&mut levels, rows, &[1]);
        page.extend_from_slice(&(levels.len() as u32).to_le_bytes());
        page.extend_from_slice(&levels);
    }
    page.push(0);
    rle_run(&mut page, rows, &[]);
    Bytes::from(page)
}

/// An RLE run of `rows` times `value` (already in its byte width): the run length shifted left
/// once as a ULEB128 varint, then the value.
fn rle_run(out: &mut Vec<u8>, rows: usize, value: &[u8]) {
    let mut header = (rows as u64) << 1;
    loop {
        let byte = (header & 0x7f) as u8;
        header >>= 7;
        if header == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(value);
}

/// The bytes `rows` copies of `value` take unencoded (Parquet's size statistics).
fn byte_count(value: &[u8], rows: usize) -> i64 {
    (value.len() as i64).saturating_mul(rows as i64)
}
