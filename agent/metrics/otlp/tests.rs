use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use gpuship_sinks::otlp::proto::tonic::common::v1::{any_value, KeyValue};
use gpuship_sinks::otlp::proto::tonic::metrics::v1::{metric, number_data_point, Metric};
use gpuship_sinks::schema::{GpuIdentity, XidRecord, XidSource};

use super::mapping::metrics_request;
use crate::health::xids::XidCounts;
use crate::health::HealthSnapshot;
use crate::sources::functions::FunctionTable;
use crate::summary::FunctionCounts;

fn attributes(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                Some(any_value::Value::IntValue(i)) => format!("int:{i}"),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn health() -> HealthSnapshot {
    let mut xids = XidCounts::default();
    let mut record = XidRecord::new(XidSource::Both);
    record.code = 79;
    record.pci_bus_id = "0000:3b:00.0".into();
    record.time_ns = 1_700_000_000_500_000_000;
    record.gpu = Some(Arc::new(GpuIdentity {
        uuid: "GPU-aaaa".into(),
        model: "H100".into(),
        index: 2,
        minor: Some(2),
    }));
    record.annotations.name = Some("GPU has fallen off the bus".into());
    record.annotations.severity = Some("fatal".into());
    xids.record(&record);
    xids.record(&record);
    let names = FunctionTable::from_names(["cuLaunchKernel", "cuMemAlloc_v2"]);
    let mut launch = FunctionCounts {
        calls: 3,
        errors: 1,
        duration_ns: 6_000,
        ..FunctionCounts::default()
    };
    launch.durations.record(1_000);
    launch.durations.record(2_000);
    launch.durations.record(3_000);
    let failures = BTreeMap::from([((0, 700), 1)]);
    HealthSnapshot::new(
        UNIX_EPOCH + Duration::from_secs(100),
        xids,
        &names,
        &[launch],
        &failures,
    )
}

fn find<'a>(metrics: &'a [Metric], name: &str) -> &'a Metric {
    metrics
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn xids_are_hw_errors_of_a_gpu_with_the_semantic_convention_attributes() {
    let request = metrics_request(
        &health(),
        UNIX_EPOCH + Duration::from_secs(200),
        &Default::default(),
        &Default::default(),
    );
    let metrics = &request.resource_metrics[0].scope_metrics[0].metrics;
    let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "hw.errors",
            "gpu.xid.last.time",
            "gpu.xid.last.code",
            "cuda.calls",
            "cuda.call.errors",
            "cuda.call.duration",
        ]
    );
    let errors = find(metrics, "hw.errors");
    assert_eq!(errors.unit, "{error}");
    let Some(metric::Data::Sum(sum)) = &errors.data else {
        panic!("hw.errors is a sum: {errors:?}");
    };
    assert!(sum.is_monotonic);
    assert_eq!(sum.aggregation_temporality, 2, "cumulative");
    let point = &sum.data_points[0];
    assert_eq!(point.value, Some(number_data_point::Value::AsInt(2)));
    assert_eq!(point.start_time_unix_nano, 100_000_000_000);
    assert_eq!(point.time_unix_nano, 200_000_000_000);
    assert_eq!(
        attributes(&point.attributes),
        BTreeMap::from([
            ("hw.type".to_string(), "gpu".to_string()),
            ("hw.id".to_string(), "GPU-aaaa".to_string()),
            ("gpu.pci_bus_id".to_string(), "0000:3b:00.0".to_string()),
            ("gpu.index".to_string(), "int:2".to_string()),
            ("error.type".to_string(), "xid_79".to_string()),
            ("gpu.xid.code".to_string(), "int:79".to_string()),
            (
                "gpu.xid.name".to_string(),
                "GPU has fallen off the bus".to_string()
            ),
            ("gpu.xid.severity".to_string(), "fatal".to_string()),
        ])
    );
    let Some(metric::Data::Gauge(last)) = &find(metrics, "gpu.xid.last.time").data else {
        panic!("a gauge");
    };
    assert_eq!(
        last.data_points[0].value,
        Some(number_data_point::Value::AsDouble(1_700_000_000.5))
    );
    let Some(metric::Data::Gauge(code)) = &find(metrics, "gpu.xid.last.code").data else {
        panic!("a gauge");
    };
    assert_eq!(
        code.data_points[0].value,
        Some(number_data_point::Value::AsInt(79))
    );
}

#[test]
fn cuda_calls_errors_and_durations_by_function() {
    let request = metrics_request(
        &health(),
        UNIX_EPOCH + Duration::from_secs(200),
        &Default::default(),
        &Default::default(),
    );
    let metrics = &request.resource_metrics[0].scope_metrics[0].metrics;
    let Some(metric::Data::Sum(calls)) = &find(metrics, "cuda.calls").data else {
        panic!("a sum");
    };
    assert_eq!(calls.data_points.len(), 1);
    assert_eq!(
        calls.data_points[0].value,
        Some(number_data_point::Value::AsInt(3))
    );
    let Some(metric::Data::Sum(errors)) = &find(metrics, "cuda.call.errors").data else {
        panic!("a sum");
    };
    assert_eq!(
        attributes(&errors.data_points[0].attributes),
        BTreeMap::from([
            ("cuda.function".to_string(), "cuLaunchKernel".to_string()),
            (
                "error.type".to_string(),
                "CUDA_ERROR_ILLEGAL_ADDRESS".to_string()
            ),
        ])
    );
    let Some(metric::Data::Histogram(durations)) = &find(metrics, "cuda.call.duration").data else {
        panic!("a histogram");
    };
    let point = &durations.data_points[0];
    assert_eq!(point.count, 3);
    assert_eq!(point.sum, Some(6e-6));
    // 1,000 ns is below the first bound (1,024 ns), 2,000 and 3,000 below the second.
    assert_eq!(point.bucket_counts[..3], [1, 2, 0]);
    assert_eq!(point.bucket_counts.len(), point.explicit_bounds.len() + 1);
    assert_eq!(point.explicit_bounds[0], 1.024e-6);
}

#[test]
fn an_idle_agent_sends_metrics_without_points() {
    let empty = HealthSnapshot::new(
        UNIX_EPOCH,
        XidCounts::default(),
        &FunctionTable::default(),
        &[],
        &BTreeMap::new(),
    );
    let request = metrics_request(&empty, UNIX_EPOCH, &Default::default(), &Default::default());
    assert!(request.resource_metrics[0].scope_metrics[0]
        .metrics
        .is_empty());
}
