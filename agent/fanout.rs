//! Hands every batch to every sink's bounded queue.
//!
//! Capture threads are plain OS threads, so they use blocking sends: a sink that falls behind
//! holds the pipeline back (the `block` policy) and the loss, if any, happens and is counted in
//! the kernel ring. A sink whose task has ended cannot take batches; those events are counted
//! as dropped for it. The last queue gets the original batch, the others share its buffers.

use std::sync::Arc;

use gpuship_sinks::{EventBatch, SinkStats};
use tokio::sync::mpsc;

/// One sink's queue.
#[derive(Debug, Clone)]
struct SinkQueue {
    name: String,
    sender: mpsc::Sender<EventBatch>,
    stats: Arc<SinkStats>,
}

/// The set of sink queues; cloned into every producer thread. Dropping every clone closes the
/// queues, which tells the sinks to finish.
#[derive(Debug, Clone, Default)]
pub struct FanOut {
    queues: Vec<SinkQueue>,
}

impl FanOut {
    /// Adds a sink's queue.
    pub fn add(
        &mut self,
        name: impl Into<String>,
        sender: mpsc::Sender<EventBatch>,
        stats: Arc<SinkStats>,
    ) {
        self.queues.push(SinkQueue {
            name: name.into(),
            sender,
            stats,
        });
    }

    /// Sends `batch` to every sink, waiting for room. Must not be called from async code.
    pub fn send_blocking(&self, batch: EventBatch) {
        let Some((last, rest)) = self.queues.split_last() else {
            return;
        };
        for queue in rest {
            Self::send_one(queue, batch.clone());
        }
        Self::send_one(last, batch);
    }

    fn send_one(queue: &SinkQueue, batch: EventBatch) {
        let (kind, events) = (batch.kind, batch.len() as u64);
        if queue.sender.blocking_send(batch).is_err() {
            queue.stats.dropped.add(kind, events);
            tracing::error!(sink = %queue.name, %kind, events, "sink has stopped; events dropped");
        }
    }

    /// Number of sinks.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// True without sinks.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuship_sinks::schema::{xid_batch_of, HostIdentity};
    use gpuship_sinks::EventKind;

    fn empty_xid_batch() -> EventBatch {
        let identity = HostIdentity {
            host: "h".into(),
            boot_id: "b".into(),
        };
        EventBatch::new(EventKind::Xid, xid_batch_of(&identity, &[]).unwrap())
    }

    #[test]
    fn every_sink_gets_every_batch_and_a_closed_sink_counts_drops() {
        let (tx_a, mut rx_a) = mpsc::channel(4);
        let (tx_b, rx_b) = mpsc::channel(4);
        let stats_b = Arc::new(SinkStats::default());
        let mut fanout = FanOut::default();
        fanout.add("a", tx_a, Arc::new(SinkStats::default()));
        fanout.add("b", tx_b, stats_b.clone());
        drop(rx_b);
        fanout.send_blocking(empty_xid_batch());
        assert!(rx_a.try_recv().is_ok());
        assert_eq!(
            stats_b.dropped.get(EventKind::Xid),
            0,
            "empty batch: zero events dropped"
        );
        assert_eq!(fanout.len(), 2);
    }
}
