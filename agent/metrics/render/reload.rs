//! The configuration-reload families of `/metrics` (docs/operations.md, "Reloading the
//! configuration"), named after Prometheus's own `prometheus_config_last_reload_*`.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::family;
use crate::accounting::ReloadSnapshot;

/// Family names, for the docs and tests.
pub const RELOAD_FAMILIES: [&str; 4] = [
    "gpuship_config_reloads_total",
    "gpuship_config_last_reload_success",
    "gpuship_config_last_reload_success_timestamp_seconds",
    "gpuship_config_last_reload_capture_gap_seconds",
];

/// A one-sample gauge family in seconds.
fn seconds(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> std::fmt::Result {
    let gauge = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(gauge)
}

/// Encodes the reload families.
pub(super) fn encode(
    reloads: &ReloadSnapshot,
    encoder: &mut DescriptorEncoder,
) -> std::fmt::Result {
    family(
        encoder,
        RELOAD_FAMILIES[0],
        "Configuration reloads (SIGHUP) by result: applied, or rejected (the agent kept its configuration).",
        MetricType::Counter,
        [
            (vec![("result", "applied")], reloads.applied),
            (vec![("result", "rejected")], reloads.rejected),
        ],
    )?;
    family(
        encoder,
        RELOAD_FAMILIES[1],
        "1 when the last reload was applied (or none was asked for), 0 when it was rejected.",
        MetricType::Gauge,
        [(vec![], u64::from(reloads.last_succeeded))],
    )?;
    seconds(
        encoder,
        RELOAD_FAMILIES[2],
        "When a configuration was last loaded successfully, at start or by a reload (Unix seconds).",
        reloads.last_success_unix_ms as f64 / 1e3,
    )?;
    seconds(
        encoder,
        RELOAD_FAMILIES[3],
        "How long capture stopped during the last reload that restarted the sources (0: none did).",
        reloads.last_capture_gap_ns as f64 / 1e9,
    )
}
