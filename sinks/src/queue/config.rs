//! `[sinks.buffer]`: the memory bounds of a sink's queue, its `when_full` policy and its stall
//! timeout, with their ranges.

use std::time::Duration;

use serde::Deserialize;

/// What a full queue does with a CUDA batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// Wait for room (default).
    #[default]
    Block,
    /// Drop the incoming batch.
    DropNewest,
    /// Drop the oldest queued batches.
    DropOldest,
}

/// `[sinks.buffer]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferConfig {
    /// Events queued in memory at most.
    #[serde(default = "default_max_events")]
    pub max_events: usize,
    /// Bytes (Arrow memory) queued in memory at most.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: usize,
    /// Policy when full.
    #[serde(default)]
    pub when_full: WhenFull,
    /// A sink holding work that acknowledges nothing for this long is stalled: unhealthy, and
    /// what does not fit in memory is spooled (counted as `stalled` failed attempts).
    #[serde(default = "default_stall_timeout_ms")]
    pub stall_timeout_ms: u64,
}

/// The range `stall_timeout_ms` must be in.
pub const STALL_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=3_600_000;

fn default_stall_timeout_ms() -> u64 {
    2_000
}

fn default_max_events() -> usize {
    1 << 16
}

/// Four batches of CUDA rows at the batcher's defaults (8,192 rows, about 2 MiB each by the
/// capacity of their arrays): a sink that falls a few batches behind catches up from memory. With
/// room for one, every pause of the Parquet thread sent batches through the disk spool (encoded,
/// written, read back), and kept them there in order until the replay caught up: more CPU and more
/// memory (the spill lane and the encoder) than the queue it spared.
fn default_max_bytes() -> usize {
    8 << 20
}

impl Default for BufferConfig {
    fn default() -> Self {
        Self {
            max_events: default_max_events(),
            max_bytes: default_max_bytes(),
            when_full: WhenFull::default(),
            stall_timeout_ms: default_stall_timeout_ms(),
        }
    }
}

impl BufferConfig {
    /// Every problem with the values, as `(key, message)` pairs (keys relative to the sink).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        use crate::limits::out_of_range;
        [
            (
                "buffer.max_events",
                out_of_range(self.max_events as u64, 1..=16_777_216),
            ),
            (
                "buffer.max_bytes",
                out_of_range(self.max_bytes as u64, 1..=16 << 30),
            ),
            (
                "buffer.stall_timeout_ms",
                out_of_range(self.stall_timeout_ms, STALL_TIMEOUT_MS_RANGE),
            ),
        ]
        .into_iter()
        .filter_map(|(key, message)| Some((key, message?)))
        .collect()
    }

    /// `stall_timeout_ms` as a duration.
    pub fn stall_timeout(&self) -> Duration {
        Duration::from_millis(self.stall_timeout_ms)
    }
}
