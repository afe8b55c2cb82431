//! `gpuship report`: one self-contained HTML page about a time range of the lake: per-GPU
//! timeline of XIDs and failed CUDA calls, incidents with their root cause and recommended
//! action, the calls the flight recorder wrote before them, CUDA call rates and latencies per
//! function (from `cuda` rows and `cuda_stats` aggregates, each call once), and the delivery
//! accounting that says how complete all of that is. Each incident has a section of its own:
//! GPU, XIDs, processes, suspect kernels, the flight recorder's calls, failed calls and the
//! memory its processes held ([`incident`], [`incident_html`], [`failures_html`]).
//!
//! [`data`], [`lanes`] and [`functions`] compute, [`timeline`], [`html`], [`functions_table`]
//! and [`accounting_html`] render, [`flight_recorder`] does both for its rows, [`format`]
//! escapes and formats values.

pub mod accounting_html;
pub mod data;
pub mod failures_html;
pub mod flight_recorder;
pub mod format;
pub mod functions;
pub mod functions_table;
pub mod html;
pub mod incident;
pub mod incident_html;
pub mod lanes;
pub mod nearest_memory;
pub mod sql;
pub mod timeline;

use std::collections::BTreeSet;

use gpuship_model::EventKind;

use crate::{Lake, TimeRange};
pub use data::ReportData;
use nearest_memory::NearestMemory;

/// The report of `range`: its data and its page. Counts and per-function statistics are
/// computed by the engine; only XIDs, failed CUDA calls and the flight recorder's calls come
/// back as rows.
pub fn build(lake: &Lake, range: TimeRange) -> anyhow::Result<(ReportData, String)> {
    let started = std::time::Instant::now();
    let phase = |name: &str| {
        tracing::debug!(
            phase = name,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "report"
        );
    };
    // Every `cuda_stats` row the report reads is added up (sql::cuda_summary).
    let mut read = lake.tables_rolled_up(
        &[
            EventKind::Xid,
            EventKind::Cuda,
            EventKind::Driver,
            EventKind::CudaStats,
            EventKind::CudaMemory,
        ],
        &range,
    )?;
    phase("listed");
    let xids = sql::xids(&mut read)?;
    phase("xids");
    let mut calls = sql::failed_calls(&mut read)?;
    phase("failed calls");
    let cuda = sql::cuda_summary(&mut read, range.seconds())?;
    phase("call statistics");
    // A third scan of `cuda` only for a range that holds such rows.
    if cuda.flight_recorded > 0 {
        calls.extend(sql::flight_recorded_calls(&mut read)?);
        calls.sort_by_key(|c| (c.time_ns, c.pid, c.tid));
        phase("flight recorder");
    }
    let (driver_ops, driver_hosts) =
        sql::count_by_host(&mut read, EventKind::Driver, sql::DRIVER_OP)?;
    phase("driver");
    let mut hosts: BTreeSet<String> = xids
        .iter()
        .map(|x| x.host.clone())
        .filter(|h| !h.is_empty())
        .collect();
    hosts.extend(cuda.hosts);
    hosts.extend(driver_hosts);
    let accounting = lake.accounting(&range)?;
    let totals = data::Totals {
        xids: xids.len(),
        cuda_calls: saturating_sum(cuda.functions.iter().map(|f| f.calls)),
        cuda_failures: saturating_sum(cuda.functions.iter().map(|f| f.errors)),
        cuda_aggregated: saturating_sum(cuda.functions.iter().map(|f| f.aggregated)),
        flight_recorded: cuda.flight_recorded,
        driver_ops,
        files_read: read.files_read(),
        unreadable: read.unreadable(),
    };
    let mut data = data::without_functions(
        lake.location(),
        range,
        &calls,
        &xids,
        totals,
        hosts,
        accounting,
    );
    data.functions = cuda.functions;
    phase("aggregated");
    let memory = sql::memory_held(&mut read, NearestMemory::for_incidents(&data.incidents))?;
    memory.attach(&mut data.incidents);
    phase("memory held");
    let page = html::render(&data);
    phase("rendered");
    Ok((data, page))
}

/// The sum of counts that may come from hostile rows: at most `u64::MAX`, never a panic.
fn saturating_sum(counts: impl Iterator<Item = u64>) -> u64 {
    counts.fold(0, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row, xid_batch, xid_record};
    use crate::views::rows;
    use crate::AccountingTotals;

    fn report(message: &str) -> String {
        let since = chrono::DateTime::from_timestamp_nanos(0);
        let range = TimeRange::new(since, since + chrono::Duration::seconds(100)).unwrap();
        let mut bystander = xid_record(2_000_000_000, 43, "0000:86:00.0", "warning", "ok");
        bystander.pid = None;
        bystander.annotations.affected_pids.clear();
        let xids = rows::xids(&[xid_batch(&[
            xid_record(1_000_000_000, 79, "0000:3b:00.0", "fatal", message),
            bystander,
        ])]);
        let calls = rows::cuda_calls(&[cuda_batch(&[
            cuda_row(1_500_000_000, "cuCtxSynchronize", 700, 40_000),
            cuda_row(1_600_000_000, "cuCtxSynchronize", 0, 20_000),
        ])]);
        let data = data::aggregate(
            "/data".into(),
            range,
            (&calls, &[]),
            &xids,
            data::Totals::default(),
            ["node-a".to_string()].into(),
            AccountingTotals::default(),
        );
        html::render(&data)
    }

    #[test]
    fn markup_in_an_xid_message_is_rendered_as_text() {
        let page = report("<script>alert('owned')</script><img src=x onerror=alert(1)>");
        assert!(!page.contains("<script"), "no script element may appear");
        assert!(
            !page.contains("<img"),
            "no element from the data may appear"
        );
        assert!(page.contains("&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;"));
        assert!(page.contains("Content-Security-Policy"));
    }

    #[test]
    fn the_page_holds_markers_incidents_functions_and_the_missing_accounting() {
        let page = report("GPU has fallen off the bus.");
        assert_eq!(page.matches("<circle class=\"xid-marker\"").count(), 2);
        assert!(page.contains("data-code=\"79\" data-severity=\"fatal\""));
        assert!(page.contains(&format!("fill=\"{}\"", timeline::severity_color("fatal"))));
        assert_eq!(page.matches("<polygon class=\"cuda-failure\"").count(), 1);
        assert_eq!(page.matches("<tr class=\"incident\"").count(), 2);
        assert!(page.contains(
            "<tr class=\"function\" data-function=\"cuCtxSynchronize\"><td>cuCtxSynchronize</td>\
             <td class=\"num\">2</td><td class=\"num\">0.020</td><td class=\"num\">1</td>\
             <td class=\"num\">30.0 µs</td><td class=\"num\">20.0 µs</td><td class=\"num\">40.0 µs</td>\
             <td class=\"num\">—</td></tr>"
        ));
        assert!(page.contains("id=\"no-accounting\""));
        // Self-contained: nothing to fetch, nothing to run.
        for external in ["<script", "<link", "url(", "@import", "https://"] {
            assert!(!page.contains(external), "{external}");
        }
    }
}
