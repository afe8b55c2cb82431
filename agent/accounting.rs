//! The agent's counters: what the kernel emitted and lost, what the agent received and could
//! not decode, and what every sink did. The identities the product promises are checked on
//! [`Snapshot`]: per ring `emitted = received + lost_in_kernel`, per sink
//! `received = delivered + dropped + failed + in_flight`. Calls of CUDA functions in `stats`
//! mode are not ring records: per ring `aggregated = aggregated_received +
//! aggregated_pending`, the calls added to the kernel's statistics table and the calls the
//! agent took out of it as `cuda_stats` rows (`stats_full` counts calls that found the table
//! full).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gpuship_sinks::SinkStats;
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::bpf::cuda::types::gpuship_ring_stat;

pub mod budget;
pub mod libraries;
mod reloads;
mod sinks;
mod snapshot;
pub mod state_files;
pub use reloads::{ReloadCounters, ReloadSnapshot};
pub use snapshot::{KmsgSnapshot, RingSnapshot, SinkHealth, SinkSnapshot, Snapshot};

/// The BPF rings. Per-ring counters are a table indexed by this enum: a new ring is a new
/// variant here (with its name), and nothing else in this file. [`Ring::ALL`] has the derived
/// variant count as its length and is checked at compile time to list each variant once, in
/// order: a variant left out of it does not build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumCount)]
pub enum Ring {
    /// The XID tracepoint's ring.
    Xid,
    /// The CUDA uprobes' ring.
    Cuda,
    /// The driver hooks' ring.
    Driver,
}

impl Ring {
    /// Every ring, in the order snapshots, metrics and the summary list them.
    pub const ALL: [Ring; <Ring as strum::EnumCount>::COUNT] =
        [Ring::Xid, Ring::Cuda, Ring::Driver];

    /// The name in metrics labels, logs and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Ring::Xid => "xid",
            Ring::Cuda => "cuda",
            Ring::Driver => "driver",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

// Each variant once, in declaration order (with the length above: every variant).
const _: () = {
    let mut i = 0;
    while i < Ring::ALL.len() {
        assert!(
            Ring::ALL[i].index() == i,
            "Ring::ALL lists the variants in order"
        );
        i += 1;
    }
};

/// Counters of one BPF ring, copied from the program's per-CPU array.
#[derive(Debug, Default)]
pub struct RingCounters {
    /// Records committed to the ring.
    pub submitted: AtomicU64,
    /// Records lost because the ring was full.
    pub lost_in_kernel: AtomicU64,
    /// Returns whose entry was missing (CUDA only; the call is not recorded).
    pub unmatched_returns: AtomicU64,
    /// Calls not recorded because the in-flight table was full (CUDA only).
    pub inflight_full: AtomicU64,
    /// Calls added to the kernel's per-interval statistics instead of the ring (CUDA only).
    pub aggregated: AtomicU64,
    /// Calls not added because the statistics table was full (CUDA only).
    pub stats_full: AtomicU64,
    /// Calls the agent took out of the statistics table, in `cuda_stats` rows.
    pub aggregated_received: AtomicU64,
    /// Aggregated calls the flight recorder wrote as rows when an incident started (copies:
    /// they are also in their `cuda_stats` row).
    pub flight_recorded: AtomicU64,
    /// NVIDIA ioctls with an unnamed request (driver ring only).
    pub unnamed_requests: AtomicU64,
    /// Launch rows whose kernel handle was never announced, named `unknown` (CUDA only).
    pub unknown_kernel_launches: AtomicU64,
    /// Kernel names not kept because the name table was full (CUDA only).
    pub kernel_names_dropped: AtomicU64,
    /// Records taken off the ring by the consumer.
    pub received: AtomicU64,
    /// Records rejected by the decoder.
    pub decode_errors: AtomicU64,
}

/// Counters of the kernel-log source.
#[derive(Debug, Default)]
pub struct KmsgCounters {
    /// XID lines parsed into rows.
    pub xids: AtomicU64,
    /// Lines that began an XID but could not be parsed (logged with the line).
    pub parse_errors: AtomicU64,
    /// Gaps where the kernel overwrote records before they were read.
    pub lost_gaps: AtomicU64,
}

/// Everything the agent counts.
#[derive(Debug, Default)]
pub struct Accounting {
    /// Each ring's counters, indexed by [`Ring`] (see [`Accounting::ring`]).
    rings: [RingCounters; Ring::ALL.len()],
    /// The kernel log.
    pub kmsg: KmsgCounters,
    /// XIDs the tracepoint reported that the kernel log did not, while both ran.
    pub xid_unpaired_tracepoint: AtomicU64,
    /// XIDs the kernel log reported that the tracepoint did not, while both ran.
    pub xid_unpaired_kmsg: AtomicU64,
    /// Batches of each kind handed to the fan-out, in events.
    pub batched: gpuship_sinks::sink::KindCounters,
    /// Each sink's counters by name, across reloads (see [`Accounting::add_sink`]).
    sinks: sinks::SinkTable,
    /// What became of the configuration reloads.
    pub reloads: ReloadCounters,
    /// The CUDA source's libraries and how late they were attached.
    pub libraries: libraries::LibraryCounters,
    /// The CUDA source's overhead budget.
    pub budget: budget::BudgetCounters,
    /// State files found unusable at start and set aside.
    pub state_files: state_files::StateFileCounters,
    /// The programs' per-CPU counter maps, read live by every snapshot.
    kernel_counters: Mutex<KernelCounters>,
}

/// The running programs' counter maps, and what the programs a reload stopped had counted.
#[derive(Debug, Default)]
struct KernelCounters {
    maps: Vec<(Ring, MapHandle)>,
    /// Final counts of stopped programs, by ring, in [`KERNEL_SLOTS`] order.
    stopped: [Option<[u64; KERNEL_SLOTS.len()]>; Ring::ALL.len()],
}

/// The kernel counter slots copied into [`RingCounters`].
const KERNEL_SLOTS: [gpuship_ring_stat; 6] = [
    gpuship_ring_stat::GPUSHIP_STAT_SUBMITTED,
    gpuship_ring_stat::GPUSHIP_STAT_RESERVE_FAILED,
    gpuship_ring_stat::GPUSHIP_STAT_UNMATCHED_RETURN,
    gpuship_ring_stat::GPUSHIP_STAT_INFLIGHT_FULL,
    gpuship_ring_stat::GPUSHIP_STAT_AGGREGATED,
    gpuship_ring_stat::GPUSHIP_STAT_STATS_FULL,
];

/// A program's per-CPU counters, summed over CPUs, in [`KERNEL_SLOTS`] order.
fn read_kernel_counters(map: &MapHandle) -> [u64; KERNEL_SLOTS.len()] {
    let read = |slot: gpuship_ring_stat| -> u64 {
        let key = slot.0.to_ne_bytes();
        match map.lookup_percpu(&key, MapFlags::ANY) {
            Ok(Some(per_cpu)) => per_cpu
                .iter()
                .filter_map(|bytes| bytes.get(..8).and_then(|b| b.try_into().ok()))
                .map(u64::from_ne_bytes)
                .sum(),
            _ => 0,
        }
    };
    KERNEL_SLOTS.map(read)
}

/// Stores counts summed by [`read_kernel_counters`] into `counters`.
fn store_kernel_counters(counts: &[u64; KERNEL_SLOTS.len()], counters: &RingCounters) {
    let targets = [
        &counters.submitted,
        &counters.lost_in_kernel,
        &counters.unmatched_returns,
        &counters.inflight_full,
        &counters.aggregated,
        &counters.stats_full,
    ];
    for (target, value) in targets.into_iter().zip(counts) {
        target.store(*value, Ordering::Relaxed);
    }
}

impl RingCounters {
    fn snapshot(
        &self,
        ring: &'static str,
        received: u64,
        aggregated_received: u64,
    ) -> RingSnapshot {
        let lost = self.lost_in_kernel.load(Ordering::Relaxed);
        let submitted = self.submitted.load(Ordering::Relaxed);
        let aggregated = self.aggregated.load(Ordering::Relaxed);
        RingSnapshot {
            ring,
            emitted: submitted + lost,
            lost_in_kernel: lost,
            pending_in_ring: submitted.saturating_sub(received),
            received,
            decode_errors: self.decode_errors.load(Ordering::Relaxed),
            unmatched_returns: self.unmatched_returns.load(Ordering::Relaxed),
            inflight_full: self.inflight_full.load(Ordering::Relaxed),
            aggregated,
            aggregated_received,
            aggregated_pending: aggregated.saturating_sub(aggregated_received),
            stats_full: self.stats_full.load(Ordering::Relaxed),
            flight_recorded: self.flight_recorded.load(Ordering::Relaxed),
            unnamed_requests: self.unnamed_requests.load(Ordering::Relaxed),
            unknown_kernel_launches: self.unknown_kernel_launches.load(Ordering::Relaxed),
            kernel_names_dropped: self.kernel_names_dropped.load(Ordering::Relaxed),
        }
    }
}

impl Accounting {
    /// Registers a program's counter map; snapshots read it from then on (the handle keeps the
    /// map alive after the program is unloaded, so the final snapshot reads the final values).
    /// A ring's counts are the sum over every program that ran it: a source restarted by a
    /// reload adds its new program's counts to the old one's.
    pub fn attach_kernel_counters(&self, ring: Ring, map: MapHandle) {
        if let Ok(mut kernel) = self.kernel_counters.lock() {
            kernel.maps.push((ring, map));
        }
    }

    /// Keeps the final counts of every program registered so far and lets go of their maps.
    /// Called once those programs have stopped (a reload restarting the sources), so that
    /// restarts do not pile up maps.
    pub fn retire_kernel_counters(&self) {
        if let Ok(mut kernel) = self.kernel_counters.lock() {
            for (ring, map) in std::mem::take(&mut kernel.maps) {
                let counts = read_kernel_counters(&map);
                let stopped = kernel.stopped[ring.index()].get_or_insert_default();
                stopped
                    .iter_mut()
                    .zip(counts)
                    .for_each(|(sum, n)| *sum += n);
            }
        }
    }

    /// The counters of one ring.
    pub fn ring(&self, ring: Ring) -> &RingCounters {
        &self.rings[ring.index()]
    }

    /// Counts `name`'s events in `stats` from now on. A name that ran before (a sink a reload
    /// replaced) keeps what its earlier instances counted; `opens_spool` says this instance
    /// took over the spool and journal they left.
    pub fn add_sink(&self, name: &str, stats: Arc<SinkStats>, opens_spool: bool) {
        self.sinks.add(name, stats, opens_spool);
    }

    /// Freezes the counters of `name`'s instance, whose run has ended (a reload removed or
    /// replaced it); they stay in every snapshot.
    pub fn retire_sink(&self, name: &str) {
        self.sinks.retire(name);
    }

    /// The running sinks' names and counters.
    pub fn sinks(&self) -> Vec<(String, Arc<SinkStats>)> {
        self.sinks.running()
    }

    /// Copies every counter. Agent-side counters are read before the kernel's, so a record
    /// counted as received is always already counted as submitted: `pending_in_ring` >= 0.
    pub fn snapshot(&self) -> Snapshot {
        let received = Ring::ALL.map(|ring| self.ring(ring).received.load(Ordering::Acquire));
        let aggregated_received =
            Ring::ALL.map(|ring| self.ring(ring).aggregated_received.load(Ordering::Acquire));
        if let Ok(kernel) = self.kernel_counters.lock() {
            for ring in Ring::ALL {
                let stopped = kernel.stopped[ring.index()];
                let mut sums = stopped.unwrap_or_default();
                let mut any = stopped.is_some();
                for (_, map) in kernel.maps.iter().filter(|(r, _)| *r == ring) {
                    let counts = read_kernel_counters(map);
                    sums.iter_mut().zip(counts).for_each(|(sum, n)| *sum += n);
                    any = true;
                }
                if any {
                    store_kernel_counters(&sums, self.ring(ring));
                }
            }
        }
        let (sinks, sink_health) = self.sinks.snapshot();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Snapshot {
            rings: Ring::ALL
                .into_iter()
                .zip(received)
                .zip(aggregated_received)
                .map(|((ring, received), aggregated_received)| {
                    self.ring(ring)
                        .snapshot(ring.name(), received, aggregated_received)
                })
                .collect(),
            kmsg: KmsgSnapshot {
                xids: load(&self.kmsg.xids),
                unpaired_tracepoint: load(&self.xid_unpaired_tracepoint),
                unpaired_kmsg: load(&self.xid_unpaired_kmsg),
                parse_errors: load(&self.kmsg.parse_errors),
                lost_gaps: load(&self.kmsg.lost_gaps),
            },
            sinks,
            sink_health,
            reloads: self.reloads.snapshot(),
            libraries: self.libraries.snapshot(),
            budget: self.budget.snapshot(),
            state_files_set_aside: self.state_files.snapshot(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row per ring, in `Ring::ALL` order, each counting only its own ring.
    #[test]
    fn rings_are_a_table_indexed_by_ring() {
        let accounting = Accounting::default();
        for (n, ring) in Ring::ALL.into_iter().enumerate() {
            accounting
                .ring(ring)
                .received
                .store(n as u64 + 1, Ordering::Relaxed);
            accounting
                .ring(ring)
                .submitted
                .store(n as u64 + 1, Ordering::Relaxed);
        }
        let snapshot = accounting.snapshot();
        let names: Vec<_> = snapshot.rings.iter().map(|r| r.ring).collect();
        assert_eq!(names, ["xid", "cuda", "driver"]);
        for (n, ring) in snapshot.rings.iter().enumerate() {
            assert_eq!(ring.received, n as u64 + 1, "{}", ring.ring);
        }
    }

    #[test]
    fn identities_hold_when_everything_is_accounted() {
        let accounting = Accounting::default();
        let cuda = accounting.ring(Ring::Cuda);
        cuda.submitted.store(10, Ordering::Relaxed);
        cuda.lost_in_kernel.store(2, Ordering::Relaxed);
        cuda.received.store(10, Ordering::Relaxed);
        let snapshot = accounting.snapshot();
        assert_eq!(snapshot.ring("cuda").unwrap().emitted, 12);
        assert!(snapshot.broken_identities().is_empty());
        // Records still in the ring keep the identity.
        cuda.received.store(9, Ordering::Relaxed);
        let snapshot = accounting.snapshot();
        assert_eq!(snapshot.ring("cuda").unwrap().pending_in_ring, 1);
        assert!(snapshot.broken_identities().is_empty());
        // More received than submitted cannot happen; it is reported.
        cuda.received.store(11, Ordering::Relaxed);
        let broken = accounting.snapshot().broken_identities();
        assert_eq!(
            broken,
            vec![
                "ring cuda: emitted 12 != received 11 + lost_in_kernel 2 + pending_in_ring 0"
                    .to_string()
            ]
        );
    }
}
