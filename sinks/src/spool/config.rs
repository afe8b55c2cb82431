//! `[sinks.spool]`: whether a sink spools, how much disk and memory the spool may use, and
//! when its segments reach the disk.

use serde::Deserialize;

/// When segments reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FsyncPolicy {
    /// fsync every segment and its directory entry (default: spooling is rare, losing it is not).
    #[default]
    Always,
    /// Leave it to the kernel's writeback.
    Never,
}

/// `[sinks.spool]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpoolConfig {
    /// Spool at all.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Bytes on disk at most; beyond it CUDA batches are dropped (counted), XIDs still kept.
    #[serde(default = "default_max_size")]
    pub max_size: u64,
    /// When segments reach the disk.
    #[serde(default)]
    pub fsync: FsyncPolicy,
    /// Bytes (Arrow memory) of batches bound for the spool that may wait for the disk: the
    /// spool is written by its own thread, so a slow disk fills this, not the kernel's ring.
    #[serde(default = "default_write_buffer")]
    pub write_buffer: u64,
}

fn yes() -> bool {
    true
}

fn default_max_size() -> u64 {
    1 << 30
}

fn default_write_buffer() -> u64 {
    32 << 20
}

/// The range `write_buffer` must be in.
pub const WRITE_BUFFER_RANGE: std::ops::RangeInclusive<u64> = (1 << 20)..=(16 << 30);

impl Default for SpoolConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_size: default_max_size(),
            fsync: FsyncPolicy::default(),
            write_buffer: default_write_buffer(),
        }
    }
}

impl SpoolConfig {
    /// Every problem with the values, as `(key, message)` pairs (keys relative to the sink).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        [
            (
                "spool.max_size",
                crate::limits::out_of_range(self.max_size, 1..=16 << 40),
            ),
            (
                "spool.write_buffer",
                crate::limits::out_of_range(self.write_buffer, WRITE_BUFFER_RANGE),
            ),
        ]
        .into_iter()
        .filter_map(|(key, message)| Some((key, message?)))
        .collect()
    }
}
