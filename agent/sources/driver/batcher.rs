//! Groups driver rows into record batches under the CUDA batch bounds.

use std::time::{Duration, Instant};

use gpuship_sinks::schema::{DriverBatchBuilder, DriverRow, HostIdentity};
use gpuship_sinks::{EventBatch, EventKind};

use crate::batcher::BatchConfig;

/// Driver rows into batches: the CUDA batch bounds (`max_events`, `timeout`) apply.
#[derive(Debug)]
pub struct DriverBatcher {
    builder: DriverBatchBuilder,
    max_events: usize,
    timeout: Duration,
    oldest: Option<Instant>,
}

impl DriverBatcher {
    /// A batcher for rows of `identity`'s host.
    pub fn new(identity: HostIdentity, config: &BatchConfig) -> Self {
        Self {
            builder: DriverBatchBuilder::new(identity),
            max_events: config.max_events,
            timeout: Duration::from_millis(config.timeout_ms),
            oldest: None,
        }
    }

    /// Adds a row; returns a full batch.
    pub fn push(&mut self, row: DriverRow) -> Option<EventBatch> {
        self.oldest.get_or_insert_with(Instant::now);
        self.builder.append(row);
        if self.builder.len() >= self.max_events {
            return self.flush();
        }
        None
    }

    /// The waiting rows when the oldest has waited `timeout`, or all of them when `all`.
    pub fn flush_if_due(&mut self, now: Instant, all: bool) -> Option<EventBatch> {
        match self.oldest {
            Some(oldest) if all || now.duration_since(oldest) >= self.timeout => self.flush(),
            _ => None,
        }
    }

    fn flush(&mut self) -> Option<EventBatch> {
        self.oldest = None;
        if self.builder.is_empty() {
            return None;
        }
        match self.builder.finish() {
            Ok(records) => Some(EventBatch::new(EventKind::Driver, records)),
            Err(err) => {
                tracing::error!(%err, "building a driver record batch failed");
                None
            }
        }
    }
}
