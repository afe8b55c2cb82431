//! The half that the builders of the low-rate kinds (`driver`, `cuda_stats`, `cuda_memory`)
//! share: rows wait whole until `finish`, which writes the common columns first, the kind's own
//! columns next and the workload columns last. A kind says only what its rows are and how they
//! become columns ([`KindRows`]); the hot kinds (`cuda`, `xid`) append column by column instead.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, Schema};

use super::common::{CommonColumns, HostIdentity};
use super::workload::{Workload, WorkloadColumns};

/// A kind whose rows a [`RowBatchBuilder`] keeps until they become a batch.
pub trait KindRows: Sized {
    /// Rows a batch usually holds (the common columns' first capacity).
    const TYPICAL_ROWS: usize;
    /// Makes the kind's Arrow schema.
    const SCHEMA: fn() -> Arc<Schema>;
    /// When the row happened (nanoseconds since the Unix epoch), and the container and pod of
    /// its process when it runs in one.
    fn time_and_workload(&self) -> (i64, Option<&Workload>);
    /// The kind's own columns, in schema order between the common and the workload columns.
    fn columns(rows: &[Self]) -> Vec<ArrayRef>;
}

/// Accumulates rows of kind `R` into one [`RecordBatch`] at a time.
#[derive(Debug)]
pub struct RowBatchBuilder<R> {
    schema: Arc<Schema>,
    common: CommonColumns,
    rows: Vec<R>,
}

impl<R: KindRows> RowBatchBuilder<R> {
    /// A builder whose rows carry `identity`.
    pub fn new(identity: HostIdentity) -> Self {
        Self {
            schema: (R::SCHEMA)(),
            common: CommonColumns::new(identity, R::TYPICAL_ROWS),
            rows: Vec::new(),
        }
    }

    /// Appends one row.
    pub fn append(&mut self, row: R) {
        self.common.append(row.time_and_workload().0);
        self.rows.push(row);
    }

    /// Rows waiting.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when no row waits.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows so far as one batch; the builder starts empty again.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let rows = std::mem::take(&mut self.rows);
        let mut workload = WorkloadColumns::new();
        for row in &rows {
            workload.append(row.time_and_workload().1);
        }
        let mut columns: Vec<ArrayRef> = self.common.finish().into();
        columns.extend(R::columns(&rows));
        columns.extend(workload.finish());
        RecordBatch::try_new(self.schema.clone(), columns)
    }
}
