//! Where gpuship's events go once they are Arrow record batches.
//!
//! - [`schema`]: the Arrow schema of every event kind (the column names users' queries rely on)
//!   and the builders that turn rows into [`arrow_array::RecordBatch`]es.
//! - [`batch`]: [`EventBatch`], one record batch of one event kind, the unit every sink takes.
//! - [`sink`]: the [`Sink`] trait every destination implements and the counters it keeps.
//! - [`queue`]: the bounded queue in front of each sink and its `when_full` policy.
//! - [`parquet`]: the Parquet sink (hive-partitioned files, atomic finalize), the default one.
//!
//! This crate knows nothing about BPF or where events come from; the agent fills the builders.

pub mod batch;
pub mod parquet;
pub mod queue;
pub mod schema;
pub mod sink;

pub use batch::{EventBatch, EventKind};
pub use queue::{queue, BufferConfig, QueueReceiver, QueueSender, WhenFull};
pub use sink::{DropReason, Sink, SinkError, SinkInput, SinkStats};
