//! The GPU-health metric families as one table that both exporters iterate: `/metrics`
//! (`health_render`, Prometheus names and labels) and the OTLP metrics exporter
//! (`otlp::mapping`, OpenTelemetry names and attributes). Each row has its name, help, type,
//! its OTLP name and unit (when it is exported over OTLP) and the function that reads its
//! samples from a [`HealthSnapshot`]; each exporter names the [`Label`]s its own way. A new
//! family is one row here. Label sets and their bounds: docs/operations.md, "Alerting
//! metrics"; the OTLP names: docs/otlp.md, "Metrics".

use crate::health::xids::GpuLabels;
use crate::health::{FunctionHealth, HealthSnapshot};

/// How a family aggregates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A cumulative count.
    Counter,
    /// A value as of now.
    Gauge,
    /// Call durations in the duration buckets.
    Histogram,
}

/// A label in the exporters' common vocabulary.
#[derive(Debug, Clone, Copy)]
pub enum Label<'a> {
    /// The GPU: UUID, bus id, index.
    Gpu(&'a GpuLabels),
    /// An XID's code, catalog name and severity.
    Xid {
        code: &'a str,
        name: &'a str,
        severity: &'a str,
    },
    /// A CUDA driver function.
    Function(&'a str),
    /// A CUresult's name.
    Result(&'a str),
    /// The family whose series bound was reached.
    Family(&'static str),
    /// A kind of held memory (`MEMORY_KINDS`).
    MemoryKind(&'static str),
}

/// A sample's value.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    /// An integer count or gauge.
    Int(u64),
    /// A floating-point gauge.
    Float(f64),
    /// A function's duration histogram.
    Durations(&'a FunctionHealth),
}

/// One series of a family.
#[derive(Debug, Clone)]
pub struct Sample<'a> {
    pub labels: Vec<Label<'a>>,
    pub value: Value<'a>,
}

/// A family's OpenTelemetry name and unit.
#[derive(Debug, Clone, Copy)]
pub struct Otlp {
    pub name: &'static str,
    pub unit: &'static str,
}

/// One row of [`HEALTH`].
#[derive(Debug, Clone, Copy)]
pub struct HealthFamily {
    /// The Prometheus name.
    pub name: &'static str,
    /// Help text (`# HELP`, the OTLP description).
    pub help: &'static str,
    pub kind: Kind,
    /// `None`: served on `/metrics` only.
    pub otlp: Option<Otlp>,
    /// The family's samples in `health`.
    pub samples: for<'a> fn(&'a HealthSnapshot) -> Vec<Sample<'a>>,
}

const fn otlp(name: &'static str, unit: &'static str) -> Option<Otlp> {
    Some(Otlp { name, unit })
}

/// The GPU-health families, in the order both exporters write them.
pub const HEALTH: [HealthFamily; 8] = [
    HealthFamily {
        name: "gpuship_gpu_xid_errors_total",
        help: "XIDs the driver reported, by GPU, code, catalog name and severity.",
        kind: Kind::Counter,
        otlp: otlp("hw.errors", "{error}"),
        samples: |health| {
            let series = health.xids.series.iter();
            series
                .map(|(series, count)| Sample {
                    labels: vec![
                        Label::Gpu(&series.gpu),
                        Label::Xid {
                            code: &series.code,
                            name: &series.name,
                            severity: &series.severity,
                        },
                    ],
                    value: Value::Int(*count),
                })
                .collect()
        },
    },
    HealthFamily {
        name: "gpuship_gpu_last_xid_timestamp_seconds",
        help: "When each GPU's latest XID was reported (Unix seconds).",
        kind: Kind::Gauge,
        otlp: otlp("gpu.xid.last.time", "s"),
        samples: |health| {
            let last = health.xids.last.iter();
            last.map(|(gpu, last)| Sample {
                labels: vec![Label::Gpu(gpu)],
                value: Value::Float(last.unix_seconds),
            })
            .collect()
        },
    },
    HealthFamily {
        name: "gpuship_gpu_last_xid_code",
        help: "The code of each GPU's latest XID.",
        kind: Kind::Gauge,
        otlp: otlp("gpu.xid.last.code", "1"),
        samples: |health| {
            let last = health.xids.last.iter();
            last.map(|(gpu, last)| Sample {
                labels: vec![Label::Gpu(gpu)],
                value: Value::Int(u64::from(last.code)),
            })
            .collect()
        },
    },
    HealthFamily {
        name: "gpuship_cuda_calls_total",
        help: "CUDA driver API calls traced, by function (aggregated stats-mode calls included).",
        kind: Kind::Counter,
        otlp: otlp("cuda.calls", "{call}"),
        samples: |health| {
            let functions = health.functions.iter();
            functions
                .map(|f| Sample {
                    labels: vec![Label::Function(&f.function)],
                    value: Value::Int(f.calls),
                })
                .collect()
        },
    },
    HealthFamily {
        name: "gpuship_cuda_call_errors_total",
        help: "CUDA driver API calls that returned an error, by function and CUresult name.",
        kind: Kind::Counter,
        otlp: otlp("cuda.call.errors", "{call}"),
        samples: |health| {
            let failures = health.failures.iter();
            failures
                .map(|f| Sample {
                    labels: vec![Label::Function(&f.function), Label::Result(f.result)],
                    value: Value::Int(f.calls),
                })
                .collect()
        },
    },
    HealthFamily {
        name: "gpuship_cuda_call_duration_seconds",
        help: "Durations of traced CUDA calls, by function (entry-only calls have none).",
        kind: Kind::Histogram,
        otlp: otlp("cuda.call.duration", "s"),
        samples: |health| {
            let functions = health.functions.iter();
            functions
                .filter(|f| f.durations.total() > 0)
                .map(|f| Sample {
                    labels: vec![Label::Function(&f.function)],
                    value: Value::Durations(f),
                })
                .collect()
        },
    },
    HealthFamily {
        name: "gpuship_metrics_series_overflow_total",
        help: "Samples counted in a family's overflow series because its series bound was reached.",
        kind: Kind::Counter,
        otlp: None,
        samples: |health| {
            vec![Sample {
                labels: vec![Label::Family("gpuship_gpu_xid_errors")],
                value: Value::Int(health.xids.overflow),
            }]
        },
    },
    HealthFamily {
        name: "gpuship_cuda_memory_held_bytes",
        help: "Memory traced processes hold, summed per GPU and kind (device, managed, host_pinned, pool, physical), as of the last statistics interval; per process in the cuda_memory table.",
        kind: Kind::Gauge,
        otlp: None,
        samples: |health| {
            let memory = health.memory.iter();
            memory
                .flat_map(|gpu| {
                    let kinds = gpuship_sinks::schema::MEMORY_KINDS.iter();
                    kinds.zip(gpu.bytes).map(|(kind, bytes)| Sample {
                        labels: vec![Label::Gpu(&gpu.gpu), Label::MemoryKind(kind)],
                        value: Value::Int(bytes),
                    })
                })
                .collect()
        },
    },
];

/// The Prometheus family names, for the docs and the operator kit's cross-check.
pub const HEALTH_FAMILIES: [&str; HEALTH.len()] = {
    let mut names = [""; HEALTH.len()];
    let mut i = 0;
    while i < HEALTH.len() {
        names[i] = HEALTH[i].name;
        i += 1;
    }
    names
};
