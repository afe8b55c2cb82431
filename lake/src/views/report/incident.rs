//! What the report says of one incident beyond its row in the table: its XIDs, the processes
//! they hit (with pod and container), the root XID's suspect kernels, the calls the flight
//! recorder wrote for it, the failed calls of its processes and the memory they held. Computed
//! here from the rows; [`super::incident_html`] renders it.

use std::collections::BTreeMap;

use super::data::Incident;
use crate::views::rows::{CudaCall, MemoryHeld, Suspect, Xid};

/// How long before its first XID a failed call of an incident's process is shown with it
/// (calls carrying the incident's id are shown whenever they happened): an out-of-memory
/// failure or a sticky error shortly before the XID is usually part of the story.
pub const FAILURES_BEFORE_NS: i64 = 60_000_000_000;

/// An incident's details.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Detail {
    /// Its XIDs, oldest first.
    pub xids: Vec<Xid>,
    /// The processes its XIDs hit, in the order they name them.
    pub processes: Vec<Process>,
    /// The suspects of its first XID that lists any, most recent launch first, and that XID's
    /// code.
    pub suspects: Vec<Suspect>,
    pub suspects_of: Option<u32>,
    /// The overhead budget sampled the launches those suspects come from: the faulting one may
    /// be missing (`xid.suspects_sampled`).
    pub suspects_sampled: bool,
    /// The flight recorder's calls carrying its id, oldest first.
    pub recorded: Vec<CudaCall>,
    /// Failed calls (recorded as they happened) carrying its id, or of its processes on its
    /// host in the [`FAILURES_BEFORE_NS`] before its first XID; oldest first.
    pub failed: Vec<CudaCall>,
    /// Per process and GPU, the `cuda_memory` figures taken nearest its first XID.
    pub memory: Vec<MemoryHeld>,
}

/// A process an incident's XIDs hit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Process {
    pub pid: i32,
    /// From the XID that attributed it, else from its calls; empty when neither says.
    pub comm: String,
    /// `namespace/name` of its Kubernetes pod.
    pub pod: Option<String>,
    pub container_id: Option<String>,
    /// How the XID found it (`driver_log`, `cuda_activity`); None for a process only listed
    /// in `affected_pids`.
    pub attribution: Option<String>,
}

/// The processes `members` name, attributed ones with what their XID says of them.
pub fn processes(members: &[&Xid]) -> Vec<Process> {
    let mut processes: Vec<Process> = Vec::new();
    for xid in members {
        for pid in super::data::named_pids(xid) {
            let attributed = xid.pid == Some(pid);
            match processes.iter_mut().find(|p| p.pid == pid) {
                Some(known) if attributed && known.attribution.is_none() => {
                    *known = attributed_process(xid, pid);
                }
                Some(_) => {}
                None if attributed => processes.push(attributed_process(xid, pid)),
                None => processes.push(Process {
                    pid,
                    ..Process::default()
                }),
            }
        }
    }
    processes
}

fn attributed_process(xid: &Xid, pid: i32) -> Process {
    Process {
        pid,
        comm: xid.comm.clone().unwrap_or_default(),
        pod: xid.pod.clone(),
        container_id: xid.container_id.clone(),
        attribution: xid.attribution.clone(),
    }
}

/// The first of `members` (oldest first) that lists suspects: its code, its suspects, and
/// whether they come from sampled launches.
pub fn suspects(members: &[&Xid]) -> (Option<u32>, Vec<Suspect>, bool) {
    members
        .iter()
        .find(|x| !x.suspects.is_empty())
        .map_or((None, Vec::new(), false), |x| {
            (
                Some(x.code),
                x.suspects.clone(),
                x.suspects_sampled == Some(true),
            )
        })
}

/// Adds to each incident the flight recorder's calls and the failed calls that belong to it
/// (see [`Detail`]), and names processes without a name from their calls.
pub fn attach_calls(incidents: &mut [Incident], calls: &[CudaCall]) {
    let by_id: BTreeMap<String, usize> = incidents
        .iter()
        .enumerate()
        .map(|(i, incident)| (incident.id.clone(), i))
        .collect();
    for call in calls {
        let owner = call.incident_id.as_deref().and_then(|id| by_id.get(id));
        if call.flight_recorder {
            if let Some(&i) = owner {
                incidents[i].detail.recorded.push(call.clone());
            }
            continue;
        }
        if !call.failed() {
            continue;
        }
        match owner {
            Some(&i) => incidents[i].detail.failed.push(call.clone()),
            None => {
                for incident in incidents.iter_mut().filter(|i| shortly_before(i, call)) {
                    incident.detail.failed.push(call.clone());
                }
            }
        }
    }
    for incident in incidents.iter_mut() {
        let detail = &mut incident.detail;
        for process in detail.processes.iter_mut().filter(|p| p.comm.is_empty()) {
            let mut calls = detail.recorded.iter().chain(&detail.failed);
            let named = calls.find(|c| c.pid == process.pid && !c.comm.is_empty());
            if let Some(call) = named {
                process.comm = call.comm.clone();
            }
        }
        detail.recorded.sort_by_key(|c| (c.time_ns, c.tid));
        detail.failed.sort_by_key(|c| (c.time_ns, c.pid, c.tid));
    }
}

/// A failed call without an incident id of one of `incident`'s processes, on its host, in the
/// [`FAILURES_BEFORE_NS`] up to its first XID.
fn shortly_before(incident: &Incident, call: &CudaCall) -> bool {
    let start = incident
        .detail
        .xids
        .first()
        .map_or(incident.root.time_ns, |x| x.time_ns);
    call.host == incident.gpu.0
        && incident.detail.processes.iter().any(|p| p.pid == call.pid)
        && call.time_ns <= start
        && call.time_ns >= start.saturating_sub(FAILURES_BEFORE_NS)
}
