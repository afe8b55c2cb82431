//! Ring records to rows and batches: XID reports go to the XID stage, CUDA calls and driver
//! operations to their batchers (failed calls tagged with their XID incident), and the
//! processes making CUDA calls are told to the XID stage for attribution.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::batcher::{CudaBatcher, DriverBatcher};
use crate::capture::CaptureContext;
use crate::decode::{c_chars, cuda_event, driver_row, Decoder};
use crate::enrich::WorkloadResolver;
use crate::live::LivePublisher;
use crate::sources::driver::devices::DeviceNames;
use crate::summary::{CallTally, RunSummary};

/// What the consumer thread holds between records.
pub(super) struct State {
    pub(super) decoder: Decoder,
    pub(super) cuda: CudaBatcher,
    pub(super) summary: RunSummary,
    pub(super) calls: CallTally,
    /// Driver rows waiting for a batch.
    pub(super) driver: DriverBatcher,
    /// Device names by number.
    pub(super) devices: DeviceNames,
    /// What each fentry slot times.
    pub(super) slot_functions: Vec<Option<String>>,
    /// Processes seen making calls since the last hand-on: pid -> latest call time.
    pub(super) active: HashMap<i32, i64>,
    /// The pid and time last written to `active` (most rows repeat them).
    pub(super) last_active: (i32, i64),
    /// Container and pod of each process, cached.
    pub(super) workloads: WorkloadResolver,
    /// Per-process counts for the live view, and its publication.
    pub(super) live: LivePublisher,
}

pub(super) fn on_xid_record(raw: &[u8], state: &RefCell<State>, context: &CaptureContext) {
    let accounting = &context.accounting;
    accounting.xid_ring.received.fetch_add(1, Ordering::Relaxed);
    let decoded = state.borrow().decoder.xid_record(raw);
    match decoded {
        // Reconciled, annotated, logged and sent by the XID stage.
        Ok(record) => context.xid.report(record),
        Err(err) => {
            accounting
                .xid_ring
                .decode_errors
                .fetch_add(1, Ordering::Relaxed);
            tracing::error!(%err, len = raw.len(), "malformed XID record skipped");
        }
    }
}

pub(super) fn on_driver_record(raw: &[u8], state: &RefCell<State>, context: &CaptureContext) {
    let accounting = &context.accounting;
    accounting
        .driver_ring
        .received
        .fetch_add(1, Ordering::Relaxed);
    let mut state = state.borrow_mut();
    let state = &mut *state;
    match driver_row(
        raw,
        &context.clocks,
        &state.slot_functions,
        &mut state.devices,
    ) {
        Ok(mut row) => {
            row.workload = state.workloads.resolve(row.pid).cloned();
            if let Some(batch) = state.driver.push(row) {
                accounting.batched.add(batch.kind, batch.len() as u64);
                context.fanout.send_blocking(batch);
            }
        }
        Err(err) => {
            accounting
                .driver_ring
                .decode_errors
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%err, len = raw.len(), "malformed driver record skipped");
        }
    }
}

/// How stale a process's latest-call time may get before it is refreshed.
const ACTIVITY_RESOLUTION_NS: i64 = 100_000_000;

#[inline]
pub(super) fn on_cuda_record(raw: &[u8], state: &RefCell<State>, context: &CaptureContext) {
    let accounting = &context.accounting;
    accounting
        .cuda_ring
        .received
        .fetch_add(1, Ordering::Relaxed);
    let mut state = state.borrow_mut();
    let state = &mut *state;
    let decoded = cuda_event(raw).and_then(|event| {
        let comm = c_chars(&event.comm);
        let mut row = state.decoder.cuda_row(&event, &comm)?;
        row.workload = state.workloads.resolve(row.pid).map(|w| &**w);
        state.calls.record(event.function_id, &row);
        if state.live.record(row.pid, &event.comm, row.result != 0) {
            state
                .live
                .publish(&state.calls, &context.live, Instant::now(), false);
        }
        let (last_pid, last_time) = state.last_active;
        if row.pid != last_pid || row.time_ns - last_time > ACTIVITY_RESOLUTION_NS {
            state.active.insert(row.pid, row.time_ns);
            state.last_active = (row.pid, row.time_ns);
        }
        // A failed call of a process an XID incident affected carries the incident.
        if row.result != 0 {
            let incident = context.xid.links.incident_for(row.pid, row.time_ns);
            return Ok(state.cuda.push_linked(&row, incident.as_deref()));
        }
        Ok(state.cuda.push(&row))
    });
    match decoded {
        Ok(Some(batch)) => {
            accounting.batched.add(batch.kind, batch.len() as u64);
            context.fanout.send_blocking(batch);
        }
        Ok(None) => {}
        Err(err) => {
            accounting
                .cuda_ring
                .decode_errors
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%err, len = raw.len(), "malformed CUDA record skipped");
        }
    }
}

/// Sends CUDA rows that are due (or all of them when `all`), tells the XID stage which
/// processes made calls, and publishes the live view's totals.
pub(super) fn hand_on(state: &RefCell<State>, context: &CaptureContext, all: bool) {
    let cuda = {
        let mut state = state.borrow_mut();
        let state = &mut *state;
        if !state.active.is_empty() {
            context.xid.activity.record(state.active.drain());
            state.last_active = (0, 0);
        }
        state.workloads.expire_if_due(Instant::now());
        state
            .live
            .publish(&state.calls, &context.live, Instant::now(), all);
        let driver = state.driver.flush_if_due(Instant::now(), all);
        let cuda = if all {
            state.cuda.flush()
        } else {
            state.cuda.flush_if_due(Instant::now())
        };
        [cuda, driver]
    };
    for batch in cuda.into_iter().flatten() {
        context
            .accounting
            .batched
            .add(batch.kind, batch.len() as u64);
        context.fanout.send_blocking(batch);
    }
}
