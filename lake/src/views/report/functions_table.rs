//! The report's section of CUDA calls per function: calls, rate, errors, mean/p50/p99 duration,
//! and how many of the calls came from `cuda_stats` aggregates ("from cuda_stats", a dash for
//! functions whose calls are all `cuda` rows). Values are computed in [`super::functions`];
//! text from the data goes through [`Text`].

use maud::{html, Markup};

use super::data::ReportData;
use super::format::{duration, rate};
use super::html::Text;

/// The section.
pub fn render(data: &ReportData) -> Markup {
    let timing = |v: Option<u64>| v.map(duration).unwrap_or_else(|| "entry only".into());
    let aggregated = data.functions.iter().any(|f| f.aggregated > 0);
    html! {
        section id="functions" {
            h2 { "CUDA calls per function" }
            @if data.functions.is_empty() {
                p class="empty" { "No CUDA call in this range." }
            } @else {
                p class="meta" {
                    "Rates are over the whole range (" (format!("{:.0}", data.range.seconds()))
                    " s). Durations are entry to return; calls recorded at entry only have none \
                     and are left out of the mean and percentiles."
                }
                @if aggregated {
                    p class="meta" id="stats-rule" {
                        "Functions with calls \"from cuda_stats\" ran in stats mode: their \
                         successful calls and durations come from the per-interval aggregates, \
                         their failures from their cuda rows, so a slow or failed call, which is \
                         both, counts once. Their p50 and p99 are interpolated within the \
                         aggregates' histogram buckets (within a quarter of the value)."
                    }
                }
                @if data.totals.flight_recorded > 0 {
                    p class="meta" id="flight-recorder-rule" {
                        "The " (data.totals.flight_recorded) " call(s) the flight recorder wrote \
                         are not counted here: they are copies of calls already counted (section \
                         \"Flight recorder\" above)."
                    }
                }
                table {
                    thead {
                        tr {
                            th { "function" } th class="num" { "calls" } th class="num" { "calls/s" }
                            th class="num" { "errors" } th class="num" { "mean" }
                            th class="num" { "p50" } th class="num" { "p99" }
                            th class="num" { "from cuda_stats" }
                        }
                    }
                    tbody {
                        @for f in &data.functions {
                            tr class="function" data-function=(Text(&f.function)) {
                                td { (Text(&f.function)) }
                                td class="num" { (f.calls) }
                                td class="num" { (rate(f.per_second)) }
                                td class="num" { (f.errors) }
                                td class="num" { (timing(f.mean_ns)) }
                                td class="num" { (timing(f.p50_ns)) }
                                td class="num" { (timing(f.p99_ns)) }
                                td class="num" {
                                    @if f.aggregated > 0 { (f.aggregated) } @else { "—" }
                                }
                            }
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
    use crate::views::cuda_stats::cuda_stats;
    use crate::views::fixtures::{cuda_batch, cuda_row, stats_batch, stats_row};
    use crate::views::report::data;
    use crate::views::rows::cuda_calls;
    use crate::{AccountingTotals, TimeRange};

    fn page(
        calls: &[crate::views::rows::CudaCall],
        stats_rows: &[crate::views::cuda_stats::CudaStats],
    ) -> String {
        let since = chrono::DateTime::from_timestamp_nanos(0);
        let range = TimeRange::new(since, since + chrono::Duration::seconds(100)).unwrap();
        let data = data::aggregate(
            "/data".into(),
            range,
            (calls, stats_rows),
            &[],
            data::Totals::default(),
            Default::default(),
            AccountingTotals::default(),
        );
        render(&data).into_string()
    }

    #[test]
    fn aggregated_functions_show_their_count_and_the_rule() {
        let stats = cuda_stats(&[stats_batch(&[stats_row(
            10_000_000_000,
            "cuLaunchKernel",
            10,
            &[(896, 1_024, 3), (1_024, 1_280, 7)],
        )])]);
        let calls = cuda_calls(&[cuda_batch(&[
            cuda_row(1_000, "cuLaunchKernel", 0, 20_000_000),
            cuda_row(2_000, "cuMemAlloc_v2", 2, 500),
        ])]);
        let html = page(&calls, &stats);
        assert!(
            html.contains(
                "<tr class=\"function\" data-function=\"cuLaunchKernel\"><td>cuLaunchKernel</td>\
                 <td class=\"num\">10</td><td class=\"num\">0.100</td><td class=\"num\">0</td>\
                 <td class=\"num\">985 ns</td><td class=\"num\">1.10 µs</td>\
                 <td class=\"num\">1.28 µs</td><td class=\"num\">10</td></tr>"
            ),
            "{html}"
        );
        assert!(
            html.contains(
                "<tr class=\"function\" data-function=\"cuMemAlloc_v2\"><td>cuMemAlloc_v2</td>\
                 <td class=\"num\">1</td><td class=\"num\">0.010</td><td class=\"num\">1</td>\
                 <td class=\"num\">500 ns</td><td class=\"num\">500 ns</td>\
                 <td class=\"num\">500 ns</td><td class=\"num\">—</td></tr>"
            ),
            "{html}"
        );
        assert!(html.contains("id=\"stats-rule\""));
        assert!(
            !page(&calls, &[]).contains("id=\"stats-rule\""),
            "rows only: no rule"
        );
    }

    #[test]
    fn hostile_function_names_from_aggregates_are_text() {
        let hostile = "<b>x</b>\"'\u{1b}[2J\n";
        let mut row = stats_row(10_000_000_000, "f", u64::MAX, &[(64, 80, 1)]);
        row.function = hostile.into();
        let html = page(&[], &cuda_stats(&[stats_batch(&[row])]));
        let escaped = "&lt;b&gt;x&lt;/b&gt;&quot;&#39;\u{fffd}[2J\n";
        assert_eq!(
            html.matches(escaped).count(),
            2,
            "attribute and cell: {html}"
        );
        assert!(!html.contains("<b>x") && !html.contains('\u{1b}'), "{html}");
        assert!(html.contains(&format!("<td class=\"num\">{}</td>", u64::MAX)));
    }
}
