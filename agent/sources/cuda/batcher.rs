//! Groups CUDA rows into record batches, handed on at `max_events`, `max_bytes` or `timeout`
//! (whichever comes first).

use std::time::{Duration, Instant};

use gpuship_sinks::schema::{CudaBatchBuilder, CudaRow, HostIdentity};
use gpuship_sinks::{EventBatch, EventKind};

use crate::batcher::BatchConfig;

/// Builds CUDA batches under the configured bounds.
#[derive(Debug)]
pub struct CudaBatcher {
    builder: CudaBatchBuilder,
    max_events: usize,
    max_bytes: usize,
    timeout: Duration,
    /// When the oldest waiting row arrived; the timeout counts from it.
    oldest: Option<Instant>,
}

impl CudaBatcher {
    /// A batcher for rows of `identity`'s host.
    pub fn new(identity: HostIdentity, config: &BatchConfig) -> Self {
        Self {
            builder: CudaBatchBuilder::new(identity, config.max_events.min(65_536)),
            max_events: config.max_events,
            max_bytes: config.max_bytes,
            timeout: Duration::from_millis(config.timeout_ms),
            oldest: None,
        }
    }

    /// Adds a row; returns a full batch when a size bound is reached.
    #[inline]
    pub fn push(&mut self, row: &CudaRow<'_>) -> Option<EventBatch> {
        self.push_linked(row, None)
    }

    /// Adds a row that belongs to an XID incident.
    #[inline]
    pub fn push_linked(
        &mut self,
        row: &CudaRow<'_>,
        incident_id: Option<&str>,
    ) -> Option<EventBatch> {
        self.builder.append_linked(row, incident_id);
        self.appended()
    }

    /// Adds a call the flight recorder kept, written because `incident_id` started.
    pub fn push_flight_recorded(
        &mut self,
        row: &CudaRow<'_>,
        incident_id: &str,
    ) -> Option<EventBatch> {
        self.builder.append_flight_recorded(row, incident_id);
        self.appended()
    }

    /// After a row was appended: starts the timeout at the first row, and hands the batch on
    /// when a size bound is reached.
    #[inline]
    fn appended(&mut self) -> Option<EventBatch> {
        if self.oldest.is_none() {
            self.oldest = Some(Instant::now());
        }
        if self.builder.len() >= self.max_events || self.builder.estimated_bytes() >= self.max_bytes
        {
            return self.flush();
        }
        None
    }

    /// The waiting rows when the oldest has waited `timeout` by `now`.
    pub fn flush_if_due(&mut self, now: Instant) -> Option<EventBatch> {
        match self.oldest {
            Some(oldest) if now.duration_since(oldest) >= self.timeout => self.flush(),
            _ => None,
        }
    }

    /// All waiting rows as one batch, if any.
    pub fn flush(&mut self) -> Option<EventBatch> {
        self.oldest = None;
        if self.builder.is_empty() {
            return None;
        }
        match self.builder.finish() {
            Ok(records) => Some(EventBatch::new(EventKind::Cuda, records)),
            Err(err) => {
                // Only a schema bug can cause this; it is logged loudly and counted by the caller.
                tracing::error!(%err, "building a CUDA record batch failed");
                None
            }
        }
    }

    /// Rows waiting.
    pub fn pending(&self) -> usize {
        self.builder.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> CudaRow<'static> {
        CudaRow {
            time_ns: 1,
            pid: 1,
            tid: 1,
            comm: "c",
            function: "cuInit",
            duration_ns: 1,
            result: 0,
            result_name: "CUDA_SUCCESS",
            bytes: None,
            device_ptr: None,
            stream: None,
            launch: None,
            workload: None,
            objects: Default::default(),
        }
    }

    fn batcher(max_events: usize, max_bytes: usize, timeout_ms: u64) -> CudaBatcher {
        let identity = HostIdentity {
            host: "h".into(),
            boot_id: "b".into(),
        };
        CudaBatcher::new(
            identity,
            &BatchConfig {
                max_events,
                max_bytes,
                timeout_ms,
            },
        )
    }

    #[test]
    fn flushes_at_max_events() {
        let mut b = batcher(3, usize::MAX, 60_000);
        assert!(b.push(&row()).is_none());
        assert!(b.push(&row()).is_none());
        assert_eq!(b.push(&row()).map(|batch| batch.len()), Some(3));
        assert_eq!(b.pending(), 0);
    }

    #[test]
    fn flushes_at_max_bytes() {
        let mut b = batcher(1_000, 200, 60_000);
        let mut flushed = None;
        let mut pushed = 0;
        while flushed.is_none() {
            flushed = b.push(&row());
            pushed += 1;
        }
        assert_eq!(flushed.unwrap().len(), pushed);
        assert!(pushed > 1 && pushed < 10, "{pushed}");
    }

    #[test]
    fn flushes_after_timeout_counted_from_the_oldest_row() {
        let mut b = batcher(1_000, usize::MAX, 50);
        b.push(&row());
        let start = Instant::now();
        assert!(b.flush_if_due(start).is_none());
        assert_eq!(
            b.flush_if_due(start + Duration::from_millis(60))
                .map(|x| x.len()),
            Some(1)
        );
        assert!(
            b.flush_if_due(start + Duration::from_secs(10)).is_none(),
            "nothing left"
        );
    }
}
