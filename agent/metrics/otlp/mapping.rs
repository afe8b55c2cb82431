//! The GPU-health metrics as one OTLP `ExportMetricsServiceRequest`, following OpenTelemetry's
//! semantic conventions where they exist (docs/otlp.md, "Metrics"):
//!
//! - `hw.errors` (`{error}`, cumulative sum): XIDs, with `hw.type = gpu`, `hw.id` = the GPU's
//!   UUID (its bus id when the UUID is unknown), `error.type = xid_<code>`, and gpuship's
//!   `gpu.xid.code`, `gpu.xid.name`, `gpu.xid.severity`, `gpu.pci_bus_id`, `gpu.index`;
//! - `gpu.xid.last.time` (`s`) and `gpu.xid.last.code` (gauges): each GPU's latest XID;
//! - `cuda.calls` (`{call}`, cumulative sum) by `cuda.function`;
//! - `cuda.call.errors` (`{call}`, cumulative sum) by `cuda.function` and `error.type` (the
//!   CUresult's name);
//! - `cuda.call.duration` (`s`, histogram with the `/metrics` buckets) by `cuda.function`.
//!
//! Cumulative temporality, starting when the agent started: an export that fails loses
//! nothing, the next one carries the totals.

use std::time::{SystemTime, UNIX_EPOCH};

use gpuship_sinks::otlp::proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use gpuship_sinks::otlp::proto::tonic::common::v1::{
    any_value, AnyValue, InstrumentationScope, KeyValue,
};
use gpuship_sinks::otlp::proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use gpuship_sinks::otlp::proto::tonic::resource::v1::Resource;

use crate::health::durations::BOUNDS_NS;
use crate::health::xids::GpuLabels;
use crate::health::HealthSnapshot;

/// Metric names, for the docs and tests.
pub const METRIC_NAMES: [&str; 6] = [
    "hw.errors",
    "gpu.xid.last.time",
    "gpu.xid.last.code",
    "cuda.calls",
    "cuda.call.errors",
    "cuda.call.duration",
];

fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..Default::default()
    }
}

/// `hw.type`, `hw.id` and the GPU's bus id and index, those that are known.
fn gpu_attributes(gpu: &GpuLabels) -> Vec<KeyValue> {
    let id = if gpu.uuid.is_empty() {
        &gpu.pci_bus_id
    } else {
        &gpu.uuid
    };
    let mut attributes = vec![text("hw.type", "gpu"), text("hw.id", id)];
    if !gpu.pci_bus_id.is_empty() {
        attributes.push(text("gpu.pci_bus_id", &gpu.pci_bus_id));
    }
    if let Ok(index) = gpu.index.parse::<i64>() {
        attributes.push(int("gpu.index", index));
    }
    attributes
}

fn metric(name: &str, description: &str, unit: &str, data: metric::Data) -> Metric {
    Metric {
        name: name.into(),
        description: description.into(),
        unit: unit.into(),
        data: Some(data),
        ..Default::default()
    }
}

fn point(
    start: u64,
    now: u64,
    attributes: Vec<KeyValue>,
    value: number_data_point::Value,
) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: now,
        value: Some(value),
        ..Default::default()
    }
}

fn counter(points: Vec<NumberDataPoint>) -> metric::Data {
    metric::Data::Sum(Sum {
        data_points: points,
        aggregation_temporality: AggregationTemporality::Cumulative as i32,
        is_monotonic: true,
    })
}

fn points(metric: &Metric) -> usize {
    match &metric.data {
        Some(metric::Data::Sum(sum)) => sum.data_points.len(),
        Some(metric::Data::Gauge(gauge)) => gauge.data_points.len(),
        Some(metric::Data::Histogram(histogram)) => histogram.data_points.len(),
        _ => 0,
    }
}

/// The request for `health` at `now`, describing `resource` and `scope`.
pub fn metrics_request(
    health: &HealthSnapshot,
    now: SystemTime,
    resource: &Resource,
    scope: &InstrumentationScope,
) -> ExportMetricsServiceRequest {
    let (start, now) = (unix_nanos(health.started), unix_nanos(now));
    let as_int = |n: u64| number_data_point::Value::AsInt(i64::try_from(n).unwrap_or(i64::MAX));
    let xids = health
        .xids
        .series
        .iter()
        .map(|(series, count)| {
            let mut attributes = gpu_attributes(&series.gpu);
            attributes.push(text("error.type", &format!("xid_{}", series.code)));
            if let Ok(code) = series.code.parse::<i64>() {
                attributes.push(int("gpu.xid.code", code));
            }
            if !series.name.is_empty() {
                attributes.push(text("gpu.xid.name", &series.name));
            }
            attributes.push(text("gpu.xid.severity", &series.severity));
            point(start, now, attributes, as_int(*count))
        })
        .collect();
    let last = |value: fn(&crate::health::xids::LastXid) -> number_data_point::Value| {
        health
            .xids
            .last
            .iter()
            .map(|(gpu, last)| point(start, now, gpu_attributes(gpu), value(last)))
            .collect()
    };
    let function = |name: &str| vec![text("cuda.function", name)];
    let calls = health
        .functions
        .iter()
        .map(|f| point(start, now, function(&f.function), as_int(f.calls)))
        .collect();
    let errors = health
        .failures
        .iter()
        .map(|f| {
            let mut attributes = function(&f.function);
            attributes.push(text("error.type", f.result));
            point(start, now, attributes, as_int(f.calls))
        })
        .collect();
    let durations = health
        .functions
        .iter()
        .filter(|f| f.durations.total() > 0)
        .map(|f| HistogramDataPoint {
            attributes: function(&f.function),
            start_time_unix_nano: start,
            time_unix_nano: now,
            count: f.durations.total(),
            sum: Some(f.duration_sum_ns as f64 / 1e9),
            bucket_counts: f.durations.counts.to_vec(),
            explicit_bounds: BOUNDS_NS.iter().map(|ns| *ns as f64 / 1e9).collect(),
            ..Default::default()
        })
        .collect();
    let mut metrics = vec![
        metric(
            METRIC_NAMES[0],
            "XIDs the NVIDIA driver reported, by GPU and code.",
            "{error}",
            counter(xids),
        ),
        metric(
            METRIC_NAMES[1],
            "When each GPU's latest XID was reported.",
            "s",
            metric::Data::Gauge(Gauge {
                data_points: last(|l| number_data_point::Value::AsDouble(l.unix_seconds)),
            }),
        ),
        metric(
            METRIC_NAMES[2],
            "The code of each GPU's latest XID.",
            "1",
            metric::Data::Gauge(Gauge {
                data_points: last(|l| number_data_point::Value::AsInt(i64::from(l.code))),
            }),
        ),
        metric(
            METRIC_NAMES[3],
            "CUDA driver API calls traced, by function.",
            "{call}",
            counter(calls),
        ),
        metric(
            METRIC_NAMES[4],
            "CUDA driver API calls that returned an error, by function and CUresult.",
            "{call}",
            counter(errors),
        ),
        metric(
            METRIC_NAMES[5],
            "Durations of traced CUDA calls, by function.",
            "s",
            metric::Data::Histogram(Histogram {
                data_points: durations,
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            }),
        ),
    ];
    // A metric without data points says nothing (an agent that saw no XID yet).
    metrics.retain(|m| points(m) > 0);
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource.clone()),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope.clone()),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
