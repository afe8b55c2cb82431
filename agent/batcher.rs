//! XID records into batches at once (XIDs never wait for more rows). The sources that batch
//! rows over time keep their batchers in their own folders (`sources/cuda/batcher.rs`,
//! `sources/driver/batcher.rs`).

use gpuship_sinks::schema::{xid_batch_of, HostIdentity, XidRecord};
use gpuship_sinks::{EventBatch, EventKind};
use serde::Deserialize;

/// `[batch]`: when a batch of CUDA rows is handed to the sinks. XID rows never wait.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// Rows per batch at most.
    #[serde(default = "defaults::max_events")]
    pub max_events: usize,
    /// Approximate bytes per batch at most.
    #[serde(default = "defaults::max_bytes")]
    pub max_bytes: usize,
    /// Milliseconds a row waits at most before its batch is handed on.
    #[serde(default = "defaults::timeout_ms")]
    pub timeout_ms: u64,
}

impl Default for BatchConfig {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

mod defaults {
    pub fn max_bytes() -> usize {
        16 * 1024 * 1024
    }
    pub fn max_events() -> usize {
        8_192
    }
    pub fn timeout_ms() -> u64 {
        1_000
    }
}

/// One XID batch of `records` (XIDs never wait for more rows).
pub fn xid_batch(identity: &HostIdentity, records: &[XidRecord]) -> Option<EventBatch> {
    if records.is_empty() {
        return None;
    }
    match xid_batch_of(identity, records) {
        Ok(batch) => Some(EventBatch::new(EventKind::Xid, batch)),
        Err(err) => {
            tracing::error!(%err, rows = records.len(), "building an XID record batch failed");
            None
        }
    }
}
