//! The report page: one self-contained HTML document (inline CSS and SVG, no script, no
//! external resource; a Content-Security-Policy forbids both) built from [`ReportData`].
//!
//! The page is maud markup: every value spliced into it is escaped by construction, and text
//! from the data goes through [`Text`], which also writes `'` as `&#39;` and replaces control
//! characters. Only two things enter the page unescaped, each marked `PreEscaped`: the
//! stylesheet above and the timeline's SVG and legend, whose text [`super::timeline`] escapes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use maud::{html, Escaper, Markup, PreEscaped, Render};

use super::data::{Incident, ReportData};
use super::format::time;
use super::{accounting_html, flight_recorder, functions_table, incident_html, timeline};
use crate::range::rfc3339;

const STYLE: &str = "
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;color:#1d1d1f;margin:24px;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555;margin:2px 0}.cards{display:flex;gap:12px;margin:14px 0;flex-wrap:wrap}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:110px}.card b{display:block;font-size:20px}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f6}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.warning{background:#fff4e5;border:1px solid #f0c36d;padding:8px 12px;border-radius:6px}
.legend{display:flex;gap:16px;margin:6px 0 10px;flex-wrap:wrap}.legend-item{display:inline-flex;gap:6px;align-items:center}
svg.timeline{display:block;border:1px solid #ddd;border-radius:6px;background:#fff}
svg.timeline .grid{stroke:#ececec}svg.timeline .lane{stroke:#d0d0d0}
svg.timeline .tick{font-size:11px;fill:#555}svg.timeline .gpu-label{font-size:13px;font-weight:600;fill:#1d1d1f}
svg.timeline .lane-label{font-size:12px;fill:#444}
code{font-size:12px}
.incident-detail{border:1px solid #ddd;border-radius:6px;padding:4px 14px 10px;margin:14px 0}
.incident-detail h3{font-size:15px;margin:8px 0}.incident-detail h4{font-size:13px;margin:12px 0 4px}
.incident-detail ol,.incident-detail ul{margin:2px 0;padding-left:22px}
.first-suspect mark{background:#ffd54f;padding:1px 4px;border-radius:3px;font-weight:600}
.suspect .completed{color:#666}details.recorded-calls summary{cursor:pointer}
";

/// Text from the data (names, messages, file names, errors) as page text: HTML-escaped by
/// maud, `'` as `&#39;` (safe in either kind of quoted attribute), and control characters other
/// than newline and tab, which have no business in a report, as U+FFFD.
pub(super) struct Text<'a>(pub(super) &'a str);

impl Render for Text<'_> {
    fn render_to(&self, buffer: &mut String) {
        for c in self.0.chars() {
            match c {
                '\'' => buffer.push_str("&#39;"),
                c if c.is_control() && c != '\n' && c != '\t' => buffer.push('\u{fffd}'),
                c => {
                    // Writing to a String cannot fail.
                    let _ = Escaper::new(buffer).write_char(c);
                }
            }
        }
    }
}

/// The whole page.
pub fn render(data: &ReportData) -> String {
    let page = html! {
        (PreEscaped("<!DOCTYPE html>\n"))
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy"
                    content="default-src 'none'; style-src 'unsafe-inline'";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "gpuship report " (Text(&data.range.to_string())) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                (header(data))
                section id="timeline" {
                    h2 { "Timeline: XIDs and failed CUDA calls per GPU" }
                    (PreEscaped(timeline::legend(!data.flight_recorder.is_empty())))
                    @match timeline::render(data) {
                        Some(svg) => (PreEscaped(svg)),
                        None => p class="empty" { "No XID and no failed CUDA call in this range." },
                    }
                    (affected_processes(data))
                }
                (incidents(data))
                (flight_recorder::render(data))
                (functions_table::render(data))
                (accounting_html::render(data))
            }
        }
    };
    let mut page = page.into_string();
    page.push('\n');
    page
}

fn header(data: &ReportData) -> Markup {
    let t = &data.totals;
    let (since, until) = (rfc3339(data.range.since()), rfc3339(data.range.until()));
    html! {
        header {
            h1 { "gpuship report" }
            p class="meta" id="range" {
                "Range: " time datetime=(since) { (since) } " to " time datetime=(until) { (until) }
                " (" (format!("{:.0}", data.range.seconds())) " s)"
            }
            p class="meta" id="hosts" {
                "Hosts: "
                @if data.hosts.is_empty() {
                    "none (no rows in this range)"
                }
                @for (i, host) in data.hosts.iter().enumerate() {
                    @if i > 0 { ", " }
                    (Text(host))
                }
            }
            p class="meta" {
                "Data: " code { (Text(&data.location)) } ", " (t.files_read) " Parquet file(s) read"
            }
            @if !t.unreadable.is_empty() {
                div class="warning" id="unreadable" {
                    b {
                        (t.unreadable.len())
                        " file(s) could not be read; their rows are missing from this report:"
                    }
                    ul {
                        @for file in &t.unreadable {
                            li { code { (Text(&file.key)) } ": " (Text(&file.error)) }
                        }
                    }
                }
            }
            div class="cards" {
                div class="card" id="count-xids" { b { (t.xids) } "XIDs" }
                div class="card" id="count-incidents" { b { (data.incidents.len()) } "incidents" }
                div class="card" id="count-cuda" { b { (t.cuda_calls) } "CUDA calls" }
                div class="card" id="count-failures" { b { (t.cuda_failures) } "failed CUDA calls" }
                div class="card" id="count-aggregated" { b { (t.cuda_aggregated) } "of them from cuda_stats" }
                @if t.flight_recorded > 0 {
                    div class="card" id="count-flight-recorder" {
                        b { (t.flight_recorded) } "flight-recorder calls (copies, not counted)"
                    }
                }
                div class="card" id="count-driver" { b { (t.driver_ops) } "driver operations" }
            }
        }
    }
}

fn affected_processes(data: &ReportData) -> Markup {
    let lanes: Vec<_> = data
        .gpus
        .iter()
        .flat_map(|g| g.processes.iter().map(move |p| (Some(g), p)))
        .chain(data.unlinked.iter().map(|p| (None, p)))
        .collect();
    if lanes.is_empty() {
        return html! {};
    }
    html! {
        h3 { "Affected processes" }
        table id="affected" {
            thead {
                tr {
                    th { "GPU" } th class="num" { "pid" } th { "process" }
                    th class="num" { "failed calls" } th { "failures" }
                }
            }
            tbody {
                @for (gpu, lane) in lanes {
                    tr class="process" data-pid=(lane.pid) {
                        td {
                            @match gpu {
                                Some(g) => (Text(&g.key.1)),
                                None => "none linked",
                            }
                        }
                        td class="num" { (lane.pid) }
                        td { (Text(&lane.comm)) }
                        td class="num" { (lane.failures.len()) }
                        td {
                            @for (i, (what, n)) in failure_counts(&lane.failures).iter().enumerate() {
                                @if i > 0 { br; }
                                (Text(what)) " ×" (n)
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `function result` -> how many of a process's failed calls ended so.
fn failure_counts(failures: &[crate::views::rows::CudaCall]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::<String, usize>::new();
    for call in failures {
        *counts
            .entry(format!("{} {}", call.function, call.result_name))
            .or_default() += 1;
    }
    counts
}

fn incidents(data: &ReportData) -> Markup {
    html! {
        section id="incidents" {
            h2 { "Incidents" }
            @if data.incidents.is_empty() {
                p class="empty" { "No XID in this range." }
            } @else {
                p class="meta" {
                    "XIDs on one GPU close together form one incident; its first XID is the \
                     root-cause candidate and its recommended action comes first (see docs/rca.md)."
                }
                table {
                    thead {
                        tr {
                            th { "incident" } th { "started" } th { "GPU" } th { "root-cause XID" }
                            th { "cascade" } th class="num" { "XIDs" } th { "worst severity" }
                            th { "recommended action" } th { "affected processes" }
                            th class="num" { "failed CUDA calls" }
                        }
                    }
                    tbody {
                        @for incident in &data.incidents { (incident_row(incident)) }
                    }
                }
                @for (i, incident) in data.incidents.iter().enumerate() {
                    (incident_html::render(i + 1, incident))
                }
            }
        }
    }
}

fn incident_row(incident: &Incident) -> Markup {
    let root = &incident.root;
    let codes: Vec<String> = incident.codes.iter().map(u32::to_string).collect();
    let (host, bus) = &incident.gpu;
    let gpu_detail: Vec<&str> = [root.gpu_model.as_deref(), root.gpu_uuid.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    let affected: Vec<String> = incident
        .affected
        .iter()
        .map(|(pid, comm)| format!("{pid} {comm}").trim_end().to_string())
        .collect();
    html! {
        tr class="incident" data-incident=(Text(&incident.id)) data-root-code=(root.code)
            data-codes=(codes.join(",")) data-severity=(Text(&incident.worst_severity)) {
            td { code { (Text(&incident.id)) } }
            td { (time(root.time_ns)) }
            td {
                (Text(bus)) " on " (Text(host)) br;
                @for (i, detail) in gpu_detail.iter().enumerate() {
                    @if i > 0 { br; }
                    (Text(detail))
                }
            }
            td {
                "XID " (root.code) ": " (Text(&root.display_name())) br; small { (Text(&root.message)) }
                @if let Some(kernel) = &root.suspect_kernel {
                    br; small class="suspect" { "suspect kernel: " code { (Text(kernel)) } }
                }
            }
            td { (codes.join(" → ")) }
            td class="num" { (incident.codes.len()) }
            td { (Text(&incident.worst_severity)) }
            td { (Text(&root.display_action())) }
            td {
                @if affected.is_empty() { "none attributed" }
                @for (i, process) in affected.iter().enumerate() {
                    @if i > 0 { ", " }
                    (Text(process))
                }
            }
            td class="num" { (incident.failed_calls) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row, xid_batch, xid_record};
    use crate::views::report::data;
    use crate::views::rows;
    use crate::{AccountingTotals, TimeRange};

    const HOSTILE: &str = "<b>x</b> & \"q\" 'a' \x1b[2J\u{9b}\x07 ok";

    fn rich(documents: usize, hostile: &str) -> ReportData {
        let since = chrono::DateTime::from_timestamp_nanos(0);
        let range = TimeRange::new(since, since + chrono::Duration::seconds(100)).unwrap();
        let mut bystander = xid_record(2_000_000_000, 43, "0000:86:00.0", "warning", hostile);
        bystander.pid = None;
        bystander.annotations.affected_pids.clear();
        let mut root = xid_record(1_000_000_000, 79, "0000:3b:00.0", "fatal", hostile);
        root.annotations.suspects = Some(vec![gpuship_sinks::schema::KernelSuspect {
            kernel_name_demangled: hostile.into(),
            ..Default::default()
        }]);
        let xids = rows::xids(&[xid_batch(&[
            root,
            xid_record(1_100_000_000, 31, "0000:3b:00.0", "error", "fault"),
            bystander,
        ])]);
        let calls = rows::cuda_calls(&[cuda_batch(&[
            cuda_row(1_500_000_000, "cuCtxSynchronize", 700, 40_000),
            cuda_row(1_600_000_000, "cuCtxSynchronize", 0, 20_000),
            cuda_row(1_700_000_000, "cuMemAlloc_v2", 2, 0),
        ])]);
        let unreadable = vec![crate::storage::Unreadable {
            key: format!("xid/{hostile}.parquet"),
            error: hostile.into(),
        }];
        let mut accounting = AccountingTotals {
            documents,
            unreadable: unreadable.clone(),
            ..AccountingTotals::default()
        };
        let mut sink = crate::accounting::SinkTotals {
            delivered: 5,
            dropped: 2,
            failed: 1,
            ..Default::default()
        };
        sink.dropped_by_reason.insert(hostile.into(), 2);
        sink.dropped_by_reason.insert("zero".into(), 0);
        accounting
            .sinks
            .insert((hostile.into(), "cuda".into()), sink);
        accounting
            .sinks
            .insert(("lake".into(), "xid".into()), Default::default());
        accounting.rings.insert(
            hostile.into(),
            crate::accounting::RingTotals {
                emitted: 7,
                lost_in_kernel: 1,
            },
        );
        accounting.kmsg.xids = 3;
        let totals = data::Totals {
            xids: 3,
            cuda_calls: 3,
            cuda_failures: 2,
            cuda_aggregated: 0,
            flight_recorded: 0,
            driver_ops: 4,
            files_read: 6,
            unreadable,
        };
        data::aggregate(
            format!("/data/{hostile}"),
            range,
            (&calls, &[]),
            &xids,
            totals,
            [hostile.to_string(), "node-a".to_string()].into(),
            accounting,
        )
    }

    /// Every place the data reaches the page: hosts, lake location, unreadable files and
    /// their errors (twice), XID messages (the timeline's titles and the incident table), sink,
    /// drop reason and ring names (attribute and cell), the root XID's suspect kernel, and in
    /// the incidents' sections the XID messages (twice) and the suspect kernel.
    #[test]
    fn text_from_the_data_is_escaped_wherever_it_lands() {
        let page = render(&rich(2, HOSTILE));
        let escaped =
            "&lt;b&gt;x&lt;/b&gt; &amp; &quot;q&quot; &#39;a&#39; \u{fffd}[2J\u{fffd}\u{fffd} ok";
        assert_eq!(page.matches(escaped).count(), 19, "{page}");
        assert!(page.contains(&format!("suspect kernel: <code>{escaped}</code>")));
        assert!(!page.contains("<b>x"), "{page}");
        assert!(!page.contains("'a'"), "{page}");
        assert!(!page.chars().any(|c| c.is_control() && c != '\n'), "{page}");
        for id in [
            "id=\"unreadable\"",
            "id=\"accounting-summary\"",
            "id=\"kmsg\"",
        ] {
            assert!(page.contains(id), "{id}");
        }
        let plain = render(&rich(0, "plain"));
        assert!(plain.contains("id=\"no-accounting\""));
        assert!(plain.ends_with("</section></body></html>\n"), "{plain}");
        assert!(
            plain.starts_with("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">")
        );
    }
}
