//! The unit of data every sink receives: one Arrow record batch of one event kind.

use std::fmt;

use arrow_array::RecordBatch;
use serde::{Deserialize, Serialize};

/// The kinds of events gpuship records; each has its own Arrow schema and Parquet table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// NVIDIA XID errors, from the driver's tracepoint and the kernel log.
    Xid,
    /// CUDA driver API calls, from uprobes on libcuda.
    Cuda,
    /// NVIDIA kernel-driver operations: ioctls on NVIDIA device files, driver function calls.
    Driver,
}

impl EventKind {
    /// Every kind, in a fixed order (used for per-kind counters and table listings).
    pub const ALL: [EventKind; 3] = [EventKind::Xid, EventKind::Cuda, EventKind::Driver];

    /// The name used in paths, topics and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Xid => "xid",
            EventKind::Cuda => "cuda",
            EventKind::Driver => "driver",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
