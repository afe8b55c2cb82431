//! What the ledger's holders become each interval: `cuda_memory` rows (per process and GPU)
//! and the per-GPU sums of the memory gauge.

use std::collections::BTreeMap;
use std::path::Path;

use gpuship_sinks::schema::{CudaMemoryBatchBuilder, CudaMemoryRow, HostIdentity};
use gpuship_sinks::{EventBatch, EventKind};

use super::HolderSnapshot;
use crate::enrich::WorkloadResolver;
use crate::health::xids::GpuLabels;
use crate::health::GpuMemoryHealth;

/// The rows of the live holders (a process that exited gave its memory back with it) and the
/// per-GPU sums; no batch when nothing is held.
pub fn report(
    holders: Vec<HolderSnapshot>,
    proc_dir: &Path,
    identity: HostIdentity,
    workloads: &mut WorkloadResolver,
) -> (Option<EventBatch>, Vec<GpuMemoryHealth>) {
    let time_ns = crate::enrich::now_ns(libc::CLOCK_REALTIME);
    let mut builder = CudaMemoryBatchBuilder::new(identity);
    let mut per_gpu: BTreeMap<GpuLabels, [u64; 5]> = BTreeMap::new();
    let alive = |pid: i32| crate::sources::cuda::process_exists(proc_dir, pid);
    for holder in holders.into_iter().filter(|h| alive(h.pid)) {
        let gpu = holder.gpu.as_deref();
        let labels = GpuLabels {
            uuid: gpu.map_or(String::new(), |g| g.uuid.clone()),
            pci_bus_id: gpu.and_then(|g| g.pci_bus_id.clone()).unwrap_or_default(),
            index: gpu
                .and_then(|g| g.index)
                .map_or(String::new(), |i| i.to_string()),
        };
        let sums = per_gpu.entry(labels).or_default();
        for (sum, bytes) in sums.iter_mut().zip(holder.held.bytes) {
            *sum = sum.saturating_add(bytes);
        }
        builder.append(CudaMemoryRow {
            time_ns,
            pid: holder.pid,
            comm: holder.comm,
            gpu: holder.gpu,
            bytes: holder.held.bytes,
            allocations: holder.held.allocations,
            seen_from_start: holder.complete,
            workload: workloads.resolve(holder.pid).cloned(),
        });
    }
    let sums = per_gpu
        .into_iter()
        .map(|(gpu, bytes)| GpuMemoryHealth { gpu, bytes })
        .collect();
    if builder.is_empty() {
        return (None, sums);
    }
    let batch = match builder.finish() {
        Ok(records) => Some(EventBatch::new(EventKind::CudaMemory, records)),
        Err(err) => {
            tracing::error!(%err, "cuda_memory rows could not be built");
            None
        }
    };
    (batch, sums)
}
