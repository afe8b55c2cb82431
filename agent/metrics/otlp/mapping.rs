//! The GPU-health metrics as one OTLP `ExportMetricsServiceRequest`: the rows of the health
//! table (`metrics::health_table`, shared with `/metrics`) that have an OTLP name, with
//! OpenTelemetry's semantic conventions where they exist (docs/otlp.md, "Metrics"):
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

use super::super::health_table::{Kind, Label, Sample, Value, HEALTH};
use crate::health::durations::BOUNDS_NS;
use crate::health::xids::GpuLabels;
use crate::health::HealthSnapshot;

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

/// The table's labels as OTLP attributes.
fn attributes(labels: &[Label<'_>]) -> Vec<KeyValue> {
    let mut out = Vec::new();
    for label in labels {
        match *label {
            Label::Gpu(gpu) => out.extend(gpu_attributes(gpu)),
            Label::Xid {
                code,
                name,
                severity,
            } => {
                out.push(text("error.type", &format!("xid_{code}")));
                if let Ok(code) = code.parse::<i64>() {
                    out.push(int("gpu.xid.code", code));
                }
                if !name.is_empty() {
                    out.push(text("gpu.xid.name", name));
                }
                out.push(text("gpu.xid.severity", severity));
            }
            Label::Function(function) => out.push(text("cuda.function", function)),
            Label::Result(result) => out.push(text("error.type", result)),
            Label::Family(family) => out.push(text("gpuship.metric.family", family)),
            Label::MemoryKind(kind) => out.push(text("cuda.memory.kind", kind)),
        }
    }
    out
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
    let number = |sample: &Sample<'_>| {
        let value = match sample.value {
            Value::Int(n) => number_data_point::Value::AsInt(i64::try_from(n).unwrap_or(i64::MAX)),
            Value::Float(x) => number_data_point::Value::AsDouble(x),
            Value::Durations(_) => number_data_point::Value::AsInt(0),
        };
        point(start, now, attributes(&sample.labels), value)
    };
    let histogram = |sample: &Sample<'_>| {
        let Value::Durations(f) = sample.value else {
            return None;
        };
        Some(HistogramDataPoint {
            attributes: attributes(&sample.labels),
            start_time_unix_nano: start,
            time_unix_nano: now,
            count: f.durations.total(),
            sum: Some(f.duration_sum_ns as f64 / 1e9),
            bucket_counts: f.durations.counts.to_vec(),
            explicit_bounds: BOUNDS_NS.iter().map(|ns| *ns as f64 / 1e9).collect(),
            ..Default::default()
        })
    };
    let mut metrics: Vec<Metric> = HEALTH
        .iter()
        .filter_map(|row| {
            let otlp = row.otlp?;
            let samples = (row.samples)(health);
            let data = match row.kind {
                Kind::Counter => counter(samples.iter().map(number).collect()),
                Kind::Gauge => metric::Data::Gauge(Gauge {
                    data_points: samples.iter().map(number).collect(),
                }),
                Kind::Histogram => metric::Data::Histogram(Histogram {
                    data_points: samples.iter().filter_map(histogram).collect(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                }),
            };
            Some(metric(otlp.name, row.help, otlp.unit, data))
        })
        .collect();
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
