//! The unit of data every sink receives: one Arrow record batch of one event kind.

use arrow_array::RecordBatch;

/// The kinds live in the event model (shared with the lake, which does not link the sinks).
pub use gpuship_model::{EventKind, Retention};

/// A record batch and the kind whose schema it follows. Cloning shares the Arrow buffers.
#[derive(Debug, Clone)]
pub struct EventBatch {
    /// Which schema `records` follows.
    pub kind: EventKind,
    /// The rows.
    pub records: RecordBatch,
}

impl EventBatch {
    /// Wraps a batch built by one of the [`crate::schema`] builders.
    pub fn new(kind: EventKind, records: RecordBatch) -> Self {
        Self { kind, records }
    }

    /// Number of events (rows) in the batch.
    pub fn len(&self) -> usize {
        self.records.num_rows()
    }

    /// True when the batch holds no rows.
    pub fn is_empty(&self) -> bool {
        self.records.num_rows() == 0
    }
}
