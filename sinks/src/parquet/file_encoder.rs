//! Encodes one Parquet file in memory from record batches: parquet-rs's `ArrowWriter` loop
//! (row groups split at `max_row_group_row_count`, closed by the caller on bytes), except that
//! columns holding one value in every row so far are not encoded row by row. They are counted,
//! and written at the row group's end as a ready-made chunk ([`super::constant_chunk`]). A batch
//! whose value differs, or that holds nulls, turns the column back into a parquet-rs writer for
//! the rest of the row group, which is first given the rows counted so far: the column holds the
//! same rows in the same encoding either way, only the cost differs.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, SchemaRef};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnWriter, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowWriter;
use parquet::errors::{ParquetError, Result};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::{SerializedFileWriter, SerializedRowGroupWriter};

use super::constant_chunk::ConstantChunkColumn;

/// Rows per array when a counted column is handed to parquet-rs after all.
const REPLAY_ROWS: usize = 8_192;

/// One Parquet file being encoded into a `Vec<u8>`.
pub struct FileEncoder {
    file: SerializedFileWriter<Vec<u8>>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    /// Per top-level field: how many leaf columns it has.
    leaves: Vec<usize>,
    /// Per top-level field: how it may be written as a constant chunk, if it may.
    constant: Vec<Option<ConstantChunkColumn>>,
    max_row_group_rows: Option<usize>,
    row_group: Option<RowGroupInProgress>,
}

impl FileEncoder {
    /// A file of `schema` under `props`; the top-level fields named in `constant_fields` are
    /// counted instead of encoded while their value stays the same (when their settings allow
    /// it, see [`ConstantChunkColumn::new`]).
    pub fn try_new(
        schema: SchemaRef,
        props: WriterProperties,
        constant_fields: &[&str],
    ) -> Result<Self> {
        if props.max_row_group_bytes().is_some() {
            return Err(ParquetError::General(
                "max_row_group_bytes is not supported here: the caller closes row groups on bytes"
                    .to_string(),
            ));
        }
        let max_row_group_rows = props.max_row_group_row_count();
        let (file, factory) = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props))?
            .into_serialized_writer()?;
        let descriptors = file.schema_descr();
        let field_leaves = |field_index: usize| {
            (0..descriptors.num_columns())
                .filter(move |&leaf| descriptors.get_column_root_idx(leaf) == field_index)
        };
        let leaves = (0..schema.fields().len())
            .map(|field_index| field_leaves(field_index).count())
            .collect();
        let constant = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(field_index, field)| {
                let mut leaves = field_leaves(field_index);
                let leaf = leaves.next()?;
                let single_string_leaf =
                    leaves.next().is_none() && field.data_type() == &DataType::Utf8;
                (single_string_leaf && constant_fields.contains(&field.name().as_str()))
                    .then(|| ConstantChunkColumn::new(descriptors.column(leaf), file.properties()))
                    .flatten()
            })
            .collect();
        Ok(Self {
            file,
            factory,
            schema,
            leaves,
            constant,
            max_row_group_rows,
            row_group: None,
        })
    }

    /// Encodes `batch` into the row group in progress, closing it each time it reaches the
    /// row limit.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_columns() != self.schema.fields().len() {
            return Err(ParquetError::General(format!(
                "a batch of {} columns for a file of {}",
                batch.num_columns(),
                self.schema.fields().len()
            )));
        }
        let mut remaining = batch.clone();
        while remaining.num_rows() > 0 {
            let buffered = self.row_group.as_ref().map_or(0, |group| group.rows);
            let fits = match self.max_row_group_rows {
                Some(max) => max
                    .saturating_sub(buffered)
                    .max(1)
                    .min(remaining.num_rows()),
                None => remaining.num_rows(),
            };
            let now = remaining.slice(0, fits);
            remaining = remaining.slice(fits, remaining.num_rows() - fits);
            if self.row_group.is_none() {
                self.row_group = Some(self.new_row_group()?);
            }
            let group = self.row_group.as_mut().expect("created above");
            group.write(&self.schema, &now)?;
            if self.max_row_group_rows.is_some_and(|max| group.rows >= max) {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// The encoded size the row group in progress is expected to have.
    pub fn in_progress_size(&self) -> usize {
        self.row_group
            .as_ref()
            .map_or(0, RowGroupInProgress::estimated_bytes)
    }

    /// Closes the row group in progress into the file.
    pub fn flush(&mut self) -> Result<()> {
        let Some(group) = self.row_group.take() else {
            return Ok(());
        };
        let mut writer = self.file.next_row_group()?;
        for field in group.fields {
            field.append_to(&mut writer)?;
        }
        writer.close()?;
        Ok(())
    }

    /// Bytes of the file encoded so far.
    pub fn bytes_written(&self) -> usize {
        self.file.bytes_written()
    }

    /// The buffer the file is encoded into.
    pub fn inner(&self) -> &Vec<u8> {
        self.file.inner()
    }

    /// The buffer the file is encoded into, to reserve room in it.
    pub fn inner_mut(&mut self) -> &mut Vec<u8> {
        self.file.inner_mut()
    }

    /// Closes the last row group and writes the footer.
    pub fn finish(&mut self) -> Result<()> {
        self.flush()?;
        self.file.finish()?;
        Ok(())
    }

    /// The fields that may be written as constant chunks under this file's settings.
    #[cfg(test)]
    pub(super) fn qualifying_fields(&self) -> Vec<&str> {
        self.schema
            .fields()
            .iter()
            .zip(&self.constant)
            .filter(|(_, constant)| constant.is_some())
            .map(|(field, _)| field.name().as_str())
            .collect()
    }

    /// The fields of the row group in progress whose rows are counted, not encoded.
    #[cfg(test)]
    pub(super) fn counted_fields(&self) -> Vec<&str> {
        let Some(group) = &self.row_group else {
            return Vec::new();
        };
        self.schema
            .fields()
            .iter()
            .zip(&group.fields)
            .filter(|(_, writer)| matches!(writer, FieldWriter::Counted { .. }))
            .map(|(field, _)| field.name().as_str())
            .collect()
    }

    fn new_row_group(&self) -> Result<RowGroupInProgress> {
        let mut leaf_writers = self
            .factory
            .create_column_writers(self.file.flushed_row_groups().len())?
            .into_iter();
        let fields = self
            .constant
            .iter()
            .zip(&self.leaves)
            .map(|(constant, &leaves)| {
                let writers: Vec<_> = leaf_writers.by_ref().take(leaves).collect();
                match constant {
                    Some(column) => FieldWriter::Counted {
                        column: column.clone(),
                        value: None,
                        rows: 0,
                        writers,
                    },
                    None => FieldWriter::Encoded(writers),
                }
            })
            .collect();
        Ok(RowGroupInProgress { fields, rows: 0 })
    }
}

/// The columns of the row group being written.
struct RowGroupInProgress {
    /// One per top-level field, in schema order.
    fields: Vec<FieldWriter>,
    rows: usize,
}

impl RowGroupInProgress {
    fn write(&mut self, schema: &SchemaRef, batch: &RecordBatch) -> Result<()> {
        for ((field, column), writer) in schema
            .fields()
            .iter()
            .zip(batch.columns())
            .zip(&mut self.fields)
        {
            writer.write(field, column)?;
        }
        self.rows += batch.num_rows();
        Ok(())
    }

    fn estimated_bytes(&self) -> usize {
        self.fields.iter().map(FieldWriter::estimated_bytes).sum()
    }
}

/// How one top-level field of the row group is being written.
enum FieldWriter {
    /// By parquet-rs, one writer per leaf column.
    Encoded(Vec<ArrowColumnWriter>),
    /// Not yet: every row so far held `value`; `writers` (its one leaf's) take over if a row
    /// does not.
    Counted {
        column: ConstantChunkColumn,
        value: Option<String>,
        rows: usize,
        writers: Vec<ArrowColumnWriter>,
    },
}

impl FieldWriter {
    fn write(&mut self, field: &Field, column: &ArrayRef) -> Result<()> {
        if self.count(column) {
            return Ok(());
        }
        encode(field, column, self.encoded(field)?)
    }

    /// Counts `column`'s rows if this field is counted and they all hold its value (the first
    /// batch's sets it); false when they must be encoded.
    fn count(&mut self, column: &ArrayRef) -> bool {
        let Self::Counted {
            column: settings,
            value,
            rows,
            ..
        } = self
        else {
            return false;
        };
        let Some(same) = constant_value(column) else {
            return false;
        };
        if !settings.accepts(same.as_bytes())
            || value.as_deref().is_some_and(|counted| counted != same)
        {
            return false;
        }
        value.get_or_insert_with(|| same.to_string());
        *rows += column.len();
        true
    }

    /// parquet-rs's writers of this field; a counted field's are first given the rows counted
    /// so far, and the field is encoded from then on.
    fn encoded(&mut self, field: &Field) -> Result<&mut [ArrowColumnWriter]> {
        if let Self::Counted {
            value,
            rows,
            writers,
            ..
        } = self
        {
            let mut writers = std::mem::take(writers);
            if let Some(counted) = value.take() {
                replay(field, &counted, *rows, &mut writers)?;
            }
            *self = Self::Encoded(writers);
        }
        match self {
            Self::Encoded(writers) => Ok(writers),
            Self::Counted { .. } => Err(ParquetError::General(format!(
                "{}: a counted column was not handed to parquet-rs",
                field.name()
            ))),
        }
    }

    fn estimated_bytes(&self) -> usize {
        match self {
            Self::Encoded(writers) => writers
                .iter()
                .map(ArrowColumnWriter::get_estimated_total_bytes)
                .sum(),
            // A dictionary page and a few bytes per data page.
            Self::Counted { value, .. } => value.as_ref().map_or(0, |value| value.len() + 64),
        }
    }

    fn append_to(self, row_group: &mut SerializedRowGroupWriter<'_, Vec<u8>>) -> Result<()> {
        match self {
            Self::Encoded(writers) => {
                for writer in writers {
                    writer.close()?.append_to_row_group(row_group)?;
                }
                Ok(())
            }
            Self::Counted {
                column,
                value: Some(value),
                rows,
                ..
            } => {
                let (bytes, close) = column.chunk(value.as_bytes(), rows)?;
                row_group.append_column(&bytes, close)
            }
            Self::Counted { value: None, .. } => Err(ParquetError::General(
                "a row group closed with a column that saw no rows".to_string(),
            )),
        }
    }
}

/// Hands `column` to parquet-rs's writers of its leaves.
fn encode(field: &Field, column: &ArrayRef, writers: &mut [ArrowColumnWriter]) -> Result<()> {
    for (leaf, writer) in compute_leaves(field, column)?.iter().zip(writers) {
        writer.write(leaf)?;
    }
    Ok(())
}

/// Gives parquet-rs's writers the `rows` rows of `value` that were counted so far.
fn replay(
    field: &Field,
    value: &str,
    rows: usize,
    writers: &mut [ArrowColumnWriter],
) -> Result<()> {
    let mut left = rows;
    while left > 0 {
        let now = left.min(REPLAY_ROWS);
        let column: ArrayRef = Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            value, now,
        )));
        encode(field, &column, writers)?;
        left -= now;
    }
    Ok(())
}

/// The value every row of `column` holds, if it is a string column without nulls whose rows
/// are all the same (compared as lengths, then as one run of bytes).
fn constant_value(column: &ArrayRef) -> Option<&str> {
    let strings = column.as_any().downcast_ref::<StringArray>()?;
    if strings.is_empty() || strings.null_count() > 0 {
        return None;
    }
    let first = strings.value(0);
    let offsets = strings.value_offsets();
    let width = first.len();
    if !offsets
        .windows(2)
        .all(|pair| usize::try_from(pair[1] - pair[0]).ok() == Some(width))
    {
        return None;
    }
    if width == 0 {
        return Some(first);
    }
    let start = usize::try_from(offsets[0]).ok()?;
    let end = usize::try_from(offsets[offsets.len() - 1]).ok()?;
    strings.value_data()[start..end]
        .chunks_exact(width)
        .all(|row| row == first.as_bytes())
        .then_some(first)
}
