//! Encodes one Parquet file in memory from record batches: parquet-rs's `ArrowWriter` loop
//! (row groups split at `max_row_group_row_count`, closed by the caller on bytes), except that
//! columns holding one value in every row so far are not encoded row by row. They are counted,
//! and written at the row group's end as a ready-made chunk (`constant_chunk.rs`). A batch
//! whose value differs, or that holds nulls, turns the column back into a parquet-rs writer for
//! the rest of the row group, which is first given the rows counted so far: the column holds the
//! same rows in the same encoding either way, only the cost differs.

mod constant_chunk;
mod field_writer;
#[cfg(test)]
mod same_file_tests;
#[cfg(test)]
mod sink_tests;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};
use parquet::arrow::arrow_writer::ArrowRowGroupWriterFactory;
use parquet::arrow::ArrowWriter;
use parquet::errors::{ParquetError, Result};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;

use constant_chunk::ConstantChunkColumn;
use field_writer::FieldWriter;

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
    fn qualifying_fields(&self) -> Vec<&str> {
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
    fn counted_fields(&self) -> Vec<&str> {
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
