//! The Prometheus exposition of an accounting [`Snapshot`], encoded by `prometheus-client` in
//! the OpenMetrics text format, which escapes label values: a sink name with `"`, `\` or a
//! newline stays one label value and cannot break the document.
//!
//! Every scrape builds a registry around one snapshot (the counters live in
//! [`crate::accounting`], not here), so the identities between families hold within a scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

pub use budget::BUDGET_FAMILIES;
pub use libraries::LIBRARY_FAMILIES;
pub use reload::RELOAD_FAMILIES;

use super::health_render::{ExportCounts, HealthCollector};
use super::otlp::ExportCounters;
use crate::accounting::{RingSnapshot, SinkSnapshot, Snapshot};
use crate::health::HealthSnapshot;

/// The `Content-Type` of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The OpenMetrics text of `snapshot` and `health`, ending with `# EOF`.
pub fn render(
    snapshot: &Snapshot,
    health: HealthSnapshot,
    otlp_exports: Option<&ExportCounters>,
) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(snapshot.clone())));
    registry.register_collector(Box::new(HealthCollector {
        health,
        otlp_exports: otlp_exports.map(ExportCounts::read),
    }));
    let mut out = String::with_capacity(8192);
    // Writing into a String cannot fail; an encoder error would be a bug in a family below.
    if let Err(err) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::error!(%err, "encoding the metrics");
    }
    out
}

#[derive(Debug)]
struct SnapshotCollector(Snapshot);

pub(super) type Labels<'a> = Vec<(&'static str, &'a str)>;

/// One family: its name as exposed (counters end in `_total`, which the encoder adds back to
/// every sample), help, type, and samples.
pub(super) fn family<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric_type: MetricType,
    samples: impl IntoIterator<Item = (Labels<'a>, u64)>,
) -> Result<(), std::fmt::Error> {
    let name = match metric_type {
        MetricType::Counter => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    };
    let mut metric = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, value) in samples {
        if labels.is_empty() {
            // A family without labels has one sample, written `name value`.
            return sample(metric_type, value, metric);
        }
        sample(metric_type, value, metric.encode_family(&labels)?)?;
    }
    Ok(())
}

fn sample(metric_type: MetricType, value: u64, encoder: MetricEncoder) -> std::fmt::Result {
    match metric_type {
        MetricType::Counter => ConstCounter::new(value).encode(encoder),
        _ => ConstGauge::new(value).encode(encoder),
    }
}

type RingField = fn(&RingSnapshot) -> u64;
const RING_FAMILIES: [(&str, &str, MetricType, RingField); 14] = [
    (
        "gpuship_kernel_emitted_events_total",
        "Events the BPF probes produced (submitted + lost).",
        MetricType::Counter,
        |r| r.emitted,
    ),
    (
        "gpuship_kernel_lost_events_total",
        "Events lost in the kernel because the ring was full.",
        MetricType::Counter,
        |r| r.lost_in_kernel,
    ),
    (
        "gpuship_ring_received_events_total",
        "Events taken off the ring by the agent.",
        MetricType::Counter,
        |r| r.received,
    ),
    (
        "gpuship_ring_pending_events",
        "Events submitted but not yet taken off the ring.",
        MetricType::Gauge,
        |r| r.pending_in_ring,
    ),
    (
        "gpuship_ring_decode_errors_total",
        "Malformed ring records (received, not delivered).",
        MetricType::Counter,
        |r| r.decode_errors,
    ),
    (
        "gpuship_probe_unmatched_returns_total",
        "Return probes whose entry record was missing (the call is not recorded).",
        MetricType::Counter,
        |r| r.unmatched_returns,
    ),
    (
        "gpuship_probe_inflight_full_total",
        "Calls not recorded because the probes' in-flight table was full.",
        MetricType::Counter,
        |r| r.inflight_full,
    ),
    (
        "gpuship_probe_aggregated_calls_total",
        "Calls added to the kernel's per-interval statistics (stats mode) instead of the ring.",
        MetricType::Counter,
        |r| r.aggregated,
    ),
    (
        "gpuship_probe_aggregated_received_calls_total",
        "Aggregated calls the agent took out of the statistics table into cuda_stats rows.",
        MetricType::Counter,
        |r| r.aggregated_received,
    ),
    (
        "gpuship_probe_stats_full_total",
        "Calls not aggregated because the statistics table was full (not recorded).",
        MetricType::Counter,
        |r| r.stats_full,
    ),
    (
        "gpuship_flight_recorder_rows_total",
        "Aggregated calls the flight recorder wrote as rows when an incident started.",
        MetricType::Counter,
        |r| r.flight_recorded,
    ),
    (
        "gpuship_probe_unnamed_requests_total",
        "NVIDIA ioctls whose request has no name in gpuship's tables (a newer driver's; logged once per code).",
        MetricType::Counter,
        |r| r.unnamed_requests,
    ),
    (
        "gpuship_cuda_unknown_kernel_launches_total",
        "Launch rows whose kernel handle was made before the agent started, named unknown.",
        MetricType::Counter,
        |r| r.unknown_kernel_launches,
    ),
    (
        "gpuship_cuda_kernel_names_dropped_total",
        "Kernel names not kept because the agent's name table was full.",
        MetricType::Counter,
        |r| r.kernel_names_dropped,
    ),
];

type SinkField = fn(&SinkSnapshot) -> u64;
const SINK_FAMILIES: [(&str, &str, MetricType, SinkField); 9] = [
    (
        "gpuship_component_received_events_total",
        "Events offered to the sink.",
        MetricType::Counter,
        |s| s.received,
    ),
    (
        "gpuship_component_sent_events_total",
        "Events the destination acknowledged.",
        MetricType::Counter,
        |s| s.delivered,
    ),
    (
        "gpuship_component_failed_events_total",
        "Events lost to destination errors.",
        MetricType::Counter,
        |s| s.failed,
    ),
    (
        "gpuship_component_filtered_events_total",
        "Events left out by the sink's kinds/cuda_filter.",
        MetricType::Counter,
        |s| s.filtered,
    ),
    (
        "gpuship_component_in_flight_events",
        "Events received but not yet delivered, dropped or failed.",
        MetricType::Gauge,
        |s| s.in_flight,
    ),
    (
        "gpuship_buffer_events",
        "Events waiting in the sink's queue.",
        MetricType::Gauge,
        |s| s.queued_events,
    ),
    (
        "gpuship_component_spooled_events_total",
        "Events written to the sink's disk spool.",
        MetricType::Counter,
        |s| s.spooled,
    ),
    (
        "gpuship_component_replayed_events_total",
        "Events read back from the spool.",
        MetricType::Counter,
        |s| s.replayed,
    ),
    (
        "gpuship_spool_events",
        "Events in the sink's spool now.",
        MetricType::Gauge,
        |s| s.spooled_pending,
    ),
];

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = &self.0;
        for (name, help, metric_type, value) in RING_FAMILIES {
            let samples = snapshot
                .rings
                .iter()
                .map(|r| (vec![("ring", r.ring)], value(r)));
            family(&mut encoder, name, help, metric_type, samples)?;
        }
        let kmsg = &snapshot.kmsg;
        for (name, help, value) in [
            (
                "gpuship_kmsg_xid_events_total",
                "XID lines read from the kernel log.",
                kmsg.xids,
            ),
            (
                "gpuship_kmsg_parse_errors_total",
                "Kernel log XID lines that could not be parsed.",
                kmsg.parse_errors,
            ),
            (
                "gpuship_xid_unpaired_tracepoint_total",
                "XIDs the tracepoint reported that the kernel log did not (both sources running).",
                kmsg.unpaired_tracepoint,
            ),
            (
                "gpuship_xid_unpaired_kmsg_total",
                "XIDs the kernel log reported that the tracepoint did not (both sources running).",
                kmsg.unpaired_kmsg,
            ),
            (
                "gpuship_kmsg_lost_gaps_total",
                "Gaps where the kernel overwrote log records before they were read.",
                kmsg.lost_gaps,
            ),
        ] {
            family(
                &mut encoder,
                name,
                help,
                MetricType::Counter,
                [(vec![], value)],
            )?;
        }
        self.encode_sinks(&mut encoder)?;
        reload::encode(&snapshot.reloads, &mut encoder)?;
        libraries::encode(&snapshot.libraries, &mut encoder)?;
        budget::encode(&snapshot.budget, &mut encoder)?;
        state_files::encode(&snapshot.state_files_set_aside, &mut encoder)?;
        family(
            &mut encoder,
            "gpuship_build_info",
            "Version, git commit and build date of the running agent (as gpuship --version).",
            MetricType::Gauge,
            [(
                vec![
                    ("version", env!("CARGO_PKG_VERSION")),
                    ("commit", env!("GPUSHIP_COMMIT")),
                    ("built", env!("GPUSHIP_BUILD_DATE")),
                ],
                1,
            )],
        )
    }
}

impl SnapshotCollector {
    fn encode_sinks(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = &self.0;
        for (name, help, metric_type, value) in SINK_FAMILIES {
            let samples = snapshot.sinks.iter().map(|s| (sink_labels(s), value(s)));
            family(encoder, name, help, metric_type, samples)?;
        }
        let discarded = snapshot.sinks.iter().flat_map(|s| {
            gpuship_sinks::DropReason::ALL.iter().map(move |reason| {
                let value = s
                    .dropped_by_reason
                    .get(reason.as_str())
                    .copied()
                    .unwrap_or(0);
                let mut labels = sink_labels(s);
                labels.push(("reason", reason.as_str()));
                labels.push((
                    "intentional",
                    if reason.intentional() {
                        "true"
                    } else {
                        "false"
                    },
                ));
                (labels, value)
            })
        });
        family(
            encoder,
            "gpuship_component_discarded_events_total",
            "Events dropped before the destination, by reason.",
            MetricType::Counter,
            discarded,
        )?;
        family(
            encoder,
            "gpuship_sink_healthy",
            "1 while the sink's destination works, 0 from a failed delivery until the next success.",
            MetricType::Gauge,
            snapshot
                .sink_health
                .iter()
                .map(|s| (health_labels(&s.sink), u64::from(s.healthy))),
        )?;
        let errors = snapshot.sink_health.iter().flat_map(|s| {
            s.errors.iter().map(|(error, count)| {
                let mut labels = health_labels(&s.sink);
                labels.push(("error", error.as_str()));
                (labels, *count)
            })
        });
        family(
            encoder,
            "gpuship_sink_delivery_errors_total",
            "Events whose delivery attempt failed, by error (retried events count once per attempt).",
            MetricType::Counter,
            errors,
        )?;
        family(
            encoder,
            "gpuship_sink_spool_corrupt_segments_total",
            "Damaged spool or journal segments found and set aside (their events count as discarded with reason spool_corrupt).",
            MetricType::Counter,
            snapshot
                .sink_health
                .iter()
                .map(|s| (health_labels(&s.sink), s.corrupt_segments)),
        )
    }
}

fn sink_labels(s: &SinkSnapshot) -> Labels<'_> {
    vec![
        ("component_id", s.sink.as_str()),
        ("component_kind", "sink"),
        ("kind", s.kind.as_str()),
    ]
}

fn health_labels(sink: &str) -> Labels<'_> {
    vec![("component_id", sink), ("component_kind", "sink")]
}

mod budget;
mod libraries;
mod reload;
mod state_files;
#[cfg(test)]
mod tests;
