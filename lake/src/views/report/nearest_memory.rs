//! The `cuda_memory` figures of each incident: per process and GPU, the row taken nearest the
//! incident's root XID, on the incident's host. Folded from the scan as it streams: a fleet's
//! day has tens of millions of memory rows and tens of thousands of incidents, so rows are
//! neither held nor compared with every incident. Each row is looked up by its host and pid
//! (the incidents that name that process) and kept only while it is the nearest so far; what
//! is held is one row per incident, process and GPU.

use std::collections::{BTreeMap, HashMap};

use super::data::Incident;
use crate::views::rows::{MemoryBatch, MemoryHeld};

/// Which memory figures of a process (one per GPU) an incident keeps.
type GpuKey = (i32, Option<i32>, Option<String>);

/// pid -> (incident index, root XID time) of the incidents that name the process on one host.
type WantedPids = HashMap<i32, Vec<(usize, i64)>>;

/// The nearest rows found so far for a set of incidents.
#[derive(Debug, Clone, Default)]
pub struct NearestMemory {
    /// host -> pid -> (incident index, root XID time) of the incidents that name the process.
    wanted: HashMap<String, WantedPids>,
    /// Per incident, per (pid, GPU index, GPU UUID): the nearest row seen.
    nearest: Vec<BTreeMap<GpuKey, MemoryHeld>>,
}

/// Whether a row at `time_ns` is nearer `at` than one at `kept_ns`; of two as near, the earlier.
fn nearer(time_ns: i64, kept_ns: i64, at: i64) -> bool {
    let (distance, kept_distance) = (time_ns.abs_diff(at), kept_ns.abs_diff(at));
    distance < kept_distance || (distance == kept_distance && time_ns < kept_ns)
}

impl NearestMemory {
    /// What `incidents` need: each one's processes on its host, around its root XID.
    pub fn for_incidents(incidents: &[Incident]) -> Self {
        let mut wanted: HashMap<String, WantedPids> = HashMap::new();
        for (index, incident) in incidents.iter().enumerate() {
            let pids = wanted.entry(incident.gpu.0.clone()).or_default();
            for process in &incident.detail.processes {
                let named = pids.entry(process.pid).or_default();
                if !named.iter().any(|(i, _)| *i == index) {
                    named.push((index, incident.root.time_ns));
                }
            }
        }
        Self {
            wanted,
            nearest: vec![BTreeMap::new(); incidents.len()],
        }
    }

    /// The pids any incident names, sorted (a filter for the scan).
    pub fn pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .wanted
            .values()
            .flat_map(|p| p.keys().copied())
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Offers every row of `batch`: the nearest of its rows per incident and GPU is found by
    /// index first (a batch is one file's rows, sorted by host and time, so each row would
    /// otherwise beat the one before it and be built), then built and offered once.
    pub fn add_batch(&mut self, batch: &MemoryBatch<'_>) {
        type Candidate<'b> = (usize, i32, Option<i32>, Option<&'b str>);
        let mut best: foldhash::HashMap<Candidate<'_>, (i64, i64, usize)> = Default::default();
        let mut host_run: Option<(&str, Option<&WantedPids>)> = None;
        for i in 0..batch.len() {
            let Some((time_ns, host, pid)) = batch.key(i) else {
                continue;
            };
            let pids = match host_run {
                Some((run, pids)) if run == host => pids,
                _ => {
                    let pids = self.wanted.get(host);
                    host_run = Some((host, pids));
                    pids
                }
            };
            let Some(incidents) = pids.and_then(|pids| pids.get(&pid)) else {
                continue;
            };
            let (gpu_index, gpu_uuid) = batch.gpu(i);
            for &(index, at) in incidents {
                best.entry((index, pid, gpu_index, gpu_uuid))
                    .and_modify(|(kept, _, row)| {
                        if nearer(time_ns, *kept, at) {
                            (*kept, *row) = (time_ns, i);
                        }
                    })
                    .or_insert((time_ns, at, i));
            }
        }
        for ((index, pid, gpu_index, gpu_uuid), (time_ns, at, i)) in best {
            let key: GpuKey = (pid, gpu_index, gpu_uuid.map(str::to_string));
            let kept = self.nearest[index].get(&key);
            if kept.is_none_or(|kept| nearer(time_ns, kept.time_ns, at)) {
                if let Some(row) = batch.row(i) {
                    self.nearest[index].insert(key, row);
                }
            }
        }
    }

    /// Offers rows already built (tests, small inputs).
    pub fn add_rows(&mut self, rows: &[MemoryHeld]) {
        for row in rows {
            let gpu = (row.gpu_index, row.gpu_uuid.as_deref());
            self.offer(row.time_ns, &row.host, row.pid, gpu, || Some(row.clone()));
        }
    }

    /// Keeps the row (built by `row` only when kept) for each incident that names `pid` on
    /// `host`, when it is nearer that incident's root XID than the row kept for the same GPU;
    /// of two rows as near, the earlier.
    fn offer(
        &mut self,
        time_ns: i64,
        host: &str,
        pid: i32,
        (gpu_index, gpu_uuid): (Option<i32>, Option<&str>),
        row: impl Fn() -> Option<MemoryHeld>,
    ) {
        let Some(incidents) = self.wanted.get(host).and_then(|pids| pids.get(&pid)) else {
            return;
        };
        for &(index, at) in incidents {
            let key: GpuKey = (pid, gpu_index, gpu_uuid.map(str::to_string));
            let kept = self.nearest[index].get(&key);
            if kept.is_none_or(|kept| nearer(time_ns, kept.time_ns, at)) {
                if let Some(row) = row() {
                    self.nearest[index].insert(key, row);
                }
            }
        }
    }

    /// Gives each incident its rows, by pid and GPU.
    pub fn attach(self, incidents: &mut [Incident]) {
        for (incident, rows) in incidents.iter_mut().zip(self.nearest) {
            incident.detail.memory = rows.into_values().collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{xid_batch, xid_record};
    use crate::views::report::incident::{Detail, Process};
    use crate::views::rows;

    /// An incident on `host` at `at_ns` naming `pids`.
    fn incident(host: &str, at_ns: i64, pids: &[i32]) -> Incident {
        let root =
            rows::xids(&[xid_batch(&[xid_record(at_ns, 31, "0000:3b:00.0", "", "")])]).remove(0);
        Incident {
            id: format!("{host}-{at_ns}"),
            gpu: (host.to_string(), "0000:3b:00.0".into()),
            root,
            codes: vec![31],
            worst_severity: String::new(),
            affected: Vec::new(),
            failed_calls: 0,
            detail: Detail {
                processes: pids
                    .iter()
                    .map(|&pid| Process {
                        pid,
                        ..Process::default()
                    })
                    .collect(),
                ..Detail::default()
            },
        }
    }

    fn held(host: &str, pid: i32, gpu: i32, time_ns: i64, device_bytes: u64) -> MemoryHeld {
        MemoryHeld {
            time_ns,
            host: host.into(),
            pid,
            comm: "train".into(),
            gpu_uuid: Some(format!("GPU-{gpu}")),
            pci_bus_id: None,
            gpu_index: Some(gpu),
            device_bytes,
            managed_bytes: 0,
            host_pinned_bytes: 0,
            pool_bytes: 0,
            physical_bytes: 0,
            allocations: 1,
            seen_from_start: false,
        }
    }

    #[test]
    fn each_incident_keeps_the_nearest_row_of_its_own_host_per_process_and_gpu() {
        const S: i64 = 1_000_000_000;
        let mut incidents = vec![
            incident("a", 100 * S, &[7, 8]),
            // The same pid on another host: a different process.
            incident("b", 100 * S, &[7]),
        ];
        let mut nearest = NearestMemory::for_incidents(&incidents);
        assert_eq!(nearest.pids(), [7, 8]);
        nearest.add_rows(&[
            held("a", 7, 0, 80 * S, 1),
            held("a", 7, 0, 95 * S, 2),
            held("a", 7, 0, 130 * S, 3),
            // As near as 95 s, later: the earlier one stays.
            held("a", 7, 0, 105 * S, 4),
            held("a", 7, 1, 200 * S, 5),
            held("a", 9, 0, 100 * S, 6),
            held("b", 7, 0, 99 * S, 7),
            held("c", 7, 0, 100 * S, 8),
        ]);
        nearest.attach(&mut incidents);
        let kept = |i: usize| -> Vec<(i32, Option<i32>, u64)> {
            incidents[i]
                .detail
                .memory
                .iter()
                .map(|m| (m.pid, m.gpu_index, m.device_bytes))
                .collect()
        };
        assert_eq!(kept(0), [(7, Some(0), 2), (7, Some(1), 5)]);
        assert_eq!(kept(1), [(7, Some(0), 7)]);
    }

    #[test]
    fn a_batch_gives_what_its_rows_give() {
        let rows = [
            held("a", 7, 0, 3_000, 1),
            held("a", 7, 0, 1_500, 2),
            held("a", 8, 2, 900, 3),
        ];
        let batch = crate::views::fixtures::memory_batch(&rows);
        let mut incidents = vec![incident("a", 1_000, &[7, 8])];
        let mut from_batch = NearestMemory::for_incidents(&incidents);
        from_batch.add_batch(&MemoryBatch::new(&batch));
        let mut from_rows = NearestMemory::for_incidents(&incidents);
        from_rows.add_rows(&rows);
        let mut twin = incidents.clone();
        from_batch.attach(&mut incidents);
        from_rows.attach(&mut twin);
        assert_eq!(incidents[0].detail.memory, twin[0].detail.memory);
        assert_eq!(
            incidents[0].detail.memory,
            [rows[1].clone(), rows[2].clone()]
        );
    }

    #[test]
    fn batches_keep_the_nearest_row_and_the_earlier_of_two_as_near_in_any_order() {
        const S: i64 = 1_000_000_000;
        let rows = [
            // Within one batch, and across batches, ties go to the earlier row.
            vec![
                held("a", 7, 0, 105 * S, 4),
                held("a", 7, 0, 95 * S, 2),
                held("a", 7, 0, 130 * S, 3),
            ],
            vec![
                held("a", 7, 0, 105 * S, 9),
                held("a", 7, 1, 200 * S, 5),
                held("a", 7, 0, 80 * S, 1),
            ],
        ];
        let mut incidents = vec![incident("a", 100 * S, &[7]), incident("a", 130 * S, &[7])];
        let mut from_batches = NearestMemory::for_incidents(&incidents);
        for part in &rows {
            let batch = crate::views::fixtures::memory_batch(part);
            from_batches.add_batch(&MemoryBatch::new(&batch));
        }
        let mut from_rows = NearestMemory::for_incidents(&incidents);
        from_rows.add_rows(&rows.concat());
        let mut twin = incidents.clone();
        from_batches.attach(&mut incidents);
        from_rows.attach(&mut twin);
        let kept = |incidents: &[Incident], i: usize| -> Vec<(Option<i32>, u64)> {
            incidents[i]
                .detail
                .memory
                .iter()
                .map(|m| (m.gpu_index, m.device_bytes))
                .collect()
        };
        assert_eq!(kept(&incidents, 0), [(Some(0), 2), (Some(1), 5)]);
        assert_eq!(kept(&incidents, 1), [(Some(0), 3), (Some(1), 5)]);
        for i in 0..2 {
            assert_eq!(incidents[i].detail.memory, twin[i].detail.memory);
        }
    }
}
