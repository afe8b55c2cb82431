//! gpuship's event model: what the sinks write and the lake reads, with no Kafka, OTLP or
//! arrow dependency, so the lake (on DataFusion's arrow) links neither the sinks' clients nor
//! a second arrow.
//!
//! - [`EventKind`]: the kinds of events, each a table (`<root>/<kind>/dt=.../hour=.../`).
//! - [`schemas`]: each kind's Arrow schema as Arrow IPC bytes, written by the sinks (whose
//!   arrow schemas are the definition; a sinks test checks the bytes still match them) and read
//!   by the lake with its own arrow.
//! - [`s3`]: `s3://bucket/prefix` lakes: the address and the `object_store` client.
//! - [`redact`]: URLs in printed text without their credentials.

pub mod cuda_results;
mod kind;
pub mod redact;
pub mod s3;
pub mod schemas;

pub use kind::{EventKind, Retention};

/// `"<value> is outside <lo>..=<hi>"` when `value` is out of `range` (configuration checks).
pub fn out_of_range<T: PartialOrd + std::fmt::Display>(
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Option<String> {
    (!range.contains(&value))
        .then(|| format!("{value} is outside {}..={}", range.start(), range.end()))
}
