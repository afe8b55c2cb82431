//! What every capture thread (the BPF consumer, the kernel-log reader) shares: where rows come
//! from (host, clocks, GPUs), where batches go, what is counted, and when to stop.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use gpuship_sinks::schema::HostIdentity;

use crate::accounting::Accounting;
use crate::enrich::{Clocks, GpuDirectory};
use crate::fanout::FanOut;
use crate::live::LiveTap;
use crate::summary::RunSummary;
use crate::xid::XidStage;

/// Shared state of the capture threads; each thread gets a clone.
#[derive(Clone)]
pub struct CaptureContext {
    /// Host identity for rows.
    pub identity: HostIdentity,
    /// Clock offsets.
    pub clocks: Clocks,
    /// GPUs by bus id.
    pub gpus: Arc<GpuDirectory>,
    /// Where batches go. Every clone must be dropped for the sinks to finish.
    pub fanout: FanOut,
    /// Counters.
    pub accounting: Arc<Accounting>,
    /// Set to stop; each thread drains what it already holds first.
    pub stop: Arc<AtomicBool>,
    /// The run summary threads add to.
    pub summary: Arc<Mutex<RunSummary>>,
    /// Where both XID sources report (reconciliation, catalog, incidents, attribution).
    pub xid: Arc<XidStage>,
    /// The live view's totals (`/live`), published by the consumer.
    pub live: Arc<LiveTap>,
}
