//! XID records into batches at once (XIDs never wait for more rows). The sources that batch
//! rows over time keep their batchers in their own folders (`sources/cuda/batcher.rs`,
//! `sources/driver/batcher.rs`).

use gpuship_sinks::schema::{xid_batch_of, HostIdentity, XidRecord};
use gpuship_sinks::{EventBatch, EventKind};

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
