//! Where gpuship's events go once they are Arrow record batches.
//!
//! - [`schema`]: the Arrow schema of every event kind (the column names users' queries rely on)
//!   and the builders that turn rows into [`arrow_array::RecordBatch`]es.
//! - [`batch`]: [`EventBatch`], one record batch of one event kind, the unit every sink takes.
//! - [`sink`]: the [`Sink`] trait every destination implements.
//! - [`sink_type`]: [`SinkType`], what a sink's config does for the agent (validate, build,
//!   health check); a new sink implements it and is registered by one line in the agent.
//! - [`stats`]: [`SinkStats`], what each sink did with its events, per kind and drop reason
//!   (written by the queue and the sinks; depends on neither).
//! - [`queue`]: the bounded queue in front of each sink: `when_full` policy, XID lane, spool.
//! - [`spool`]: a sink's disk spool for outages and shutdown, replayed in order.
//! - [`parquet`]: the Parquet sink (hive-partitioned files, atomic finalize), the default one.
//! - [`encode`]: events as JSON objects or Arrow IPC streams, for message sinks.
//! - [`otlp`]: events as OpenTelemetry log records (OTLP sink, Kafka `otlp_proto`).
//! - [`jsonl`]: JSON lines on stdout or in size-rotated files, for jq.
//! - [`kafka`]: the Kafka sink (acknowledged delivery through an idempotent producer).
//! - [`secret`]: passwords and tokens read from the environment or a file, never logged, and
//!   [`secret::redact_url`] for every endpoint that is printed.
//! - [`secure_fs`]: files under the state directory: 0700/0600, no symlink followed.
//! - [`tls`]: `[sinks.tls]`, the TLS settings the Kafka and OTLP clients share.
//! - [`template`]: `gpuship.{kind}`-style name templates (topics, message keys).
//! - [`blackhole`]: discards batches (optionally slowly), for measurements and tests.
//! - [`limits`]: the range of every configured size and duration; overflow-free arithmetic.
//!
//! This crate knows nothing about BPF or where events come from; the agent fills the builders.

/// The arrow the sinks are built on, for crates on another arrow (the lake) that build
/// batches with [`schema`]'s builders, as their tests do.
pub use arrow_array;

pub mod batch;
pub mod blackhole;
pub mod encode;
pub mod jsonl;
pub mod kafka;
pub mod limits;
pub mod otlp;
pub mod parquet;
pub mod queue;
pub mod schema;
pub mod secret;
pub mod secure_fs;
pub mod sink;
pub mod sink_type;
pub mod spool;
pub mod stats;
pub mod template;
pub mod tls;

#[cfg(test)]
mod small_disk;
/// Rows, identities and batches for tests and benches (the `test-support` feature).
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

pub use batch::{EventBatch, EventKind, Retention};
/// Per-kind tables outside this crate use the same map type (re-exported so they need no
/// dependency of their own).
pub use enum_map::EnumMap;
pub use queue::{
    journaled_xids, queue, queue_with, BufferConfig, QueueOptions, QueueReceiver, QueueSender,
    WhenFull,
};
pub use sink::{Sink, SinkError, SinkInput};
pub use sink_type::{BuildContext, DefaultCudaRows, RegisteredSinkType, SinkType};
pub use spool::{FsyncPolicy, Spool, SpoolConfig};
pub use stats::{DropReason, KindCounters, SinkStats};
