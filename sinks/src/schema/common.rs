//! Columns every event kind shares: when it happened and on which host and boot.

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, StringArray};
use arrow_schema::{DataType, Field, TimeUnit};

/// Number of leading columns [`common_fields`] contributes to every schema.
pub const COMMON_FIELD_COUNT: usize = 4;

/// The machine an agent runs on; the same for every row it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIdentity {
    /// Host name (`uname -n`).
    pub host: Arc<str>,
    /// `/proc/sys/kernel/random/boot_id`: tells reboots apart, which monotonic clocks do not.
    pub boot_id: Arc<str>,
}

/// `time`, `time_ns`, `host`, `boot_id`.
pub(crate) fn common_fields() -> Vec<Field> {
    vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("time_ns", DataType::Int64, false),
        Field::new("host", DataType::Utf8, false),
        Field::new("boot_id", DataType::Utf8, false),
    ]
}

/// Builders for the common columns. Host and boot id are constant per agent, so they are
/// materialized once per batch at [`CommonColumns::finish`] instead of appended per row.
#[derive(Debug)]
pub(crate) struct CommonColumns {
    identity: HostIdentity,
    time: TimestampMicrosecondBuilder,
    time_ns: Int64Builder,
}

impl CommonColumns {
    pub(crate) fn new(identity: HostIdentity, capacity: usize) -> Self {
        Self {
            identity,
            time: TimestampMicrosecondBuilder::with_capacity(capacity).with_timezone("UTC"),
            time_ns: Int64Builder::with_capacity(capacity),
        }
    }

    /// Appends the time of one row, in nanoseconds since the Unix epoch.
    #[inline]
    pub(crate) fn append(&mut self, time_ns: i64) {
        self.time.append_value(time_ns.div_euclid(1_000));
        self.time_ns.append_value(time_ns);
    }

    pub(crate) fn len(&self) -> usize {
        self.time_ns.len()
    }

    /// The four common columns for the rows appended so far; resets the builders.
    pub(crate) fn finish(&mut self) -> [ArrayRef; COMMON_FIELD_COUNT] {
        let rows = self.len();
        [
            Arc::new(self.time.finish()),
            Arc::new(self.time_ns.finish()),
            Arc::new(repeated(&self.identity.host, rows)),
            Arc::new(repeated(&self.identity.boot_id, rows)),
        ]
    }

    /// The host identity the rows carry.
    pub(crate) fn identity(&self) -> &HostIdentity {
        &self.identity
    }
}

/// `value` `rows` times, its buffers allocated once at their final size (collecting an
/// iterator grows the values buffer by doubling, a copy each time).
pub(crate) fn repeated(value: &str, rows: usize) -> StringArray {
    let mut builder = StringBuilder::with_capacity(rows, value.len().saturating_mul(rows));
    for _ in 0..rows {
        builder.append_value(value);
    }
    builder.finish()
}
