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

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// One family: its name as exposed (counters end in `_total`, which the encoder adds back to
/// every sample), help, type, and samples.
fn family<'a>(
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
const RING_FAMILIES: [(&str, &str, MetricType, RingField); 11] = [
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
        family(
            &mut encoder,
            "gpuship_build_info",
            "Version of the running agent.",
            MetricType::Gauge,
            [(vec![("version", env!("CARGO_PKG_VERSION"))], 1)],
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use gpuship_sinks::{DropReason, EventKind, SinkStats};

    use super::*;
    use crate::accounting::{Accounting, Ring};
    use crate::live::LiveTap;

    #[test]
    fn exposition_has_every_family_with_labels_and_values() {
        let mut accounting = Accounting::default();
        let stats = Arc::new(SinkStats::default());
        stats.received.add(EventKind::Cuda, 10);
        stats.delivered.add(EventKind::Cuda, 6);
        stats.drop_events(DropReason::BufferFull, EventKind::Cuda, 3);
        stats.set_healthy(false);
        stats.count_error("message_timed_out", 4);
        accounting.sinks.push(("lake".into(), stats));
        let (cuda, driver) = (accounting.ring(Ring::Cuda), accounting.ring(Ring::Driver));
        cuda.submitted.store(12, Ordering::Relaxed);
        cuda.lost_in_kernel.store(2, Ordering::Relaxed);
        driver.unmatched_returns.store(5, Ordering::Relaxed);
        let text = render(&accounting.snapshot(), LiveTap::new().health(), None);
        for line in [
            "gpuship_kernel_emitted_events_total{ring=\"cuda\"} 14",
            "gpuship_kernel_lost_events_total{ring=\"cuda\"} 2",
            "gpuship_probe_unmatched_returns_total{ring=\"driver\"} 5",
            "gpuship_probe_inflight_full_total{ring=\"cuda\"} 0",
            "gpuship_ring_pending_events{ring=\"xid\"} 0",
            "gpuship_kmsg_xid_events_total 0",
            "gpuship_component_received_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\"} 10",
            "gpuship_component_sent_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\"} 6",
            "gpuship_component_discarded_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\",reason=\"buffer_full\",intentional=\"true\"} 3",
            "gpuship_component_in_flight_events{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\"} 1",
            "# TYPE gpuship_buffer_events gauge",
            "# TYPE gpuship_component_sent_events counter",
            "gpuship_sink_healthy{component_id=\"lake\",component_kind=\"sink\"} 0",
            "gpuship_sink_delivery_errors_total{component_id=\"lake\",component_kind=\"sink\",error=\"message_timed_out\"} 4",
            "gpuship_component_discarded_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\",reason=\"rejected\",intentional=\"false\"} 0",
            concat!("gpuship_build_info{version=\"", env!("CARGO_PKG_VERSION"), "\"} 1"),
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert_eq!(text.lines().last(), Some("# EOF"));
        // Every sample line is `name{labels} value` or `name value` with a numeric value.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<u64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn label_values_with_quotes_backslashes_and_newlines_are_escaped() {
        let mut accounting = Accounting::default();
        let hostile = "a\"} evil{x=\"1\\\nnext";
        let stats = Arc::new(SinkStats::default());
        stats.received.add(EventKind::Xid, 7);
        stats.count_error("bad\"error\n", 2);
        accounting.sinks.push((hostile.into(), stats));
        let text = render(&accounting.snapshot(), LiveTap::new().health(), None);
        let escaped = r#"a\"} evil{x=\"1\\\nnext"#;
        let line = format!(
            "gpuship_component_received_events_total{{component_id=\"{escaped}\",component_kind=\"sink\",kind=\"xid\"}} 7"
        );
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
        assert!(text.contains(r#"error="bad\"error\n"} 2"#), "{text}");
        // Every line is a comment or a sample whose labels parse: the name, then `{`, label
        // pairs with quoted values, `}`, a space and a number.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').expect("sample");
            assert!(value.parse::<u64>().is_ok(), "{line}");
            if let Some((_, labels)) = series.split_once('{') {
                let labels = parse_labels(labels).unwrap_or_else(|| panic!("{line}"));
                assert!(!labels.is_empty(), "{line}");
            }
        }
        let received = text
            .lines()
            .find(|l| {
                l.starts_with("gpuship_component_received_events_total{")
                    && l.contains("kind=\"xid\"")
            })
            .expect("received line");
        let labels = parse_labels(
            received
                .split_once('{')
                .unwrap()
                .1
                .rsplit_once(' ')
                .unwrap()
                .0,
        );
        assert_eq!(
            labels.unwrap()[0],
            ("component_id".to_string(), hostile.to_string())
        );
    }

    /// `k="v",k="v"}` with the exposition's escapes; None when it does not parse.
    fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
        let mut labels = Vec::new();
        let mut rest = text;
        loop {
            let (key, after) = rest.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next()? {
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        _ => return None,
                    },
                    (i, '"') => break i,
                    (_, c) => value.push(c),
                }
            };
            labels.push((key.to_string(), value));
            rest = &after[end + 1..];
            match rest.strip_prefix(',') {
                Some(next) => rest = next,
                None => return (rest == "}").then_some(labels),
            }
        }
    }
}
