//! The GPU-health families of `/metrics`, from one [`HealthSnapshot`]: XIDs by GPU, code,
//! name and severity, each GPU's latest XID, CUDA calls by function, failures by function and
//! result, and call-duration histograms by function. Label sets and their bounds:
//! docs/operations.md, "Alerting metrics".

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use std::sync::atomic::Ordering;

use super::otlp::ExportCounters;
use super::render::{family, Labels};
use crate::health::xids::GpuLabels;
use crate::health::HealthSnapshot;

/// Family names, for the docs and the operator kit's cross-check.
pub const HEALTH_FAMILIES: [&str; 8] = [
    "gpuship_gpu_xid_errors_total",
    "gpuship_gpu_last_xid_timestamp_seconds",
    "gpuship_gpu_last_xid_code",
    "gpuship_cuda_calls_total",
    "gpuship_cuda_call_errors_total",
    "gpuship_cuda_call_duration_seconds",
    "gpuship_metrics_series_overflow_total",
    "gpuship_cuda_memory_held_bytes",
];

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
        let health = &self.health;
        let xids = health.xids.series.iter().map(|(series, count)| {
            let mut labels = gpu_labels(&series.gpu);
            labels.extend([
                ("code", series.code.as_str()),
                ("name", series.name.as_str()),
                ("severity", series.severity.as_str()),
            ]);
            (labels, *count)
        });
        counters(
            &mut encoder,
            HEALTH_FAMILIES[0],
            "XIDs the driver reported, by GPU, code, catalog name and severity.",
            xids,
        )?;
        float_gauges(
            &mut encoder,
            HEALTH_FAMILIES[1],
            "When each GPU's latest XID was reported (Unix seconds).",
            health
                .xids
                .last
                .iter()
                .map(|(gpu, last)| (gpu_labels(gpu), last.unix_seconds)),
        )?;
        family(
            &mut encoder,
            HEALTH_FAMILIES[2],
            "The code of each GPU's latest XID.",
            MetricType::Gauge,
            health
                .xids
                .last
                .iter()
                .map(|(gpu, last)| (gpu_labels(gpu), u64::from(last.code))),
        )?;
        counters(
            &mut encoder,
            HEALTH_FAMILIES[3],
            "CUDA driver API calls traced, by function (aggregated stats-mode calls included).",
            health
                .functions
                .iter()
                .map(|f| (vec![("function", f.function.as_str())], f.calls)),
        )?;
        counters(
            &mut encoder,
            HEALTH_FAMILIES[4],
            "CUDA driver API calls that returned an error, by function and CUresult name.",
            health.failures.iter().map(|f| {
                (
                    vec![("function", f.function.as_str()), ("result", f.result)],
                    f.calls,
                )
            }),
        )?;
        let mut durations = encoder.encode_descriptor(
            HEALTH_FAMILIES[5],
            "Durations of traced CUDA calls, by function (entry-only calls have none).",
            None,
            MetricType::Histogram,
        )?;
        for function in health.functions.iter().filter(|f| f.durations.total() > 0) {
            let labels = vec![("function", function.function.as_str())];
            durations
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(
                    function.duration_sum_ns as f64 / 1e9,
                    function.durations.total(),
                    &function.durations.buckets_seconds(),
                    None,
                )?;
        }
        counters(
            &mut encoder,
            HEALTH_FAMILIES[6],
            "Samples counted in a family's overflow series because its series bound was reached.",
            [(
                vec![("family", "gpuship_gpu_xid_errors")],
                health.xids.overflow,
            )],
        )?;
        family(
            &mut encoder,
            HEALTH_FAMILIES[7],
            "Memory traced processes hold, summed per GPU and kind (device, managed, host_pinned, pool, physical), as of the last statistics interval; per process in the cuda_memory table.",
            MetricType::Gauge,
            health.memory.iter().flat_map(|gpu| {
                gpuship_sinks::schema::MEMORY_KINDS
                    .iter()
                    .zip(gpu.bytes)
                    .map(|(kind, bytes)| {
                        let mut labels = gpu_labels(&gpu.gpu);
                        labels.push(("kind", kind));
                        (labels, bytes)
                    })
            }),
        )?;
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
    use crate::sources::cuda::plan::FunctionTable;
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
