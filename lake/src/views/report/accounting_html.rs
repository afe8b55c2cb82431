//! The report's delivery accounting section: what the lake's accounting documents say was
//! delivered, dropped and lost per sink, ring and the kernel log, or a warning that no document
//! covers the range (so the page cannot say whether its rows are complete).

use maud::{html, Markup};

use super::data::ReportData;
use super::html::Text;
use crate::AccountingTotals;

/// The section.
pub fn render(data: &ReportData) -> Markup {
    let a = &data.accounting;
    html! {
        section id="accounting" {
            h2 { "Delivery accounting" }
            @for doc in &a.unreadable {
                p class="warning" {
                    "Accounting document " code { (Text(&doc.key)) } " could not be read: "
                    (Text(&doc.error))
                }
            }
            @if a.documents == 0 {
                p class="warning" id="no-accounting" {
                    "No accounting documents (" code { "_accounting/*.json" } ") cover this range, \
                     so this report cannot say whether events were dropped or lost: the rows above \
                     may be incomplete."
                }
            } @else {
                (accounting_tables(a))
            }
        }
    }
}

/// The summary, the sink and ring tables and the kernel-log line of the accounting section.
fn accounting_tables(a: &AccountingTotals) -> Markup {
    let k = &a.kmsg;
    html! {
        p class="meta" id="accounting-summary" {
            "From " (a.documents) " accounting document(s): " (a.delivered()) " delivered, "
            (a.dropped()) " dropped, " (a.lost_in_kernel()) " lost in the kernel."
        }
        table id="sinks" {
            thead {
                tr {
                    th { "sink" } th { "kind" } th class="num" { "delivered" }
                    th class="num" { "dropped" } th { "dropped by reason" } th class="num" { "failed" }
                }
            }
            tbody {
                @for ((sink, kind), totals) in &a.sinks {
                    @let reasons: Vec<_> = totals.dropped_by_reason.iter().filter(|(_, n)| **n > 0).collect();
                    tr class="sink" data-sink=(Text(sink)) data-kind=(Text(kind)) {
                        td { (Text(sink)) }
                        td { (Text(kind)) }
                        td class="num" { (totals.delivered) }
                        td class="num" { (totals.dropped) }
                        td {
                            @if reasons.is_empty() { "none" }
                            @for (i, (reason, n)) in reasons.iter().enumerate() {
                                @if i > 0 { ", " }
                                (Text(reason)) " " (n)
                            }
                        }
                        td class="num" { (totals.failed) }
                    }
                }
            }
        }
        table id="rings" {
            thead { tr { th { "ring" } th class="num" { "emitted" } th class="num" { "lost in kernel" } } }
            tbody {
                @for (ring, totals) in &a.rings {
                    tr class="ring" data-ring=(Text(ring)) {
                        td { (Text(ring)) }
                        td class="num" { (totals.emitted) }
                        td class="num" { (totals.lost_in_kernel) }
                    }
                }
            }
        }
        p class="meta" id="kmsg" {
            "Kernel log: " (k.xids) " XID line(s) read, " (k.parse_errors) " unparseable, "
            (k.lost_gaps) " gap(s) where the kernel overwrote lines before they were read."
        }
    }
}
