//! What the CUDA source sends on its timer rather than per record: the `cuda_stats` rows of a
//! finished statistics interval, the `cuda_memory` rows and gauge, and the flight recorder's
//! rows when an incident starts.

use std::time::Instant;

use super::CudaCapture;
use crate::accounting::Ring;
use crate::decode::c_chars;
use crate::sources::cuda::kernels::rows::{self as kernel_rows, Resolved};
use crate::sources::cuda::memory::report as memory_report;
use crate::sources::cuda::recorder;
use crate::sources::output::LaunchHistory;

impl CudaCapture<'_> {
    /// Flips the statistics generation when an interval ends and sends the rows of the one
    /// that ended before (every generation when `all`: the probes are detached).
    pub(super) fn poll_stats(&mut self, now: Instant, all: bool) {
        let Some(stats) = self.stats.as_mut() else {
            return;
        };
        let probes = &self.probes;
        let polled = stats.poll(
            now,
            all,
            &probes.skel.maps.call_stats,
            &probes.functions,
            &mut self.workloads,
            self.accounting.ring(Ring::Cuda),
            &mut || probes.budget_fractions(),
        );
        // Their successful calls count in the summary and the live view like rows do (their
        // failures came as rows).
        for entry in &polled.succeeded {
            let name = self
                .probes
                .functions
                .name(entry.function_id)
                .unwrap_or("unknown");
            self.calls.record_aggregate(
                entry.function_id,
                name,
                entry.calls,
                entry.duration_sum_ns,
                entry.bytes_sum,
                &entry.durations,
            );
            self.view.calls(entry.pid, &entry.comm, entry.calls);
        }
        if let Some(generation) = polled.flipped {
            match self.probes.skel.maps.bss_data.as_deref_mut() {
                Some(bss) => bss.stats_generation = generation,
                None => tracing::error!(
                    "the CUDA program has no .bss: statistics intervals cannot advance"
                ),
            }
        }
        if let Some(batch) = polled.batch {
            self.outputs.batches.emit(batch);
        }
    }

    /// Writes what each process holds per GPU (`cuda_memory` rows) and the per-GPU sums (the
    /// memory metric), once an interval has passed or when `all`.
    pub(super) fn report_memory(&mut self, now: Instant, all: bool) {
        if !all && now.duration_since(self.memory_reported_at) < self.memory_interval {
            return;
        }
        self.memory_reported_at = now;
        let (batch, per_gpu) = memory_report::report(
            self.memory.holders(),
            &self.proc_dir,
            self.identity.clone(),
            &mut self.workloads,
        );
        self.view.memory(per_gpu);
        if let Some(batch) = batch {
            self.outputs.batches.emit(batch);
        }
    }

    /// The overhead budget's tick, with the processes of incidents since the last one probed
    /// in full from now on.
    pub(super) fn budget_tick(&mut self, now: Instant) {
        if !self.boosts.is_empty() {
            self.probes.budget_boost(&self.boosts, now);
            self.boosts.clear();
        }
        self.probes.budget_tick(now, &[]);
    }

    /// Writes the flight recorder's calls of every process an incident just started for.
    pub(super) fn write_flight_recorder(&mut self) {
        let links = self.outputs.attribution.incident_links();
        // An XID's processes are probed in full for a while (the budget), recorder or not.
        self.boosts
            .extend(links.iter().map(|(pid, _, _)| *pid as u32));
        let Some(plan) = self.recorder.as_mut() else {
            return;
        };
        for (pid, incident, xid_ns) in links {
            plan.xid_incident(pid, incident, xid_ns);
        }
        let dumps = plan.take();
        if dumps.is_empty() {
            return;
        }
        let (calls, torn) = recorder::read_calls(&self.probes.skel.maps.recorder);
        let Self {
            decoder,
            batcher,
            workloads,
            outputs,
            accounting,
            history,
            devices,
            ..
        } = self;
        let mut unknown_launches = 0;
        for dump in &dumps {
            let mut rows = 0u64;
            for event in calls.iter().filter(|e| e.pid as i32 == dump.pid) {
                let comm = c_chars(&event.comm);
                let Ok(mut row) = decoder.cuda_row(event, &comm) else {
                    continue;
                };
                if !(dump.from_ns..=dump.until_ns).contains(&row.time_ns) {
                    continue;
                }
                row.workload = workloads.resolve(row.pid).map(|w| &**w);
                let role = history.role(event.function_id);
                let resolved = kernel_rows::resolve_at(&history.lock().kernels, role, &row);
                unknown_launches += u64::from(resolved == Resolved::Unknown);
                kernel_rows::apply(&mut row, &resolved);
                row.objects.gpu = devices.gpu_of(row.pid, row.tid).map(|g| &**g);
                if let Some(batch) = batcher.push_flight_recorded(&row, &dump.incident) {
                    outputs.batches.emit(batch);
                }
                rows += 1;
            }
            accounting
                .ring(Ring::Cuda)
                .flight_recorded
                .fetch_add(rows, std::sync::atomic::Ordering::Relaxed);
            // Under the overhead budget the slots hold only the calls of its windows.
            let sampled = history.launches_sampled_before(dump.pid, dump.until_ns);
            tracing::warn!(
                pid = dump.pid,
                incident_id = %dump.incident,
                rows,
                torn_slots = torn,
                sampled,
                "flight recorder: the process's calls before the incident written"
            );
        }
        accounting
            .ring(Ring::Cuda)
            .unknown_kernel_launches
            .fetch_add(unknown_launches, std::sync::atomic::Ordering::Relaxed);
        // Sent at once: an incident's rows should not wait for the batch timeout.
        if let Some(batch) = batcher.flush() {
            outputs.batches.emit(batch);
        }
    }
}
