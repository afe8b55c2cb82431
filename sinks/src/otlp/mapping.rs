//! GPU events as OpenTelemetry log records: the one mapping the OTLP sink and the Kafka
//! `otlp_proto` encoding share (documented in docs/otlp.md).
//!
//! One log record per event: `EventName` (`gpu.xid`, `cuda.call`), `Timestamp` (when it
//! happened), `ObservedTimestamp` (when the agent encoded it), a severity, a one-sentence body
//! and the event's columns as attributes. Semantic-convention names are used where they exist
//! (`process.pid`, `thread.id`, `process.executable.name`, `hw.id`, `hw.model`, `error.type`);
//! gpuship's own fields live under `gpu.*` (device and XID) and `cuda.*` (driver API calls).

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_semantic_conventions::attribute as semconv;

use super::attributes::{attribute_names, ONLY_WHEN_TRUE};
use crate::schema::HostIdentity;
use crate::EventKind;

pub mod severity;

/// Event name of each kind.
pub fn event_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Xid => "gpu.xid",
        EventKind::Cuda => "cuda.call",
        EventKind::Driver => "gpu.driver.call",
        EventKind::CudaStats => "cuda.call.stats",
        EventKind::CudaMemory => "cuda.memory.held",
    }
}

/// Builds OTLP requests for one agent: the resource is fixed, records come per batch.
#[derive(Debug, Clone)]
pub struct OtlpMapping {
    resource: Resource,
    scope: InstrumentationScope,
}

impl OtlpMapping {
    /// The resource: `service.name=gpuship`, `service.version`, `host.name`, `host.id` (the
    /// machine id, when known), `host.boot.id`, then `extra` (user-configured; these win).
    pub fn new(
        identity: &HostIdentity,
        host_id: Option<&str>,
        extra: &BTreeMap<String, String>,
    ) -> Self {
        let mut attributes: BTreeMap<String, String> = BTreeMap::new();
        attributes.insert(semconv::SERVICE_NAME.into(), "gpuship".into());
        attributes.insert(
            semconv::SERVICE_VERSION.into(),
            env!("CARGO_PKG_VERSION").into(),
        );
        attributes.insert(semconv::HOST_NAME.into(), identity.host.to_string());
        if let Some(id) = host_id {
            attributes.insert(semconv::HOST_ID.into(), id.to_string());
        }
        attributes.insert("host.boot.id".into(), identity.boot_id.to_string());
        for (key, value) in extra {
            attributes.insert(key.clone(), value.clone());
        }
        Self {
            resource: Resource {
                attributes: attributes
                    .into_iter()
                    .map(|(key, value)| string_attribute(key, value))
                    .collect(),
                ..Default::default()
            },
            scope: InstrumentationScope {
                name: "gpuship".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            },
        }
    }

    /// The resource every request of this agent describes (shared with its metrics).
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// The instrumentation scope (`gpuship` and its version).
    pub fn scope(&self) -> &InstrumentationScope {
        &self.scope
    }

    /// Appends one log record per row of `batch` to `out`; `observed_ns` is when the agent
    /// encodes them. `rows` picks rows (all when None).
    pub fn append_records(
        &self,
        kind: EventKind,
        batch: &RecordBatch,
        observed_ns: u64,
        rows: Option<&[u32]>,
        out: &mut Vec<LogRecord>,
    ) {
        let columns = BatchColumns::new(kind, batch);
        let mut push = |row: usize| out.push(columns.record(row, observed_ns));
        match rows {
            Some(rows) => rows.iter().for_each(|&row| push(row as usize)),
            None => (0..batch.num_rows()).for_each(push),
        }
    }

    /// Wraps records into one export request under this agent's resource.
    pub fn request(&self, log_records: Vec<LogRecord>) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(self.resource.clone()),
                scope_logs: vec![ScopeLogs {
                    scope: Some(self.scope.clone()),
                    log_records,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
    }

    /// The request for all rows of one batch.
    pub fn batch_request(
        &self,
        kind: EventKind,
        batch: &RecordBatch,
        observed_ns: u64,
    ) -> ExportLogsServiceRequest {
        let mut records = Vec::with_capacity(batch.num_rows());
        self.append_records(kind, batch, observed_ns, None, &mut records);
        self.request(records)
    }
}

fn string_attribute(key: impl Into<String>, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// The columns of one batch, downcast once.
struct BatchColumns<'a> {
    kind: EventKind,
    time_ns: &'a arrow_array::Int64Array,
    attributes: Vec<(&'static str, &'a ArrayRef)>,
    /// Columns the body and severity are made from.
    code: Option<&'a arrow_array::UInt32Array>,
    result: Option<&'a arrow_array::UInt32Array>,
    text: BTreeMap<&'static str, &'a arrow_array::StringArray>,
    duration: Option<&'a arrow_array::UInt64Array>,
    /// Counts and durations of `cuda_stats` rows, by column name.
    counts: BTreeMap<&'static str, &'a arrow_array::UInt64Array>,
}

impl<'a> BatchColumns<'a> {
    fn new(kind: EventKind, batch: &'a RecordBatch) -> Self {
        let time_ns = batch
            .column_by_name("time_ns")
            .expect("every schema has time_ns")
            .as_primitive::<Int64Type>();
        let attributes = attribute_names(kind)
            .iter()
            .filter_map(|&(column, name)| batch.column_by_name(column).map(|c| (name, c)))
            .collect();
        let text = [
            "pci_bus_id",
            "message",
            "function",
            "result_name",
            "severity",
            "hook",
            "device",
            "request_name",
            "comm",
            "gpu_uuid",
        ]
        .into_iter()
        .filter_map(|name| {
            let column = batch.column_by_name(name)?;
            Some((name, column.as_string_opt::<i32>()?))
        })
        .collect();
        let u32_column = |name: &str| {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_primitive_opt::<UInt32Type>())
        };
        Self {
            kind,
            time_ns,
            attributes,
            code: u32_column("code"),
            result: u32_column("result"),
            text,
            duration: batch
                .column_by_name("duration_ns")
                .and_then(|c| c.as_primitive_opt::<UInt64Type>()),
            counts: [
                "calls",
                "interval_ns",
                "duration_p50_ns",
                "duration_p99_ns",
                "duration_max_ns",
                "device_bytes",
                "managed_bytes",
                "host_pinned_bytes",
                "pool_bytes",
                "physical_bytes",
            ]
            .into_iter()
            .filter_map(|name| {
                let column = batch.column_by_name(name)?;
                Some((name, column.as_primitive_opt::<UInt64Type>()?))
            })
            .collect(),
        }
    }

    /// A `cuda_stats` count or duration; None when null or absent.
    fn count(&self, name: &str, row: usize) -> Option<u64> {
        self.counts
            .get(name)
            .filter(|c| c.is_valid(row))
            .map(|c| c.value(row))
    }

    fn text(&self, name: &str, row: usize) -> &'a str {
        self.text
            .get(name)
            .filter(|c| c.is_valid(row))
            .map(|c| c.value(row))
            .unwrap_or("")
    }

    fn record(&self, row: usize, observed_ns: u64) -> LogRecord {
        let mut attributes: Vec<KeyValue> = self
            .attributes
            .iter()
            .filter_map(|&(name, column)| {
                let value = attribute_value(column, row)?;
                let unmarked = value == Value::BoolValue(false) && ONLY_WHEN_TRUE.contains(&name);
                (!unmarked).then(|| KeyValue {
                    key: name.to_string(),
                    value: Some(AnyValue { value: Some(value) }),
                    ..Default::default()
                })
            })
            .collect();
        let (severity, body) = match self.kind {
            EventKind::Xid => {
                let code = self.code.map(|c| c.value(row)).unwrap_or(0);
                let catalog = Some(self.text("severity", row)).filter(|s| !s.is_empty());
                (
                    severity::from_catalog(catalog),
                    format!(
                        "XID {code} on GPU {}: {}",
                        self.text("pci_bus_id", row),
                        self.text("message", row)
                    ),
                )
            }
            EventKind::Cuda => {
                let result = self.result.map(|c| c.value(row)).unwrap_or(0);
                let result_name = self.text("result_name", row);
                if result != 0 {
                    attributes.push(string_attribute(semconv::ERROR_TYPE, result_name));
                }
                let duration = self.duration.map(|c| c.value(row)).unwrap_or(0);
                (
                    if result == 0 {
                        severity::DEBUG
                    } else {
                        severity::ERROR
                    },
                    format!(
                        "{} returned {result_name} after {}",
                        self.text("function", row),
                        human_duration(duration)
                    ),
                )
            }
            EventKind::CudaStats => {
                let result = self.result.map(|c| c.value(row)).unwrap_or(0);
                let result_name = self.text("result_name", row);
                if result != 0 {
                    attributes.push(string_attribute(semconv::ERROR_TYPE, result_name));
                }
                let calls = self.count("calls", row).unwrap_or(0);
                let interval = self.count("interval_ns", row).unwrap_or(0);
                let latency = match (
                    self.count("duration_p50_ns", row),
                    self.count("duration_p99_ns", row),
                    self.count("duration_max_ns", row),
                ) {
                    (Some(p50), Some(p99), Some(max)) => format!(
                        ": p50 {}, p99 {}, max {}",
                        human_duration(p50),
                        human_duration(p99),
                        human_duration(max)
                    ),
                    _ => String::new(),
                };
                (
                    if result == 0 {
                        severity::DEBUG
                    } else {
                        severity::WARN
                    },
                    format!(
                        "{} returned {result_name} {calls} times in {}{latency}",
                        self.text("function", row),
                        human_duration(interval)
                    ),
                )
            }
            EventKind::CudaMemory => {
                let kinds: Vec<String> = crate::schema::MEMORY_KINDS
                    .iter()
                    .filter_map(|kind| {
                        let column = match *kind {
                            "device" => "device_bytes",
                            "managed" => "managed_bytes",
                            "host_pinned" => "host_pinned_bytes",
                            "pool" => "pool_bytes",
                            _ => "physical_bytes",
                        };
                        let bytes = self.count(column, row).filter(|b| *b > 0)?;
                        Some(format!("{kind} {bytes}"))
                    })
                    .collect();
                let gpu = match self.text("gpu_uuid", row) {
                    "" => "an unknown GPU",
                    uuid => uuid,
                };
                (
                    severity::DEBUG,
                    format!(
                        "{} holds on {gpu}: {} bytes",
                        self.text("comm", row),
                        kinds.join(", ")
                    ),
                )
            }
            EventKind::Driver => {
                let duration = self.duration.map(|c| c.value(row)).unwrap_or(0);
                let what = match self.text("request_name", row) {
                    "" => self.text("hook", row).to_string(),
                    name => format!("ioctl {name}"),
                };
                let on = match self.text("device", row) {
                    "" => String::new(),
                    device => format!(" on /dev/{device}"),
                };
                (
                    severity::DEBUG,
                    format!("{what}{on} took {}", human_duration(duration)),
                )
            }
        };
        LogRecord {
            time_unix_nano: self.time_ns.value(row).max(0) as u64,
            observed_time_unix_nano: observed_ns,
            severity_number: severity,
            severity_text: severity::text(severity).into(),
            body: Some(AnyValue {
                value: Some(Value::StringValue(body)),
            }),
            attributes,
            event_name: event_name(self.kind).into(),
            ..Default::default()
        }
    }
}

/// `850 ns`, `12.5 µs`, `3.2 ms`, `1.50 s`.
fn human_duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

mod values;
use values::attribute_value;

#[cfg(test)]
mod tests;
