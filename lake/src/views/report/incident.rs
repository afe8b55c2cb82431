//! What the report says of one incident beyond its row in the table: its XIDs, the processes
//! they hit (with pod and container), the root XID's suspect kernels, the calls the flight
//! recorder wrote for it, the failed calls of its processes and the memory they held. Computed
//! here from the rows; [`super::incident_html`] renders it.

use std::collections::BTreeMap;
#[cfg(test)]
use std::collections::BTreeSet;

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
    let before = StartsByProcess::new(incidents);
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
                for i in before.incidents_of(call) {
                    incidents[i].detail.failed.push(call.clone());
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

/// Each incident's start (its first XID) by the host and pid of each of its processes, to find
/// the incidents a failed call without an incident id belongs to: one of their processes, on
/// their host, in the [`FAILURES_BEFORE_NS`] up to the start. Looked up per call, not compared
/// with every incident (a fleet's day has tens of thousands of each).
struct StartsByProcess {
    /// host -> pid -> (start, incident index), by start.
    starts: BTreeMap<String, BTreeMap<i32, Vec<(i64, usize)>>>,
}

impl StartsByProcess {
    fn new(incidents: &[Incident]) -> Self {
        let mut starts: BTreeMap<String, BTreeMap<i32, Vec<(i64, usize)>>> = BTreeMap::new();
        for (index, incident) in incidents.iter().enumerate() {
            let start = incident
                .detail
                .xids
                .first()
                .map_or(incident.root.time_ns, |x| x.time_ns);
            let host = starts.entry(incident.gpu.0.clone()).or_default();
            for process in &incident.detail.processes {
                let entries = host.entry(process.pid).or_default();
                if !entries.contains(&(start, index)) {
                    entries.push((start, index));
                }
            }
        }
        for entries in starts.values_mut().flat_map(BTreeMap::values_mut) {
            entries.sort_unstable();
        }
        Self { starts }
    }

    /// The incidents `call` is shortly before, in incident order.
    fn incidents_of(&self, call: &CudaCall) -> Vec<usize> {
        let entries = self
            .starts
            .get(call.host.as_str())
            .and_then(|pids| pids.get(&call.pid));
        let Some(entries) = entries else {
            return Vec::new();
        };
        let latest = call.time_ns.saturating_add(FAILURES_BEFORE_NS);
        let first = entries.partition_point(|(start, _)| *start < call.time_ns);
        let mut found: Vec<usize> = entries[first..]
            .iter()
            .take_while(|(start, _)| *start <= latest)
            .map(|(_, index)| *index)
            .collect();
        found.sort_unstable();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row, xid_batch, xid_record};
    use crate::views::report::data;
    use crate::views::rows;
    use crate::{AccountingTotals, TimeRange};

    const S: i64 = 1_000_000_000;

    /// A failed call without an incident id lands on every incident of its host and process
    /// whose first XID is at or after it and at most `FAILURES_BEFORE_NS` after it; on none
    /// other (the boundaries, another host, another process, after the XID).
    #[test]
    fn unlinked_failures_land_on_exactly_the_incidents_shortly_after_them() {
        // A and B on node-a (B 30 s after A), C on node-b; pid 100 in each.
        let mut xids = rows::xids(&[xid_batch(&[
            xid_record(100 * S, 31, "0000:3b:00.0", "error", "a"),
            xid_record(130 * S, 31, "0000:86:00.0", "error", "b"),
            xid_record(100 * S, 79, "0000:3b:00.0", "fatal", "c"),
        ])]);
        let c = xids.iter_mut().find(|x| x.code == 79).expect("C's XID");
        c.host = "node-b".into();
        c.incident_id = Some("node-b/c".into());
        let calls_at = [
            ("node-a", 100, 40 * S),      // A's first moment
            ("node-a", 100, 40 * S - 1),  // a nanosecond too early for A
            ("node-a", 100, 100 * S),     // at A's XID: A and B
            ("node-a", 100, 130 * S + 1), // after B
            ("node-b", 100, 70 * S),      // C
            ("node-a", 101, 100 * S),     // another process
        ];
        let calls: Vec<CudaCall> = calls_at
            .iter()
            .map(|(host, pid, t)| {
                let row = cuda_row(*t, "cuCtxSynchronize", 700, 1_000);
                let mut call = rows::cuda_calls(&[cuda_batch(&[row])]).remove(0);
                call.host = (*host).into();
                call.pid = *pid;
                call.incident_id = None;
                call
            })
            .collect();
        let since = chrono::DateTime::from_timestamp_nanos(0);
        let range = TimeRange::new(since, since + chrono::Duration::seconds(200)).unwrap();
        let data = data::without_functions(
            "/data".into(),
            range,
            &calls,
            &xids,
            data::Totals::default(),
            BTreeSet::new(),
            AccountingTotals::default(),
        );
        let failed = |root_ns: i64, host: &str| -> Vec<(String, i64)> {
            let incident = data
                .incidents
                .iter()
                .find(|i| i.root.time_ns == root_ns && i.gpu.0 == host)
                .expect("incident");
            incident
                .detail
                .failed
                .iter()
                .map(|c| (c.host.clone(), c.time_ns))
                .collect()
        };
        let a = |t: i64| ("node-a".to_string(), t);
        assert_eq!(failed(100 * S, "node-a"), [a(40 * S), a(100 * S)]);
        assert_eq!(failed(130 * S, "node-a"), [a(100 * S)]);
        assert_eq!(failed(100 * S, "node-b"), [("node-b".to_string(), 70 * S)]);
    }
}
