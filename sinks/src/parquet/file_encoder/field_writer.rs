//! One top-level field of the row group being written: counted while every row holds one value
//! (its chunk written at the row group's end by `constant_chunk`), or encoded by parquet-rs's
//! writers of its leaves, which a counted field becomes when a row holds another value or none.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, StringArray};
use arrow_schema::Field;
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnWriter};
use parquet::errors::{ParquetError, Result};
use parquet::file::writer::SerializedRowGroupWriter;

use super::constant_chunk::ConstantChunkColumn;
use crate::schema::repeated;

/// Rows per array when a counted column is handed to parquet-rs after all.
const REPLAY_ROWS: usize = 8_192;

/// How one top-level field of the row group is being written.
pub(super) enum FieldWriter {
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
    pub(super) fn write(&mut self, field: &Field, column: &ArrayRef) -> Result<()> {
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

    pub(super) fn estimated_bytes(&self) -> usize {
        match self {
            Self::Encoded(writers) => writers
                .iter()
                .map(ArrowColumnWriter::get_estimated_total_bytes)
                .sum(),
            // A dictionary page and a few bytes per data page.
            Self::Counted { value, .. } => value.as_ref().map_or(0, |value| value.len() + 64),
        }
    }

    pub(super) fn append_to(
        self,
        row_group: &mut SerializedRowGroupWriter<'_, Vec<u8>>,
    ) -> Result<()> {
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
        let column: ArrayRef = Arc::new(repeated(value, now));
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
