//! The part of an incident's section that says what its processes held and what failed: the
//! failed calls (an out-of-memory allocation with what the process held then and its largest
//! allocations) and the `cuda_memory` figures nearest the incident. Every value from the data
//! goes through [`Text`].

use maud::{html, Markup};

use super::format::{bytes, time};
use super::html::Text;
use crate::views::rows::{Allocation, CudaCall, MemoryHeld};

/// The most failed calls listed per incident: the earliest.
pub const FAILED_SHOWN: usize = 50;

fn allocation(a: &Allocation) -> Markup {
    html! {
        li class="allocation" {
            (Text(&a.kind)) " "
            @match a.bytes { Some(n) => (bytes(n)), None => "size unknown" }
            " by " (Text(&a.function)) " at " (time(a.time_ns))
        }
    }
}

pub fn failed(calls: &[CudaCall]) -> Markup {
    html! {
        h4 { "Failed calls" }
        @if calls.is_empty() {
            p class="empty" { "No failed call of its processes." }
        } @else {
            table class="failed-calls" {
                thead { tr { th { "time" } th class="num" { "pid" } th { "function" } th { "result" } th { "details" } } }
                tbody {
                    @for c in calls.iter().take(FAILED_SHOWN) {
                        tr class="failed-call" data-call=(Text(&c.function)) data-result=(Text(&c.result_name)) {
                            td { (time(c.time_ns)) }
                            td class="num" { (c.pid) }
                            td { code { (Text(&c.function)) } }
                            td { (Text(&c.result_name)) }
                            td { (call_details(c)) }
                        }
                    }
                }
            }
            @if calls.len() > FAILED_SHOWN {
                p class="meta" { (calls.len() - FAILED_SHOWN) " later failed call(s) not listed." }
            }
        }
    }
}

fn call_details(c: &CudaCall) -> Markup {
    html! {
        @if let Some(n) = c.bytes { "asked for " (bytes(n)) }
        @if let Some(uuid) = &c.gpu_uuid { " on " (Text(uuid)) }
        @if let Some(held) = &c.held {
            br; "held then: device " (bytes(held.device)) ", pool " (bytes(held.pool))
            ", physical " (bytes(held.physical)) ", managed " (bytes(held.managed))
            ", pinned host " (bytes(held.host_pinned))
            @if !held.seen_from_start { " (at least: not seen from its start)" }
        }
        @if !c.largest_allocations.is_empty() {
            br; "largest allocations:"
            ol class="largest-allocations" {
                @for a in &c.largest_allocations { (allocation(a)) }
            }
        }
    }
}

pub fn memory(rows: &[MemoryHeld]) -> Markup {
    html! {
        h4 { "Memory held" }
        @if rows.is_empty() {
            p class="empty" { "No cuda_memory row of its processes in this range." }
        } @else {
            table class="memory-held" {
                thead {
                    tr {
                        th class="num" { "pid" } th { "GPU" } th { "device" } th { "pool" }
                        th { "physical" } th { "managed" } th { "pinned host" }
                        th class="num" { "allocations" } th { "as of" }
                    }
                }
                tbody {
                    @for m in rows {
                        tr class="memory" data-pid=(m.pid) {
                            td class="num" { (m.pid) }
                            td {
                                (Text(m.gpu_uuid.as_deref().unwrap_or("unknown GPU")))
                                @if let Some(bus) = &m.pci_bus_id { " (" (Text(bus)) ")" }
                            }
                            td { (bytes(m.device_bytes)) } td { (bytes(m.pool_bytes)) }
                            td { (bytes(m.physical_bytes)) } td { (bytes(m.managed_bytes)) }
                            td { (bytes(m.host_pinned_bytes)) }
                            td class="num" { (m.allocations) }
                            td {
                                (time(m.time_ns))
                                @if !m.seen_from_start { " (at least)" }
                            }
                        }
                    }
                }
            }
        }
    }
}
