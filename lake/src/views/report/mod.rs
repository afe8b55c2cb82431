//! `gpuship report`: one self-contained HTML page about a time range of the lake: per-GPU
//! timeline of XIDs and failed CUDA calls, incidents with their root cause and recommended
//! action, CUDA call rates and latencies per function, and the delivery accounting that says
//! how complete all of that is.
//!
//! [`data`] and [`functions`] compute, [`timeline`] and [`html`] render, [`format`] escapes and
//! formats values.

pub mod data;
pub mod format;
pub mod functions;
pub mod html;
pub mod timeline;

use std::collections::BTreeSet;

use gpuship_sinks::EventKind;

use crate::views::rows;
use crate::{Lake, TimeRange};
pub use data::ReportData;

/// The report of `range`: its data and its page.
pub fn build(lake: &Lake, range: TimeRange) -> anyhow::Result<(ReportData, String)> {
    let xid = lake.read_table(EventKind::Xid, &range)?;
    let cuda = lake.read_table(EventKind::Cuda, &range)?;
    let driver = lake.read_table(EventKind::Driver, &range)?;
    let accounting = lake.accounting(&range)?;
    let xids = rows::xids(&xid.batches);
    let calls = rows::cuda_calls(&cuda.batches);
    let driver_ops = rows::driver_ops(&driver.batches);
    let hosts: BTreeSet<String> = xids
        .iter()
        .map(|x| x.host.clone())
        .chain(calls.iter().map(|c| c.host.clone()))
        .chain(driver_ops.iter().map(|d| d.host.clone()))
        .filter(|h| !h.is_empty())
        .collect();
    let totals = data::Totals {
        xids: xids.len(),
        cuda_calls: calls.len(),
        cuda_failures: calls.iter().filter(|c| c.failed()).count(),
        driver_ops: driver_ops.len(),
        files_read: xid.files_read + cuda.files_read + driver.files_read,
        unreadable: [xid.unreadable, cuda.unreadable, driver.unreadable].concat(),
    };
    let data = data::aggregate(
        lake.location(),
        range,
        &calls,
        &xids,
        totals,
        hosts,
        accounting,
    );
    let page = html::render(&data);
    Ok((data, page))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row, xid_batch, xid_record};
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
            &calls,
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
             <td class=\"num\">20.0 µs</td><td class=\"num\">40.0 µs</td></tr>"
        ));
        assert!(page.contains("id=\"no-accounting\""));
        // Self-contained: nothing to fetch, nothing to run.
        for external in ["<script", "<link", "url(", "@import", "https://"] {
            assert!(!page.contains(external), "{external}");
        }
    }
}
