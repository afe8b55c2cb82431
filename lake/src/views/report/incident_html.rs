//! One incident's section of the report: what broke (its XIDs, with catalog name and action),
//! where (the GPU: UUID, bus id, index; the processes, pods and containers it hit) and which
//! code (the suspect kernels, the first one highlighted; the calls the flight recorder wrote
//! before it; the failed calls and the memory the processes held, from [`failures_html`]).
//! Every value from the data goes through [`Text`].

use maud::{html, Markup};

use super::data::Incident;
use super::failures_html;
use super::format::{duration, time};
use super::html::Text;
use super::incident::Process;
use crate::views::rows::{headline, CudaCall, Suspect, Xid};

/// The most flight-recorder calls listed per incident: the latest, nearest the incident (the
/// count says how many there were).
pub const RECORDED_SHOWN: usize = 200;

/// The section of incident number `n` (1 for the first in the table).
pub fn render(n: usize, incident: &Incident) -> Markup {
    let root = &incident.root;
    let detail = &incident.detail;
    html! {
        article class="incident-detail" id=(format!("incident-{n}"))
            data-incident=(Text(&incident.id)) data-root-code=(root.code) {
            h3 {
                "Incident " (n) ": XID " (root.code) " (" (Text(&root.display_name())) ") on GPU "
                (Text(&incident.gpu.1)) " at " (time(root.time_ns))
            }
            (gpu(incident))
            (xids(&detail.xids))
            (processes(&detail.processes))
            (suspects(detail.suspects_of, root.time_ns, &detail.suspects, detail.suspects_sampled))
            (recorded(&detail.recorded))
            (failures_html::failed(&detail.failed))
            (failures_html::memory(&detail.memory))
        }
    }
}

fn gpu(incident: &Incident) -> Markup {
    let (host, bus) = &incident.gpu;
    // The root XID's identity, else any of its XIDs'.
    let xids = || std::iter::once(&incident.root).chain(&incident.detail.xids);
    let uuid = xids().find_map(|x| x.gpu_uuid.as_deref());
    let index = xids().find_map(|x| x.gpu_index);
    let model = xids().find_map(|x| x.gpu_model.as_deref());
    html! {
        p class="incident-gpu" {
            b { "GPU: " }
            "UUID " code class="gpu-uuid" { (Text(uuid.unwrap_or("unknown"))) }
            ", bus id " code class="gpu-bus" { (Text(bus)) }
            ", index " span class="gpu-index" {
                @match index { Some(i) => (i), None => "unknown" }
            }
            @if let Some(model) = model { ", " (Text(model)) }
            ", host " (Text(host))
        }
    }
}

fn xids(xids: &[Xid]) -> Markup {
    html! {
        h4 { "XIDs" }
        ol class="incident-xids" {
            @for xid in xids {
                li class="incident-xid" data-code=(xid.code) {
                    (time(xid.time_ns)) ": " b { "XID " (xid.code) " " (Text(&xid.display_name())) }
                    " (" (Text(&xid.display_severity())) "), recommended action "
                    b class="action" { (Text(&xid.display_action())) }
                    br; small { (Text(&xid.message)) }
                }
            }
        }
    }
}

fn processes(processes: &[Process]) -> Markup {
    html! {
        h4 { "Processes" }
        @if processes.is_empty() {
            p class="empty" { "No process attributed." }
        } @else {
            ul class="incident-processes" {
                @for p in processes {
                    li class="incident-process" data-pid=(p.pid) {
                        "pid " (p.pid)
                        @if !p.comm.is_empty() { " " code { (Text(&p.comm)) } }
                        @if let Some(pod) = &p.pod { ", pod " (Text(pod)) }
                        @if let Some(container) = &p.container_id { ", container " code { (Text(container)) } }
                        @if let Some(how) = &p.attribution { " (found by " (Text(how)) ")" }
                    }
                }
            }
        }
    }
}

fn suspects(code: Option<u32>, xid_ns: i64, suspects: &[Suspect], sampled: bool) -> Markup {
    let first = headline(suspects);
    html! {
        h4 { "Suspect kernels" }
        @if let Some(code) = code {
            p class="meta" {
                "The kernels the process launched last before XID " (code) ", most recent first. \
                 A completed one finished before it (a later synchronisation returned); the \
                 first one not completed is the likely culprit."
            }
            @if sampled {
                p class="meta sampled" {
                    "The overhead budget probed this process's launches only part of the time \
                     before the XID: the kernel that faulted may be missing from this list and \
                     from the flight recorder's calls."
                }
            }
            ol class="suspects" {
                @for (i, s) in suspects.iter().enumerate() {
                    li class=(if first == Some(i) { "suspect first-suspect" } else { "suspect" })
                        data-completed=(s.completed) {
                        @if first == Some(i) {
                            mark class="kernel" { (Text(&s.kernel)) } " ← likely culprit"
                        } @else {
                            code class="kernel" { (Text(&s.kernel)) }
                        }
                        " " span class="completed" {
                            @if s.completed { "completed" } @else { "not seen to finish" }
                        }
                        br; small {
                            "launched by " (Text(&s.function)) " at " (time(s.time_ns)) ", "
                            (duration(u64::try_from(xid_ns.saturating_sub(s.time_ns)).unwrap_or(0)))
                            " before the XID"
                            @if let (Some(g), Some(b)) = (s.grid_x, s.block_x) {
                                ", grid x " (g) ", block x " (b)
                            }
                        }
                    }
                }
            }
        } @else {
            p class="empty" { "No XID of this incident lists suspect kernels." }
        }
    }
}

fn recorded(calls: &[CudaCall]) -> Markup {
    if calls.is_empty() {
        return html! {
            h4 { "Calls before it" }
            p class="empty" { "The flight recorder wrote no call for this incident." }
        };
    }
    let shown = &calls[calls.len().saturating_sub(RECORDED_SHOWN)..];
    html! {
        h4 { "Calls before it" }
        details class="recorded-calls" data-calls=(calls.len()) {
            summary {
                (calls.len()) " call(s) the flight recorder wrote, from " (time(calls[0].time_ns))
                " to " (time(calls[calls.len() - 1].time_ns))
                @if shown.len() < calls.len() { " (the last " (shown.len()) " listed)" }
            }
            ol class="recorded-call-list" {
                @for c in shown {
                    li class="recorded-call" data-call=(Text(&c.function)) {
                        (time(c.time_ns)) " pid " (c.pid) " tid " (c.tid) " "
                        code class="function" { (Text(&c.function)) }
                        @if let Some(kernel) = &c.kernel { " " code class="kernel" { (Text(kernel)) } }
                        " " (Text(&c.result_name))
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use gpuship_sinks::schema::{
        CallGpu, CallObjects, GpuIdentity, HeldMemory, KernelSuspect, LargeAllocation,
    };

    use super::super::nearest_memory::NearestMemory;
    use super::super::{data, html};
    use crate::views::fixtures::{cuda_batch, cuda_row, recorded_batch, xid_batch, xid_record};
    use crate::views::rows::{self, MemoryHeld};
    use crate::{AccountingTotals, TimeRange};

    const HOSTILE: &str = "<script>alert(1)</script>\n\x1b[31mevil\"'&";
    const ESCAPED: &str = "&lt;script&gt;alert(1)&lt;/script&gt;\n\u{fffd}[31mevil&quot;&#39;&amp;";
    const BUS: &str = "0000:3b:00.0";
    const UUID: &str = "GPU-0000";

    /// An XID 31 of pid 100 whose suspects are `wild_write` (not finished) and a kernel with a
    /// hostile name (finished), two recorded launches, an out-of-memory failure 2 s before the
    /// XID and a `cuda_memory` row.
    fn page() -> String {
        let since = chrono::DateTime::from_timestamp_nanos(0);
        let range = TimeRange::new(since, since + chrono::Duration::seconds(100)).unwrap();
        let mut xid = xid_record(10_000_000_000, 31, BUS, "error", "MMU Fault");
        xid.gpu = Some(std::sync::Arc::new(GpuIdentity {
            uuid: UUID.into(),
            model: "NVIDIA H100".into(),
            index: 3,
            minor: Some(3),
        }));
        xid.annotations.attribution = Some("driver_log".into());
        xid.annotations.suspects = Some(vec![
            KernelSuspect {
                time_ns: 9_000_000_000,
                function: "cuLaunchKernel".into(),
                kernel_name_demangled: "wild_write(int*)".into(),
                ..KernelSuspect::default()
            },
            KernelSuspect {
                time_ns: 8_000_000_000,
                function: "cuLaunchKernel".into(),
                kernel_name_demangled: HOSTILE.into(),
                completed: true,
                ..KernelSuspect::default()
            },
        ]);
        let xids = rows::xids(&[xid_batch(&[xid])]);
        let incident_id = xids[0].incident_id.clone().unwrap();
        let launch = |time_ns, kernel| gpuship_sinks::schema::CudaRow {
            objects: CallObjects {
                kernel_name_demangled: Some(kernel),
                ..CallObjects::default()
            },
            ..cuda_row(time_ns, "cuLaunchKernel", 0, 10)
        };
        let gpu = CallGpu {
            uuid: UUID.into(),
            pci_bus_id: Some(BUS.into()),
            index: Some(3),
        };
        let held = HeldMemory {
            bytes: [3 << 20, 0, 0, 0, 0],
            seen_from_start: true,
            largest: vec![LargeAllocation {
                address: 0x7f00_0000_0000,
                bytes: Some(3 << 20),
                kind: "device",
                function: HOSTILE.into(),
                time_ns: 1_000_000_000,
            }],
        };
        let mut oom = cuda_row(8_000_000_000, "cuMemAlloc_v2", 2, 50);
        oom.result_name = "CUDA_ERROR_OUT_OF_MEMORY";
        oom.bytes = Some(1 << 40);
        oom.objects.gpu = Some(&gpu);
        oom.objects.memory = Some(&held);
        let mut calls = rows::cuda_calls(&[
            cuda_batch(&[oom]),
            recorded_batch(
                &[
                    launch(8_000_000_000, HOSTILE),
                    launch(9_000_000_000, "wild_write(int*)"),
                ],
                &incident_id,
            ),
        ]);
        calls.sort_by_key(|c| c.time_ns);
        let mut data = data::aggregate(
            "/data".into(),
            range,
            (&calls, &[]),
            &xids,
            data::Totals::default(),
            ["node-a".to_string()].into(),
            AccountingTotals::default(),
        );
        assert_eq!(NearestMemory::for_incidents(&data.incidents).pids(), [100]);
        let memory = MemoryHeld {
            time_ns: 9_500_000_000,
            host: "node-a".into(),
            pid: 100,
            comm: HOSTILE.into(),
            gpu_uuid: Some(UUID.into()),
            pci_bus_id: Some(BUS.into()),
            gpu_index: Some(3),
            device_bytes: 3 << 20,
            managed_bytes: 0,
            host_pinned_bytes: 0,
            pool_bytes: 0,
            physical_bytes: 0,
            allocations: 1,
            seen_from_start: false,
        };
        let far = MemoryHeld {
            time_ns: 90_000_000_000,
            device_bytes: 0,
            ..memory.clone()
        };
        let mut nearest = NearestMemory::for_incidents(&data.incidents);
        nearest.add_rows(&[far, memory]);
        nearest.attach(&mut data.incidents);
        html::render(&data)
    }

    #[test]
    fn an_incident_shows_gpu_suspects_recorded_calls_failures_and_memory_as_text() {
        let page = page();
        let article = &page[page.find("<article class=\"incident-detail\"").unwrap()..];
        let article = &article[..article.find("</article>").unwrap()];
        assert!(article.contains(&format!(
            "UUID <code class=\"gpu-uuid\">{UUID}</code>, bus id <code class=\"gpu-bus\">{BUS}</code>, \
             index <span class=\"gpu-index\">3</span>, NVIDIA H100, host node-a</p>"
        )));
        assert!(article.contains(
            "<li class=\"incident-process\" data-pid=\"100\">pid 100 <code>train</code> \
             (found by driver_log)</li>"
        ));
        assert!(article.contains(
            "<li class=\"suspect first-suspect\" data-completed=\"false\"><mark class=\"kernel\">\
             wild_write(int*)</mark> ← likely culprit <span class=\"completed\">not seen to finish\
             </span><br><small>launched by cuLaunchKernel at 1970-01-01 00:00:09.000 UTC, 1.00 s \
             before the XID</small></li>"
        ));
        assert!(article.contains(&format!(
            "<li class=\"suspect\" data-completed=\"true\"><code class=\"kernel\">{ESCAPED}</code> \
             <span class=\"completed\">completed</span>"
        )));
        assert!(article.contains("<details class=\"recorded-calls\" data-calls=\"2\">"));
        assert_eq!(article.matches("<li class=\"recorded-call\"").count(), 2);
        assert!(article.contains(&format!(
            "<code class=\"kernel\">{ESCAPED}</code> CUDA_SUCCESS"
        )));
        assert!(article.contains(
            "<tr class=\"failed-call\" data-call=\"cuMemAlloc_v2\" \
             data-result=\"CUDA_ERROR_OUT_OF_MEMORY\">"
        ));
        assert!(article.contains(&format!(
            "<li class=\"allocation\">device 3145728 B (3.00 MiB) by {ESCAPED} at \
             1970-01-01 00:00:01.000 UTC</li>"
        )));
        assert!(article.contains(&format!(
            "<tr class=\"memory\" data-pid=\"100\"><td class=\"num\">100</td><td>{UUID} ({BUS})</td>\
             <td>3145728 B (3.00 MiB)</td>"
        )));
        assert!(
            article.contains("00:00:09.500 UTC (at least)</td>"),
            "the nearest row"
        );
        // Nothing from the data became markup or a control character.
        assert!(!page.contains("<script"), "{page}");
        assert!(!article.contains('\''), "{article}");
        assert!(!page.chars().any(|c| c.is_control() && c != '\n'), "{page}");
    }

    #[test]
    fn suspects_from_sampled_launches_say_the_culprit_may_be_missing() {
        let sampled = super::suspects(Some(31), 0, &[], true).into_string();
        assert!(sampled.contains(
            "<p class=\"meta sampled\">The overhead budget probed this process's launches only \
             part of the time before the XID"
        ));
        let whole = super::suspects(Some(31), 0, &[], false).into_string();
        assert!(!whole.contains("sampled"), "{whole}");
    }

    #[test]
    fn an_incident_without_details_says_so() {
        let since = chrono::DateTime::from_timestamp_nanos(0);
        let range = TimeRange::new(since, since + chrono::Duration::seconds(10)).unwrap();
        let mut xid = xid_record(1_000, 79, BUS, "fatal", "off the bus");
        xid.pid = None;
        xid.annotations.affected_pids.clear();
        let xids = rows::xids(&[xid_batch(&[xid])]);
        let data = data::aggregate(
            "/data".into(),
            range,
            (&[], &[]),
            &xids,
            data::Totals::default(),
            Default::default(),
            AccountingTotals::default(),
        );
        let page = html::render(&data);
        for empty in [
            "UUID <code class=\"gpu-uuid\">unknown</code>",
            "index <span class=\"gpu-index\">unknown</span>",
            "No process attributed.",
            "No XID of this incident lists suspect kernels.",
            "The flight recorder wrote no call for this incident.",
            "No failed call of its processes.",
            "No cuda_memory row of its processes in this range.",
        ] {
            assert!(page.contains(empty), "{empty}");
        }
    }
}
