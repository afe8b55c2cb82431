//! The accounting as one copy ([`Snapshot`]): what logs, the summary JSON, metrics and the
//! identity checks read.

use gpuship_sinks::EventKind;
use serde::Serialize;

/// A consistent-enough copy of the counters for logs, JSON and checks.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Snapshot {
    /// Per ring.
    pub rings: Vec<RingSnapshot>,
    /// Kernel log.
    pub kmsg: KmsgSnapshot,
    /// Per sink and kind.
    pub sinks: Vec<SinkSnapshot>,
    /// Per sink: whether its destination works now, and its failed attempts by error.
    pub sink_health: Vec<SinkHealth>,
    /// The configuration reloads.
    pub reloads: super::ReloadSnapshot,
    /// The CUDA libraries attached and how late.
    pub libraries: super::libraries::LibrarySnapshot,
    /// The CUDA source's overhead budget.
    pub budget: super::budget::BudgetSnapshot,
    /// State files set aside at start, by file and reason.
    pub state_files_set_aside: super::state_files::StateFileSnapshot,
}

/// A sink's destination state.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SinkHealth {
    /// Sink name.
    pub sink: String,
    /// False from a failed delivery until the next success.
    pub healthy: bool,
    /// Events whose delivery attempt failed, by error label (a retried event counts once per
    /// attempt).
    pub errors: std::collections::BTreeMap<String, u64>,
    /// Damaged spool or journal segments found (their events are counted as dropped with
    /// reason `spool_corrupt`).
    pub corrupt_segments: u64,
}

/// One ring's counters.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RingSnapshot {
    /// The ring's name ([`Ring::name`]).
    pub ring: &'static str,
    /// submitted + lost_in_kernel.
    pub emitted: u64,
    /// Lost because the ring was full.
    pub lost_in_kernel: u64,
    /// Submitted but not yet taken off the ring (0 once drained).
    pub pending_in_ring: u64,
    /// Taken off the ring.
    pub received: u64,
    /// Rejected by the decoder (received, not delivered).
    pub decode_errors: u64,
    /// CUDA returns without their entry.
    pub unmatched_returns: u64,
    /// CUDA calls not recorded because the in-flight table was full.
    pub inflight_full: u64,
    /// CUDA calls added to the kernel's statistics instead of the ring.
    pub aggregated: u64,
    /// Of those, taken out by the agent into `cuda_stats` rows.
    pub aggregated_received: u64,
    /// Added but not yet taken out (0 after the last drain).
    pub aggregated_pending: u64,
    /// CUDA calls not aggregated because the statistics table was full.
    pub stats_full: u64,
    /// Aggregated calls the flight recorder wrote as rows around incidents (copies of calls
    /// inside `cuda_stats` rows, so in no identity).
    pub flight_recorded: u64,
    /// NVIDIA ioctls whose request has no name in gpuship's tables (driver ring only): a newer
    /// driver's escapes or UVM commands (each new code is logged once).
    pub unnamed_requests: u64,
    /// Launch rows whose kernel handle was made before the agent started (or its name was not
    /// kept): named `unknown` (CUDA ring only).
    pub unknown_kernel_launches: u64,
    /// Kernel names not kept because the agent's name table was full (CUDA ring only).
    pub kernel_names_dropped: u64,
}

/// Kernel-log counters.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct KmsgSnapshot {
    /// XID lines read.
    pub xids: u64,
    /// XIDs reported by the tracepoint only while both sources ran.
    pub unpaired_tracepoint: u64,
    /// XIDs reported by the kernel log only while both sources ran.
    pub unpaired_kmsg: u64,
    /// Unparseable XID lines.
    pub parse_errors: u64,
    /// Overwritten-record gaps.
    pub lost_gaps: u64,
}

/// One sink's counters for one kind.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SinkSnapshot {
    /// Sink name.
    pub sink: String,
    /// Event kind.
    pub kind: EventKind,
    /// Taken off its queue.
    pub received: u64,
    /// Acknowledged by the destination.
    pub delivered: u64,
    /// Dropped before the destination, all reasons.
    pub dropped: u64,
    /// Dropped for each reason, by reason name.
    pub dropped_by_reason: std::collections::BTreeMap<&'static str, u64>,
    /// Written to the spool (since start, including what a previous run left).
    pub spooled: u64,
    /// Read back from the spool.
    pub replayed: u64,
    /// In the spool now.
    pub spooled_pending: u64,
    /// Left out by the sink's `kinds` / `cuda_filter` (not part of `received`).
    pub filtered: u64,
    /// Lost to destination errors.
    pub failed: u64,
    /// Held by the sink, not yet acknowledged (queued events included).
    pub in_flight: u64,
    /// Events of this kind waiting in the sink's queue.
    pub queued_events: u64,
}

impl Snapshot {
    /// Identities that do not hold, as readable sentences (empty when all hold). Exact once
    /// the pipeline is drained; while running, in-flight counts absorb the difference.
    pub fn broken_identities(&self) -> Vec<String> {
        let mut broken = Vec::new();
        for ring in &self.rings {
            if ring.emitted != ring.received + ring.lost_in_kernel + ring.pending_in_ring {
                broken.push(format!(
                    "ring {}: emitted {} != received {} + lost_in_kernel {} + pending_in_ring {}",
                    ring.ring,
                    ring.emitted,
                    ring.received,
                    ring.lost_in_kernel,
                    ring.pending_in_ring
                ));
            }
            if ring.aggregated < ring.aggregated_received {
                broken.push(format!(
                    "ring {}: aggregated {} < aggregated_received {} (calls taken out of the \
                     statistics table that the kernel never added)",
                    ring.ring, ring.aggregated, ring.aggregated_received
                ));
            }
        }
        for sink in &self.sinks {
            if sink.delivered + sink.dropped + sink.failed + sink.spooled_pending > sink.received {
                broken.push(format!(
                    "sink {} {}: received {} != delivered {} + failed {} + in_flight {}",
                    sink.sink,
                    sink.kind,
                    sink.received,
                    sink.delivered,
                    sink.failed,
                    sink.in_flight
                ));
            }
        }
        broken
    }

    /// The ring snapshot by name.
    pub fn ring(&self, name: &str) -> Option<&RingSnapshot> {
        self.rings.iter().find(|r| r.ring == name)
    }
}
