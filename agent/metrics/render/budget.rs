//! The overhead budget's families of `/metrics` (docs/performance.md, "The overhead budget"):
//! the node's measured trap cost, the processes sampled now, where the hot links are, and
//! how often windows opened and links switched. Nothing when no budget applies.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::encoding::EncodeMetric;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::family;
use crate::accounting::budget::BudgetSnapshot;

/// Family names, for the docs and tests.
pub const BUDGET_FAMILIES: [&str; 6] = [
    "gpuship_cuda_budget_trap_cost_seconds",
    "gpuship_cuda_budget_sampled_processes",
    "gpuship_cuda_budget_per_process_links",
    "gpuship_cuda_budget_windows_total",
    "gpuship_cuda_budget_mode_switches_total",
    "gpuship_cuda_budget_attach_failures_total",
];

/// Encodes the budget families.
pub(super) fn encode(
    snapshot: &BudgetSnapshot,
    encoder: &mut DescriptorEncoder,
) -> std::fmt::Result {
    if !snapshot.active {
        return Ok(());
    }
    let cost = encoder.encode_descriptor(
        BUDGET_FAMILIES[0],
        "The cost of one probed call measured on this node (trap and map updates), at start and every 10 minutes.",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(snapshot.trap_cost_ns as f64 / 1e9).encode(cost)?;
    family(
        encoder,
        BUDGET_FAMILIES[1],
        "Processes whose hot CUDA functions are probed part of the time now (their cost would pass the budget).",
        MetricType::Gauge,
        [(vec![], snapshot.sampled_processes)],
    )?;
    family(
        encoder,
        BUDGET_FAMILIES[2],
        "1 while the hot functions are probed through per-process links, 0 while through system-wide ones.",
        MetricType::Gauge,
        [(vec![], u64::from(snapshot.per_process))],
    )?;
    family(
        encoder,
        BUDGET_FAMILIES[3],
        "Observation windows opened for sampled processes (one pid-filtered attach each).",
        MetricType::Counter,
        [(vec![], snapshot.windows)],
    )?;
    family(
        encoder,
        BUDGET_FAMILIES[4],
        "Switches of the hot links between system-wide and per-process.",
        MetricType::Counter,
        [(vec![], snapshot.mode_switches)],
    )?;
    family(
        encoder,
        BUDGET_FAMILIES[5],
        "Per-process link attaches that failed (mostly a process that exited meanwhile).",
        MetricType::Counter,
        [(vec![], snapshot.attach_failures)],
    )
}
