//! Which lane of the timeline each marker goes on. Every GPU that reported an XID is a band,
//! and every process its XIDs named (`pid`, `affected_pids`) a lane of it. A failed call, or a
//! window of the flight recorder's calls, goes on its process's lane of the GPU whose XIDs share
//! its `incident_id`, else on its process's lane of every GPU whose XIDs named the process;
//! what no XID links to a GPU gets a lane of its own, below the bands.

use std::collections::{BTreeMap, BTreeSet};

use super::data::{gpu_of, named_pids, GpuKey, GpuTimeline, ProcessLane};
use super::flight_recorder::RecordedCalls;
use crate::views::rows::{CudaCall, Xid};

/// What the XIDs link to a GPU: incidents, and the processes they named.
#[derive(Default)]
struct Links {
    by_incident: BTreeMap<String, GpuKey>,
    by_process: BTreeMap<(String, i32), BTreeSet<GpuKey>>,
}

impl Links {
    /// The GPUs a marker of `pid` on `host`, of `incident`, belongs to.
    fn targets(&self, incident: Option<&str>, host: &str, pid: i32) -> Vec<GpuKey> {
        if let Some(key) = incident.and_then(|id| self.by_incident.get(id)) {
            return vec![key.clone()];
        }
        self.by_process
            .get(&(host.to_string(), pid))
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// A marker to place on a lane.
enum Marker<'a> {
    Failure(&'a CudaCall),
    Recorded(&'a RecordedCalls),
}

impl Marker<'_> {
    /// (incident, host, pid, comm) of the marker's process.
    fn owner(&self) -> (Option<&str>, &str, i32, &str) {
        match self {
            Marker::Failure(c) => (c.incident_id.as_deref(), &c.host, c.pid, &c.comm),
            Marker::Recorded(r) => (
                Some(r.incident_id.as_str()).filter(|id| !id.is_empty()),
                &r.host,
                r.pid,
                &r.comm,
            ),
        }
    }

    fn add_to(&self, lane: &mut ProcessLane) {
        match self {
            Marker::Failure(c) => lane.failures.push((*c).clone()),
            Marker::Recorded(r) => lane.recorded.push((*r).clone()),
        }
    }
}

/// The GPU bands and the lanes without a GPU for these XIDs, failed calls (oldest first) and
/// flight-recorder windows.
pub(super) fn timelines(
    xids: &[Xid],
    failures: &[&CudaCall],
    recorded: &[RecordedCalls],
) -> (Vec<GpuTimeline>, Vec<ProcessLane>) {
    let mut gpus: BTreeMap<GpuKey, GpuTimeline> = BTreeMap::new();
    let mut links = Links::default();
    let mut lanes: BTreeMap<(GpuKey, i32), ProcessLane> = BTreeMap::new();
    for xid in xids {
        let key = gpu_of(xid);
        let gpu = gpus.entry(key.clone()).or_insert_with(|| GpuTimeline {
            key: key.clone(),
            uuid: None,
            model: None,
            xids: Vec::new(),
            processes: Vec::new(),
        });
        gpu.uuid = gpu.uuid.take().or_else(|| xid.gpu_uuid.clone());
        gpu.model = gpu.model.take().or_else(|| xid.gpu_model.clone());
        gpu.xids.push(xid.clone());
        if let Some(id) = &xid.incident_id {
            links.by_incident.insert(id.clone(), key.clone());
        }
        for pid in named_pids(xid) {
            links
                .by_process
                .entry((xid.host.clone(), pid))
                .or_default()
                .insert(key.clone());
            let comm = (xid.pid == Some(pid)).then(|| xid.comm.clone()).flatten();
            let lane = lanes
                .entry((key.clone(), pid))
                .or_insert_with(|| ProcessLane::new(pid, ""));
            if lane.comm.is_empty() {
                lane.comm = comm.unwrap_or_default();
            }
        }
    }
    let mut unlinked: BTreeMap<i32, ProcessLane> = BTreeMap::new();
    let markers = failures
        .iter()
        .map(|c| Marker::Failure(c))
        .chain(recorded.iter().map(Marker::Recorded));
    for marker in markers {
        let (incident, host, pid, comm) = marker.owner();
        let targets = links.targets(incident, host, pid);
        if targets.is_empty() {
            let lane = unlinked
                .entry(pid)
                .or_insert_with(|| ProcessLane::new(pid, comm));
            marker.add_to(lane);
        }
        for key in targets {
            let lane = lanes
                .entry((key, pid))
                .or_insert_with(|| ProcessLane::new(pid, comm));
            if lane.comm.is_empty() {
                lane.comm = comm.to_string();
            }
            marker.add_to(lane);
        }
    }
    for ((key, _), lane) in lanes {
        if let Some(gpu) = gpus.get_mut(&key) {
            gpu.processes.push(lane);
        }
    }
    (
        gpus.into_values().collect(),
        unlinked.into_values().collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row, recorded_batch, xid_batch, xid_record};
    use crate::views::report::flight_recorder::summarize;
    use crate::views::rows::{cuda_calls, xids};

    /// A failure and a flight-recorder window of the XID's process land on its GPU; a
    /// stranger's failure and a window of an incident no XID of the range has get lanes of
    /// their own; a GPU whose XID named nobody has no lane.
    #[test]
    fn failures_and_recorded_windows_land_on_their_gpu() {
        let bus = "0000:3b:00.0";
        let mut bystander = xid_record(5_000, 79, "0000:86:00.0", "fatal", "off the bus");
        bystander.pid = None;
        bystander.annotations.affected_pids.clear();
        let xids = xids(&[xid_batch(&[
            xid_record(1_000, 31, bus, "error", "fault"),
            bystander,
        ])]);
        let incident = xids[0].incident_id.clone().unwrap();
        let mut stranger = cuda_row(4_000, "cuMemAlloc_v2", 2, 10);
        stranger.pid = 555;
        let mut calls = cuda_calls(&[cuda_batch(&[
            cuda_row(3_000, "cuCtxSynchronize", 700, 10),
            stranger,
        ])]);
        let mut elsewhere = cuda_row(6_000, "cuLaunchKernel", 0, 10);
        elsewhere.pid = 777;
        calls.extend(cuda_calls(&[
            recorded_batch(
                &[
                    cuda_row(500, "cuLaunchKernel", 0, 10),
                    cuda_row(900, "cuLaunchKernel", 0, 10),
                ],
                &incident,
            ),
            recorded_batch(&[elsewhere], "node-a/pid/777/6500"),
        ]));
        let failures: Vec<&CudaCall> = calls
            .iter()
            .filter(|c| c.failed() && !c.flight_recorder)
            .collect();
        let recorded = summarize(&calls, &[]);
        assert_eq!(recorded.len(), 2);
        let (gpus, unlinked) = timelines(&xids, &failures, &recorded);
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].key.1, bus);
        let lane = &gpus[0].processes[..];
        assert_eq!(lane.len(), 1);
        assert_eq!((lane[0].pid, lane[0].failures.len()), (100, 1));
        assert_eq!(lane[0].recorded.len(), 1);
        assert_eq!(
            (lane[0].recorded[0].calls, lane[0].recorded[0].first_ns),
            (2, 500)
        );
        assert!(gpus[1].processes.is_empty());
        let lone: Vec<(i32, usize, usize)> = unlinked
            .iter()
            .map(|l| (l.pid, l.failures.len(), l.recorded.len()))
            .collect();
        assert_eq!(lone, [(555, 1, 0), (777, 0, 1)]);
    }
}
