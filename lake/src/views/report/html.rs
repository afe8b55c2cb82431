//! The report page: one self-contained HTML document (inline CSS and SVG, no script, no
//! external resource; a Content-Security-Policy forbids both) built from [`ReportData`].
//! Text from the data is escaped here or in [`super::timeline`], nowhere else.

use std::fmt::Write as _;

use super::data::ReportData;
use super::format::{duration, escape, rate, time};
use super::timeline;
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
";

/// The whole page.
pub fn render(data: &ReportData) -> String {
    let mut out = String::with_capacity(32 * 1024);
    out.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
    );
    let _ = write!(
        out,
        "<title>gpuship report {}</title><style>{STYLE}</style></head><body>",
        escape(&data.range.to_string())
    );
    header(&mut out, data);
    out.push_str("<section id=\"timeline\"><h2>Timeline: XIDs and failed CUDA calls per GPU</h2>");
    out.push_str(&timeline::legend());
    match timeline::render(data) {
        Some(svg) => out.push_str(&svg),
        None => {
            out.push_str("<p class=\"empty\">No XID and no failed CUDA call in this range.</p>")
        }
    }
    affected_processes(&mut out, data);
    out.push_str("</section>");
    incidents(&mut out, data);
    functions(&mut out, data);
    accounting(&mut out, data);
    out.push_str("</body></html>\n");
    out
}

fn header(out: &mut String, data: &ReportData) {
    let t = &data.totals;
    let _ = write!(
        out,
        "<header><h1>gpuship report</h1>\
         <p class=\"meta\" id=\"range\">Range: <time datetime=\"{since}\">{since}</time> to \
         <time datetime=\"{until}\">{until}</time> ({seconds:.0} s)</p>\
         <p class=\"meta\" id=\"hosts\">Hosts: {hosts}</p>\
         <p class=\"meta\">Data: <code>{location}</code>, {files} Parquet file(s) read</p>",
        since = rfc3339(data.range.since()),
        until = rfc3339(data.range.until()),
        seconds = data.range.seconds(),
        hosts = if data.hosts.is_empty() {
            "none (no rows in this range)".to_string()
        } else {
            data.hosts
                .iter()
                .map(|h| escape(h))
                .collect::<Vec<_>>()
                .join(", ")
        },
        location = escape(&data.location),
        files = t.files_read,
    );
    if !t.unreadable.is_empty() {
        let _ = write!(
            out,
            "<div class=\"warning\" id=\"unreadable\"><b>{} file(s) could not be read; their rows are missing from this report:</b><ul>",
            t.unreadable.len()
        );
        for file in &t.unreadable {
            let _ = write!(
                out,
                "<li><code>{}</code>: {}</li>",
                escape(&file.key),
                escape(&file.error)
            );
        }
        out.push_str("</ul></div>");
    }
    let _ = write!(
        out,
        "<div class=\"cards\">\
         <div class=\"card\" id=\"count-xids\"><b>{}</b>XIDs</div>\
         <div class=\"card\" id=\"count-incidents\"><b>{}</b>incidents</div>\
         <div class=\"card\" id=\"count-cuda\"><b>{}</b>CUDA calls</div>\
         <div class=\"card\" id=\"count-failures\"><b>{}</b>failed CUDA calls</div>\
         <div class=\"card\" id=\"count-driver\"><b>{}</b>driver operations</div></div></header>",
        t.xids,
        data.incidents.len(),
        t.cuda_calls,
        t.cuda_failures,
        t.driver_ops
    );
}

fn affected_processes(out: &mut String, data: &ReportData) {
    let lanes: Vec<_> = data
        .gpus
        .iter()
        .flat_map(|g| g.processes.iter().map(move |p| (Some(g), p)))
        .chain(data.unlinked.iter().map(|p| (None, p)))
        .collect();
    if lanes.is_empty() {
        return;
    }
    out.push_str(
        "<h3>Affected processes</h3><table id=\"affected\"><thead><tr><th>GPU</th><th class=\"num\">pid</th>\
         <th>process</th><th class=\"num\">failed calls</th><th>failures</th></tr></thead><tbody>",
    );
    for (gpu, lane) in lanes {
        let mut failures = std::collections::BTreeMap::<String, usize>::new();
        for call in &lane.failures {
            *failures
                .entry(format!("{} {}", call.function, call.result_name))
                .or_default() += 1;
        }
        let listed = failures
            .iter()
            .map(|(what, n)| format!("{} ×{n}", escape(what)))
            .collect::<Vec<_>>()
            .join("<br>");
        let _ = write!(
            out,
            "<tr class=\"process\" data-pid=\"{}\"><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            lane.pid,
            gpu.map(|g| escape(&g.key.1)).unwrap_or_else(|| "none linked".into()),
            lane.pid,
            escape(&lane.comm),
            lane.failures.len(),
            listed
        );
    }
    out.push_str("</tbody></table>");
}

fn incidents(out: &mut String, data: &ReportData) {
    out.push_str("<section id=\"incidents\"><h2>Incidents</h2>");
    if data.incidents.is_empty() {
        out.push_str("<p class=\"empty\">No XID in this range.</p></section>");
        return;
    }
    out.push_str(
        "<p class=\"meta\">XIDs on one GPU close together form one incident; its first XID is the \
         root-cause candidate and its recommended action comes first (see docs/rca.md).</p>\
         <table><thead><tr><th>incident</th><th>started</th><th>GPU</th><th>root-cause XID</th>\
         <th>cascade</th><th class=\"num\">XIDs</th><th>worst severity</th><th>recommended action</th>\
         <th>affected processes</th><th class=\"num\">failed CUDA calls</th></tr></thead><tbody>",
    );
    for incident in &data.incidents {
        let root = &incident.root;
        let codes = incident
            .codes
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>();
        let affected = if incident.affected.is_empty() {
            "none attributed".to_string()
        } else {
            incident
                .affected
                .iter()
                .map(|(pid, comm)| format!("{pid} {}", escape(comm)).trim_end().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (host, bus) = &incident.gpu;
        let gpu_detail = [root.gpu_model.as_deref(), root.gpu_uuid.as_deref()]
            .into_iter()
            .flatten()
            .map(escape)
            .collect::<Vec<_>>()
            .join("<br>");
        let _ = write!(
            out,
            "<tr class=\"incident\" data-incident=\"{id}\" data-root-code=\"{code}\" data-codes=\"{codes}\" data-severity=\"{sev}\">\
             <td><code>{id}</code></td><td>{started}</td><td>{bus} on {host}<br>{gpu_detail}</td>\
             <td>XID {code}: {name}<br><small>{message}</small></td><td>{cascade}</td><td class=\"num\">{count}</td>\
             <td>{sev}</td><td>{action}</td><td>{affected}</td><td class=\"num\">{failed}</td></tr>",
            id = escape(&incident.id),
            code = root.code,
            codes = codes.join(","),
            sev = escape(&incident.worst_severity),
            started = time(root.time_ns),
            bus = escape(bus),
            host = escape(host),
            name = escape(&root.display_name()),
            message = escape(&root.message),
            cascade = codes.join(" → "),
            count = incident.codes.len(),
            action = escape(&root.display_action()),
            failed = incident.failed_calls,
        );
    }
    out.push_str("</tbody></table></section>");
}

fn functions(out: &mut String, data: &ReportData) {
    out.push_str("<section id=\"functions\"><h2>CUDA calls per function</h2>");
    if data.functions.is_empty() {
        out.push_str("<p class=\"empty\">No CUDA call in this range.</p></section>");
        return;
    }
    let _ = write!(
        out,
        "<p class=\"meta\">Rates are over the whole range ({:.0} s). Durations are entry to return; \
         calls recorded at entry only have none and are left out of the percentiles.</p>\
         <table><thead><tr><th>function</th><th class=\"num\">calls</th><th class=\"num\">calls/s</th>\
         <th class=\"num\">errors</th><th class=\"num\">p50</th><th class=\"num\">p99</th></tr></thead><tbody>",
        data.range.seconds()
    );
    for f in &data.functions {
        let pct = |v: Option<u64>| v.map(duration).unwrap_or_else(|| "entry only".into());
        let _ = write!(
            out,
            "<tr class=\"function\" data-function=\"{name}\"><td>{name}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            f.calls,
            rate(f.per_second),
            f.errors,
            pct(f.p50_ns),
            pct(f.p99_ns),
            name = escape(&f.function),
        );
    }
    out.push_str("</tbody></table></section>");
}

fn accounting(out: &mut String, data: &ReportData) {
    let a = &data.accounting;
    out.push_str("<section id=\"accounting\"><h2>Delivery accounting</h2>");
    for doc in &a.unreadable {
        let _ = write!(
            out,
            "<p class=\"warning\">Accounting document <code>{}</code> could not be read: {}</p>",
            escape(&doc.key),
            escape(&doc.error)
        );
    }
    if a.documents == 0 {
        out.push_str(
            "<p class=\"warning\" id=\"no-accounting\">No accounting documents (<code>_accounting/*.json</code>) \
             cover this range, so this report cannot say whether events were dropped or lost: the \
             rows above may be incomplete.</p></section>",
        );
        return;
    }
    let _ = write!(
        out,
        "<p class=\"meta\" id=\"accounting-summary\">From {} accounting document(s): {} delivered, {} dropped, \
         {} lost in the kernel.</p>\
         <table id=\"sinks\"><thead><tr><th>sink</th><th>kind</th><th class=\"num\">delivered</th>\
         <th class=\"num\">dropped</th><th>dropped by reason</th><th class=\"num\">failed</th></tr></thead><tbody>",
        a.documents,
        a.delivered(),
        a.dropped(),
        a.lost_in_kernel()
    );
    for ((sink, kind), totals) in &a.sinks {
        let reasons = totals
            .dropped_by_reason
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| format!("{} {n}", escape(r)))
            .collect::<Vec<_>>();
        let _ = write!(
            out,
            "<tr class=\"sink\" data-sink=\"{sink}\" data-kind=\"{kind}\"><td>{sink}</td><td>{kind}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            totals.delivered,
            totals.dropped,
            if reasons.is_empty() { "none".to_string() } else { reasons.join(", ") },
            totals.failed,
            sink = escape(sink),
            kind = escape(kind),
        );
    }
    out.push_str(
        "</tbody></table><table id=\"rings\"><thead><tr><th>ring</th><th class=\"num\">emitted</th>\
         <th class=\"num\">lost in kernel</th></tr></thead><tbody>",
    );
    for (ring, totals) in &a.rings {
        let _ = write!(
            out,
            "<tr class=\"ring\" data-ring=\"{ring}\"><td>{ring}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            totals.emitted,
            totals.lost_in_kernel,
            ring = escape(ring),
        );
    }
    out.push_str("</tbody></table>");
    let k = &a.kmsg;
    let _ = write!(
        out,
        "<p class=\"meta\" id=\"kmsg\">Kernel log: {} XID line(s) read, {} unparseable, {} gap(s) where \
         the kernel overwrote lines before they were read.</p></section>",
        k.xids, k.parse_errors, k.lost_gaps
    );
}
