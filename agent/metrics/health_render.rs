//! The GPU-health families of `/metrics`, from one [`HealthSnapshot`]: the rows of
//! [`HEALTH`] (shared with the OTLP exporter) with Prometheus label names, then the OTLP
//! exporter's own counts. Label sets and their bounds: docs/operations.md, "Alerting metrics".

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use std::sync::atomic::Ordering;

use super::health_table::{Kind, Label, Value, HEALTH};
use super::otlp::ExportCounters;
use super::render::{family, Labels};
use crate::health::xids::GpuLabels;
use crate::health::HealthSnapshot;

/// Encodes a [`HealthSnapshot`] and the OTLP exporter's counts.
#[derive(Debug)]
pub(super) struct HealthCollector {
    pub health: HealthSnapshot,
    pub otlp_exports: Option<ExportCounts>,
}

/// [`ExportCounters`] read once.
#[derive(Debug, Clone, Copy)]
pub(super) struct ExportCounts {
    succeeded: u64,
    failed: u64,
    rejected_points: u64,
}

impl ExportCounts {
    pub fn read(counters: &ExportCounters) -> Self {
        Self {
            succeeded: counters.succeeded.load(Ordering::Relaxed),
            failed: counters.failed.load(Ordering::Relaxed),
            rejected_points: counters.rejected_points.load(Ordering::Relaxed),
        }
    }
}

fn gpu_labels(gpu: &GpuLabels) -> Labels<'_> {
    vec![
        ("gpu_uuid", gpu.uuid.as_str()),
        ("pci_bus_id", gpu.pci_bus_id.as_str()),
        ("gpu_index", gpu.index.as_str()),
    ]
}

/// The table's labels with their Prometheus names.
fn labels<'a>(labels: &[Label<'a>]) -> Labels<'a> {
    let mut out = Vec::new();
    for label in labels {
        match *label {
            Label::Gpu(gpu) => out.extend(gpu_labels(gpu)),
            Label::Xid {
                code,
                name,
                severity,
            } => out.extend([("code", code), ("name", name), ("severity", severity)]),
            Label::Function(function) => out.push(("function", function)),
            Label::Result(result) => out.push(("result", result)),
            Label::Family(family) => out.push(("family", family)),
            Label::MemoryKind(kind) => out.push(("kind", kind)),
        }
    }
    out
}

/// Counter families are written by the pipeline's encoder (`_total` handling, label-less
/// families).
fn counters<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Labels<'a>, u64)>,
) -> std::fmt::Result {
    family(encoder, name, help, MetricType::Counter, samples)
}

/// A gauge family with floating-point values (the pipeline's families are integers).
fn float_gauges<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Labels<'a>, f64)>,
) -> std::fmt::Result {
    let mut gauge = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in samples {
        ConstGauge::new(value).encode(gauge.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for HealthCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        for row in &HEALTH {
            let samples = (row.samples)(&self.health);
            match row.kind {
                Kind::Histogram => {
                    let mut durations = encoder.encode_descriptor(
                        row.name,
                        row.help,
                        None,
                        MetricType::Histogram,
                    )?;
                    for sample in &samples {
                        let Value::Durations(function) = sample.value else {
                            continue;
                        };
                        durations
                            .encode_family(&labels(&sample.labels))?
                            .encode_histogram::<NoLabelSet>(
                                function.duration_sum_ns as f64 / 1e9,
                                function.durations.total(),
                                &function.durations.buckets_seconds(),
                                None,
                            )?;
                    }
                }
                Kind::Gauge if samples.iter().any(|s| matches!(s.value, Value::Float(_))) => {
                    float_gauges(
                        &mut encoder,
                        row.name,
                        row.help,
                        samples.iter().map(|sample| {
                            let value = match sample.value {
                                Value::Float(value) => value,
                                Value::Int(value) => value as f64,
                                Value::Durations(_) => 0.0,
                            };
                            (labels(&sample.labels), value)
                        }),
                    )?;
                }
                kind => {
                    let metric_type = match kind {
                        Kind::Counter => MetricType::Counter,
                        _ => MetricType::Gauge,
                    };
                    family(
                        &mut encoder,
                        row.name,
                        row.help,
                        metric_type,
                        samples.iter().map(|sample| {
                            let value = match sample.value {
                                Value::Int(value) => value,
                                Value::Float(value) => value as u64,
                                Value::Durations(_) => 0,
                            };
                            (labels(&sample.labels), value)
                        }),
                    )?;
                }
            }
        }
        let Some(exports) = self.otlp_exports else {
            return Ok(());
        };
        counters(
            &mut encoder,
            "gpuship_otlp_metrics_exports_total",
            "OTLP metrics exports by outcome (a failed one loses nothing: series are cumulative).",
            [
                (vec![("outcome", "succeeded")], exports.succeeded),
                (vec![("outcome", "failed")], exports.failed),
            ],
        )?;
        counters(
            &mut encoder,
            "gpuship_otlp_metrics_rejected_points_total",
            "Data points the collector refused in accepted metrics exports.",
            [(vec![], exports.rejected_points)],
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::SystemTime;

    use super::super::render;
    use crate::accounting::Accounting;
    use crate::health::xids::XidCounts;
    use crate::health::HealthSnapshot;
    use crate::sources::functions::FunctionTable;
    use crate::summary::FunctionCounts;

    #[test]
    fn histogram_buckets_are_cumulative_and_names_from_a_library_stay_one_label() {
        let hostile = "cu\"evil\"}\nx{";
        let names = FunctionTable::from_names([hostile]);
        let mut counts = FunctionCounts {
            calls: 4,
            duration_ns: 2_000_000_000,
            ..FunctionCounts::default()
        };
        for ns in [10, 2_000, 2_000, u64::MAX] {
            counts.durations.record(ns);
        }
        let health = HealthSnapshot::new(
            SystemTime::UNIX_EPOCH,
            XidCounts::default(),
            &names,
            &[counts],
            &BTreeMap::from([((0, 999), u64::MAX)]),
        );
        let text = render(&Accounting::default().snapshot(), health, None);
        let label = r#"function="cu\"evil\"}\nx{""#;
        for line in [
            format!("gpuship_cuda_calls_total{{{label}}} 4"),
            format!("gpuship_cuda_call_duration_seconds_bucket{{le=\"0.000001024\",{label}}} 1"),
            format!("gpuship_cuda_call_duration_seconds_bucket{{le=\"0.000004096\",{label}}} 3"),
            format!("gpuship_cuda_call_duration_seconds_bucket{{le=\"4.294967296\",{label}}} 3"),
            format!("gpuship_cuda_call_duration_seconds_bucket{{le=\"+Inf\",{label}}} 4"),
            format!("gpuship_cuda_call_duration_seconds_count{{{label}}} 4"),
            format!("gpuship_cuda_call_duration_seconds_sum{{{label}}} 2.0"),
            format!(
                "gpuship_cuda_call_errors_total{{{label},result=\"CUDA_ERROR_UNKNOWN\"}} {}",
                u64::MAX
            ),
            "gpuship_metrics_series_overflow_total{family=\"gpuship_gpu_xid_errors\"} 0".into(),
            "# TYPE gpuship_gpu_xid_errors counter".into(),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("gpuship_otlp_metrics_exports"), "{text}");
    }
}
