//! What the report shows, computed from the lake's rows: per-GPU timelines of XIDs and of the
//! CUDA failures of the processes they hit, incidents, per-function call statistics. No
//! formatting here; [`super::html`] and [`super::timeline`] render it. Per-function call
//! statistics (from `cuda` rows and `cuda_stats` aggregates) are in [`super::functions`], the
//! timeline's lanes in [`super::lanes`], the flight recorder's rows in
//! [`super::flight_recorder`].

use std::collections::{BTreeMap, BTreeSet};

use super::flight_recorder::{self, RecordedCalls};
use super::functions::{self, FunctionStats};
use super::incident::{self, Detail};
use super::lanes;
use crate::views::cuda_stats::CudaStats;
use crate::views::rows::{CudaCall, Xid};
use crate::{AccountingTotals, TimeRange, Unreadable};

/// A GPU: host and PCI bus id.
pub type GpuKey = (String, String);

/// Everything the report shows.
#[derive(Debug, Clone)]
pub struct ReportData {
    /// Where the rows came from.
    pub location: String,
    /// The range asked for.
    pub range: TimeRange,
    /// Hosts that wrote any row of the range.
    pub hosts: Vec<String>,
    /// Row and file counts.
    pub totals: Totals,
    /// One timeline per GPU that reported an XID.
    pub gpus: Vec<GpuTimeline>,
    /// Processes with failed calls or flight-recorder calls that no XID links to a GPU.
    pub unlinked: Vec<ProcessLane>,
    /// XID incidents, oldest first.
    pub incidents: Vec<Incident>,
    /// The flight recorder's calls per incident and process, oldest first.
    pub flight_recorder: Vec<RecordedCalls>,
    /// Per CUDA function, most called first.
    pub functions: Vec<FunctionStats>,
    /// Delivery counters from the lake's accounting documents.
    pub accounting: AccountingTotals,
}

/// Counts for the header.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    /// XID rows.
    pub xids: usize,
    /// CUDA calls: `cuda` rows and the calls of `cuda_stats` aggregates, each call once
    /// (functions.rs).
    pub cuda_calls: u64,
    /// Calls that returned an error.
    pub cuda_failures: u64,
    /// Calls counted from `cuda_stats` aggregates.
    pub cuda_aggregated: u64,
    /// Rows the flight recorder wrote (copies, not in the counts above).
    pub flight_recorded: u64,
    /// Driver operation rows.
    pub driver_ops: usize,
    /// Parquet files read.
    pub files_read: usize,
    /// Files that could not be read (their rows are missing).
    pub unreadable: Vec<Unreadable>,
}

/// One GPU's XIDs and the processes they affected.
#[derive(Debug, Clone)]
pub struct GpuTimeline {
    /// Host and bus id.
    pub key: GpuKey,
    /// `GPU-...`, when the agent knew it.
    pub uuid: Option<String>,
    /// Model name, when the agent knew it.
    pub model: Option<String>,
    /// Its XIDs, oldest first.
    pub xids: Vec<Xid>,
    /// Processes its XIDs named or whose failed calls share its incidents.
    pub processes: Vec<ProcessLane>,
}

/// One process's failed CUDA calls and flight-recorder windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessLane {
    /// Process id.
    pub pid: i32,
    /// Its name (from the XID or its calls).
    pub comm: String,
    /// Failed calls, oldest first.
    pub failures: Vec<CudaCall>,
    /// The flight recorder's calls of this process, one window per incident, oldest first.
    pub recorded: Vec<RecordedCalls>,
}

impl ProcessLane {
    /// A lane with nothing on it yet.
    pub fn new(pid: i32, comm: &str) -> Self {
        Self {
            pid,
            comm: comm.to_string(),
            failures: Vec::new(),
            recorded: Vec::new(),
        }
    }
}

/// A cascade of XIDs on one GPU.
#[derive(Debug, Clone)]
pub struct Incident {
    /// `incident_id` (or, for rows without one, host/bus/time of the XID).
    pub id: String,
    /// Host and bus id.
    pub gpu: GpuKey,
    /// The root-cause candidate: the row marked `root_candidate`, else the first.
    pub root: Xid,
    /// Codes in time order.
    pub codes: Vec<u32>,
    /// The most severe severity in the cascade.
    pub worst_severity: String,
    /// Processes named by its XIDs, with names.
    pub affected: Vec<(i32, String)>,
    /// Failed CUDA calls carrying its id.
    pub failed_calls: usize,
    /// Its XIDs, processes, suspects, the flight recorder's calls, failed calls and memory.
    pub detail: Detail,
}

/// Rank of a severity, for "worst of".
pub fn severity_rank(severity: &str) -> u8 {
    match severity {
        "fatal" => 4,
        "error" => 3,
        "warning" => 2,
        "info" => 1,
        _ => 0,
    }
}

/// The report of these rows, every call and aggregate in memory.
pub fn aggregate(
    location: String,
    range: TimeRange,
    (calls, stats): (&[CudaCall], &[CudaStats]),
    xids: &[Xid],
    totals: Totals,
    hosts: BTreeSet<String>,
    accounting: AccountingTotals,
) -> ReportData {
    let mut data = without_functions(location, range, calls, xids, totals, hosts, accounting);
    data.functions = functions::per_function(calls, stats, range.seconds());
    data
}

/// The report of these rows, its per-function statistics left empty for the caller (the
/// engine computes them where the rows are). Only failed calls recorded as they happened and
/// the flight recorder's calls matter here, so `calls` need hold no other.
pub fn without_functions(
    location: String,
    range: TimeRange,
    calls: &[CudaCall],
    xids: &[Xid],
    totals: Totals,
    hosts: BTreeSet<String>,
    accounting: AccountingTotals,
) -> ReportData {
    // The flight recorder's copy of a failed call is not another failure.
    let failures: Vec<&CudaCall> = calls
        .iter()
        .filter(|c| c.failed() && !c.flight_recorder)
        .collect();
    let mut incidents = incidents(xids, &failures);
    incident::attach_calls(&mut incidents, calls);
    let flight_recorder = flight_recorder::summarize(calls, &incidents);
    let (gpus, unlinked) = lanes::timelines(xids, &failures, &flight_recorder);
    ReportData {
        location,
        range,
        hosts: hosts.into_iter().collect(),
        totals,
        gpus,
        unlinked,
        incidents,
        flight_recorder,
        functions: Vec::new(),
        accounting,
    }
}

pub(super) fn gpu_of(xid: &Xid) -> GpuKey {
    (xid.host.clone(), xid.pci_bus_id.clone())
}

fn incident_id(xid: &Xid) -> String {
    xid.incident_id
        .clone()
        .unwrap_or_else(|| format!("{}/{}/{}", xid.host, xid.pci_bus_id, xid.time_ns))
}

/// What the report says of `pid` beside the number: the XID's process name and pod when the
/// XID was attributed to it, else nothing.
fn process_label(xid: &Xid, pid: i32) -> String {
    if xid.pid != Some(pid) {
        return String::new();
    }
    let comm = xid.comm.clone().unwrap_or_default();
    match &xid.pod {
        Some(pod) => format!("{comm} (pod {pod})").trim_start().to_string(),
        None => comm,
    }
}

pub(super) fn named_pids(xid: &Xid) -> impl Iterator<Item = i32> + '_ {
    xid.pid.into_iter().chain(xid.affected_pids.iter().copied())
}

fn incidents(xids: &[Xid], failures: &[&CudaCall]) -> Vec<Incident> {
    let mut groups: BTreeMap<String, Vec<&Xid>> = BTreeMap::new();
    for xid in xids {
        groups.entry(incident_id(xid)).or_default().push(xid);
    }
    let mut failed: BTreeMap<&str, usize> = BTreeMap::new();
    for call in failures {
        if let Some(id) = &call.incident_id {
            *failed.entry(id.as_str()).or_default() += 1;
        }
    }
    let mut incidents: Vec<Incident> = groups
        .into_iter()
        .filter_map(|(id, members)| {
            let first = *members.first()?;
            let root = members
                .iter()
                .find(|x| x.root_candidate == Some(true))
                .copied()
                .unwrap_or(first);
            let worst_severity = members
                .iter()
                .map(|x| x.display_severity())
                .max_by_key(|s| severity_rank(s))
                .unwrap_or_default();
            let mut affected: Vec<(i32, String)> = Vec::new();
            for xid in &members {
                for pid in named_pids(xid) {
                    if !affected.iter().any(|(p, _)| *p == pid) {
                        affected.push((pid, process_label(xid, pid)));
                    }
                }
            }
            let (suspects_of, suspects, suspects_sampled) = incident::suspects(&members);
            let detail = Detail {
                xids: members.iter().map(|x| (*x).clone()).collect(),
                processes: incident::processes(&members),
                suspects,
                suspects_of,
                suspects_sampled,
                ..Detail::default()
            };
            Some(Incident {
                detail,
                failed_calls: failed.get(id.as_str()).copied().unwrap_or(0),
                gpu: gpu_of(root),
                root: root.clone(),
                codes: members.iter().map(|x| x.code).collect(),
                worst_severity,
                affected,
                id,
            })
        })
        .collect();
    incidents.sort_by(|a, b| a.root.time_ns.cmp(&b.root.time_ns).then(a.id.cmp(&b.id)));
    incidents
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row, recorded_batch, xid_batch, xid_record};
    use crate::views::rows::{cuda_calls, xids};

    #[test]
    fn xids_group_into_incidents_and_failures_land_on_their_gpu() {
        let bus = "0000:3b:00.0";
        let mut cascade = vec![
            xid_record(1_000, 31, bus, "error", "fault"),
            xid_record(2_000, 13, bus, "error", "warp"),
            xid_record(5_000, 79, "0000:86:00.0", "fatal", "off the bus"),
        ];
        cascade[1].annotations.incident_id = cascade[0].annotations.incident_id.clone();
        cascade[1].annotations.root_candidate = Some(false);
        cascade[2].pid = None;
        cascade[2].annotations.affected_pids.clear();
        cascade[0].annotations.workload =
            Some(std::sync::Arc::new(gpuship_sinks::schema::Workload {
                pod_name: Some("trainer-0".into()),
                pod_namespace: Some("ml-team".into()),
                ..Default::default()
            }));
        let xids = xids(&[xid_batch(&cascade)]);
        assert_eq!(xids[0].pod.as_deref(), Some("ml-team/trainer-0"));
        assert_eq!(xids[1].pod, None);
        let mut failing = cuda_row(3_000, "cuCtxSynchronize", 700, 10);
        failing.pid = 100;
        let mut stranger = cuda_row(4_000, "cuMemAlloc_v2", 2, 10);
        stranger.pid = 555;
        let mut calls = cuda_calls(&[cuda_batch(&[
            failing,
            stranger,
            cuda_row(3_500, "cuCtxSynchronize", 0, 30),
        ])]);
        let incident = xids[0].incident_id.clone().unwrap();
        calls[0].incident_id = Some(incident.clone());
        // The flight recorder's copies of the failed call and of a launch before it.
        calls.extend(cuda_calls(&[recorded_batch(
            &[cuda_row(2_900, "cuLaunchKernel", 0, 10), failing],
            &incident,
        )]));
        let since = chrono::DateTime::from_timestamp_nanos(0);
        let range = TimeRange::new(since, since + chrono::Duration::seconds(1)).unwrap();
        let data = without_functions(
            "/data".into(),
            range,
            &calls,
            &xids,
            Totals::default(),
            BTreeSet::new(),
            AccountingTotals::default(),
        );

        let incidents = &data.incidents;
        assert_eq!(incidents.len(), 2);
        assert_eq!(
            (incidents[0].root.code, incidents[0].codes.clone()),
            (31, vec![31, 13])
        );
        assert_eq!(
            incidents[0].affected,
            [(100, "train (pod ml-team/trainer-0)".to_string())]
        );
        assert_eq!(incidents[0].failed_calls, 1, "the copy is not a failure");
        assert_eq!(incidents[1].worst_severity, "fatal");
        assert_eq!(incidents[1].root.display_action(), "reboot_node");

        let window = &data.flight_recorder[..];
        assert_eq!(window.len(), 1);
        assert_eq!(
            (window[0].calls, window[0].failed, window[0].pid),
            (2, 1, 100)
        );
        assert_eq!(
            window[0].started_by.as_deref(),
            Some("XID 31 (GPU MMU page fault) on 0000:3b:00.0")
        );
        let gpus = &data.gpus;
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].key.1, bus);
        assert_eq!(gpus[0].processes.len(), 1);
        let lane = &gpus[0].processes[0];
        assert_eq!((lane.failures.len(), lane.recorded.len()), (1, 1));
        assert!(gpus[1].processes.is_empty());
        assert_eq!(data.unlinked.len(), 1);
        assert_eq!(data.unlinked[0].pid, 555);
    }
}
