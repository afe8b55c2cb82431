//! The flight recorder's rows in the report. In stats mode the agent keeps each process's last
//! calls in memory and, when an incident starts (an XID that hits the process, or a call that
//! fails with a sticky error), writes those from the seconds before as `cuda` rows marked
//! `flight_recorder` and carrying the incident's id. They are copies of calls counted elsewhere,
//! so the per-function counts leave them out ([`super::functions`]); here they are gathered per
//! incident and process, for the section "Flight recorder" and for the timeline's windows.

use std::collections::BTreeMap;

use maud::{html, Markup};

use super::data::{Incident, ReportData};
use super::format::time;
use super::html::Text;
use crate::views::rows::CudaCall;

/// How many functions the page names per window, most called first.
pub const TOP_FUNCTIONS: usize = 3;

/// The calls the flight recorder wrote for one process when one incident started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCalls {
    /// The rows' `incident_id` (empty for rows without one).
    pub incident_id: String,
    /// Host and process.
    pub host: String,
    pub pid: i32,
    /// The process's name: its main thread's, else the first thread's seen.
    pub comm: String,
    /// Rows, and how many of them returned an error.
    pub calls: usize,
    pub failed: usize,
    /// Entry times of the first and the last of them.
    pub first_ns: i64,
    pub last_ns: i64,
    /// Calls per function, most first (then by name).
    pub functions: Vec<(String, usize)>,
    /// What started the incident: its root XID, else the earliest failed call (recorded as it
    /// happened) with its id; None when the range holds neither.
    pub started_by: Option<String>,
}

impl RecordedCalls {
    /// `cuLaunchKernel ×120, cuMemcpyAsync ×8`: the [`TOP_FUNCTIONS`] most called, and how many
    /// other functions there were.
    pub fn top_functions(&self) -> String {
        let mut text: Vec<String> = self
            .functions
            .iter()
            .take(TOP_FUNCTIONS)
            .map(|(function, n)| format!("{function} ×{n}"))
            .collect();
        let others = self.functions.len().saturating_sub(TOP_FUNCTIONS);
        if others > 0 {
            text.push(format!("{others} other function(s)"));
        }
        text.join(", ")
    }
}

/// The flight recorder's rows among `calls`, per (incident, host, process), oldest first;
/// `incidents` and the failed calls among `calls` say what started each incident.
pub fn summarize(calls: &[CudaCall], incidents: &[Incident]) -> Vec<RecordedCalls> {
    let mut groups: BTreeMap<(&str, &str, i32), Vec<&CudaCall>> = BTreeMap::new();
    for call in calls.iter().filter(|c| c.flight_recorder) {
        let incident = call.incident_id.as_deref().unwrap_or("");
        groups
            .entry((incident, &call.host, call.pid))
            .or_default()
            .push(call);
    }
    let starts = starts(calls, incidents);
    let mut windows: Vec<RecordedCalls> = groups
        .into_iter()
        .filter_map(|((incident, host, pid), rows)| {
            let first = rows.iter().map(|c| c.time_ns).min()?;
            let last = rows.iter().map(|c| c.time_ns).max()?;
            let comm = rows
                .iter()
                .find(|c| c.tid == pid)
                .or(rows.first())
                .map(|c| c.comm.clone())
                .unwrap_or_default();
            let mut functions: BTreeMap<&str, usize> = BTreeMap::new();
            for call in &rows {
                *functions.entry(call.function.as_str()).or_default() += 1;
            }
            let mut functions: Vec<(String, usize)> = functions
                .into_iter()
                .map(|(f, n)| (f.to_string(), n))
                .collect();
            functions.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            Some(RecordedCalls {
                incident_id: incident.to_string(),
                host: host.to_string(),
                pid,
                comm,
                calls: rows.len(),
                failed: rows.iter().filter(|c| c.failed()).count(),
                first_ns: first,
                last_ns: last,
                functions,
                started_by: starts.get(incident).cloned(),
            })
        })
        .collect();
    windows.sort_by(|a, b| {
        (a.first_ns, &a.incident_id, &a.host, a.pid).cmp(&(
            b.first_ns,
            &b.incident_id,
            &b.host,
            b.pid,
        ))
    });
    windows
}

/// What started each incident of the range, by id: its root XID, else the earliest failed
/// call recorded as it happened that carries the id.
fn starts<'a>(calls: &'a [CudaCall], incidents: &'a [Incident]) -> BTreeMap<&'a str, String> {
    let mut first_failure: BTreeMap<&str, &CudaCall> = BTreeMap::new();
    for call in calls.iter().filter(|c| !c.flight_recorder && c.failed()) {
        if let Some(id) = call.incident_id.as_deref() {
            let earliest = first_failure.entry(id).or_insert(call);
            if call.time_ns < earliest.time_ns {
                *earliest = call;
            }
        }
    }
    let mut starts: BTreeMap<&str, String> = first_failure
        .into_iter()
        .map(|(id, c)| (id, format!("{} returned {}", c.function, c.result_name)))
        .collect();
    for incident in incidents {
        let root = &incident.root;
        let xid = format!(
            "XID {} ({}) on {}",
            root.code,
            root.display_name(),
            incident.gpu.1
        );
        starts.insert(&incident.id, xid);
    }
    starts
}

/// The section; nothing when the range holds no flight-recorder row.
pub fn render(data: &ReportData) -> Markup {
    if data.flight_recorder.is_empty() {
        return html! {};
    }
    html! {
        section id="flight-recorder" {
            h2 { "Flight recorder: the calls before each incident" }
            p class="meta" {
                "In stats mode the agent keeps each process's last calls in memory and writes \
                 them when an incident starts. They are copies of calls counted in the \
                 aggregates, so the counts above and per function leave them out; the timeline \
                 shows each process's as a band from the first to the last (see docs/rca.md for \
                 every call)."
            }
            table {
                thead {
                    tr {
                        th { "incident" } th { "started by" } th { "host" } th class="num" { "pid" }
                        th { "process" } th class="num" { "calls" } th class="num" { "failed" }
                        th { "first" } th { "last" } th { "top functions" }
                    }
                }
                tbody {
                    @for w in &data.flight_recorder {
                        tr class="recorded" data-incident=(Text(&w.incident_id)) data-pid=(w.pid)
                            data-calls=(w.calls) {
                            td { code { (Text(&w.incident_id)) } }
                            td { (Text(w.started_by.as_deref().unwrap_or("not in this range"))) }
                            td { (Text(&w.host)) }
                            td class="num" { (w.pid) }
                            td { (Text(&w.comm)) }
                            td class="num" { (w.calls) }
                            td class="num" { (w.failed) }
                            td { (time(w.first_ns)) }
                            td { (time(w.last_ns)) }
                            td { (Text(&w.top_functions())) }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row, recorded_batch};
    use crate::views::rows::cuda_calls;

    /// Two processes' windows of one incident and one of another, which a failed call
    /// started; the ordinary rows beside them are not part of any window.
    #[test]
    fn recorded_rows_gather_per_incident_and_process() {
        let (a, b) = ("node-a/0000:3b:00.0/5000", "node-a/pid/100/9000");
        let mut other = cuda_row(2_500, "cuMemcpyAsync", 0, 30);
        (other.pid, other.tid, other.comm) = (200, 201, "loader");
        let mut calls = cuda_calls(&[
            recorded_batch(
                &[
                    cuda_row(1_000, "cuLaunchKernel", 0, 10),
                    cuda_row(2_000, "cuLaunchKernel", 0, 10),
                    cuda_row(3_000, "cuMemcpyAsync", 0, 10),
                    cuda_row(4_000, "cuModuleLoadData", 0, 10),
                    cuda_row(4_500, "cuStreamSynchronize", 0, 10),
                    other,
                ],
                a,
            ),
            recorded_batch(
                &[
                    cuda_row(8_000, "cuLaunchKernel", 0, 10),
                    cuda_row(8_500, "cuLaunchKernel", 700, 10),
                ],
                b,
            ),
        ]);
        // The sticky failure that started b, recorded as it happened.
        let mut sticky = cuda_calls(&[cuda_batch(&[cuda_row(9_000, "cuCtxSynchronize", 700, 80)])]);
        sticky[0].incident_id = Some(b.into());
        calls.extend(sticky);
        let windows = summarize(&calls, &[]);
        let seen: Vec<(&str, i32, usize, usize, i64, i64)> = windows
            .iter()
            .map(|w| {
                (
                    w.incident_id.as_str(),
                    w.pid,
                    w.calls,
                    w.failed,
                    w.first_ns,
                    w.last_ns,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (a, 100, 5, 0, 1_000, 4_500),
                (a, 200, 1, 0, 2_500, 2_500),
                (b, 100, 2, 1, 8_000, 8_500)
            ]
        );
        assert_eq!(
            windows[0].top_functions(),
            "cuLaunchKernel ×2, cuMemcpyAsync ×1, cuModuleLoadData ×1, 1 other function(s)"
        );
        assert_eq!(windows[1].comm, "loader");
        assert_eq!(windows[0].started_by, None, "no XID and no failed row of a");
        assert_eq!(
            windows[2].started_by.as_deref(),
            Some("cuCtxSynchronize returned CUDA_ERROR_ILLEGAL_ADDRESS")
        );
    }
}
