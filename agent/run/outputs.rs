//! The sources' outputs wired to the pipeline: batches to the fan-out (counted as batched),
//! XIDs and CUDA activity to the XID stage, call totals to the live view. This is the only
//! place that knows both the sources' narrow interfaces and what is behind them.

use std::sync::Arc;
use std::time::Instant;

use gpuship_sinks::schema::XidRecord;
use gpuship_sinks::EventBatch;

use crate::accounting::Accounting;
use crate::fanout::FanOut;
use crate::live::{LivePublisher, LiveTap};
use crate::sources::functions::FunctionTable;
use crate::sources::output::{
    BatchEmitter, CallAttribution, CallView, CallViews, LaunchHistory, XidSink,
};
use crate::summary::CallTally;
use crate::xid::XidStage;

/// Batches to every sink's queue through the fan-out.
pub(super) struct FanOutEmitter {
    /// Where batches go. Every clone must be dropped for the sinks to finish.
    pub fanout: FanOut,
    /// Counts batched events by kind.
    pub accounting: Arc<Accounting>,
}

impl BatchEmitter for FanOutEmitter {
    fn emit(&self, batch: EventBatch) {
        self.accounting.batched.add(batch.kind, batch.len() as u64);
        self.fanout.send_blocking(batch);
    }
}

impl XidSink for XidStage {
    fn report(&self, record: XidRecord) {
        XidStage::report(self, record);
    }

    fn oldest_unsettled_kmsg(&self) -> Option<u64> {
        XidStage::oldest_unsettled_kmsg(self)
    }
}

impl CallAttribution for XidStage {
    fn processes_active(&self, calls: &mut dyn Iterator<Item = (i32, i64)>) {
        self.activity.record(calls);
    }

    fn incident_for(&self, pid: i32, time_ns: i64) -> Option<Arc<str>> {
        self.links.incident_for(pid, time_ns)
    }

    fn incident_links(&self) -> Vec<(i32, Arc<str>, i64)> {
        self.links.all()
    }

    fn launch_history(&self, history: Arc<dyn LaunchHistory>) {
        self.set_launch_history(history);
    }
}

/// Call totals to the live view (`/live`, `gpuship top`).
pub(super) struct LiveCalls(pub Arc<LiveTap>);

impl CallViews for LiveCalls {
    fn open(&self, functions: FunctionTable) -> Box<dyn CallView> {
        Box::new(LiveCallView {
            publisher: LivePublisher::new(functions),
            tap: self.0.clone(),
        })
    }
}

struct LiveCallView {
    publisher: LivePublisher,
    tap: Arc<LiveTap>,
}

impl CallView for LiveCallView {
    #[inline]
    fn call(&mut self, pid: i32, comm: &[i8], failed: bool) -> bool {
        self.publisher.record(pid, comm, failed)
    }

    fn calls(&mut self, pid: i32, comm: &[i8], calls: u64) {
        self.publisher.record_many(pid, comm, calls);
    }

    fn publish(&mut self, calls: &CallTally, now: Instant, now_anyway: bool) {
        self.publisher.publish(calls, &self.tap, now, now_anyway);
    }

    fn memory(&mut self, held: Vec<crate::health::GpuMemoryHealth>) {
        self.tap.publish_memory(held);
    }

    fn functions(&mut self, functions: FunctionTable) {
        self.publisher.set_names(functions);
    }
}
