//! XID counts for `/metrics` and OTLP: per GPU (UUID, bus id, index), code, catalog name and
//! severity, plus the latest XID of every GPU (dcgm-exporter's gauge, kept beside the counter
//! instead of replacing it).
//!
//! Bounded: a kernel log line can carry any code and bus id, so at most [`MAX_SERIES`]
//! series are kept; XIDs beyond them count in one series per severity with `code = "other"`
//! and empty GPU labels (an alert on fatal XIDs still fires), and in [`XidCounts::overflow`].

use std::collections::BTreeMap;

use gpuship_sinks::schema::XidRecord;

/// Distinct XID series at most (16 GPUs times every code in the catalog fit many times).
pub const MAX_SERIES: usize = 1024;
/// GPUs whose latest XID is kept, at most.
pub const MAX_GPUS: usize = 256;

/// The GPU an XID names; empty strings where the agent could not tell.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuLabels {
    /// `GPU-...`, or empty.
    pub uuid: String,
    /// `0000:3b:00.0`, or empty.
    pub pci_bus_id: String,
    /// nvidia-smi's index as text, or empty.
    pub index: String,
}

/// One XID series.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct XidSeries {
    /// The GPU.
    pub gpu: GpuLabels,
    /// The code as text (`other` for the overflow series).
    pub code: String,
    /// The catalog's name of the code, or empty.
    pub name: String,
    /// The catalog's severity (`info`, `warning`, `error`, `fatal`); `error` when absent.
    pub severity: String,
}

/// The latest XID of one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastXid {
    /// When it was reported, in seconds since the Unix epoch.
    pub unix_seconds: f64,
    /// Its code.
    pub code: u32,
}

/// XIDs counted since the agent started.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct XidCounts {
    /// Count per series.
    pub series: BTreeMap<XidSeries, u64>,
    /// The latest XID per GPU.
    pub last: BTreeMap<GpuLabels, LastXid>,
    /// XIDs counted in an overflow series because [`MAX_SERIES`] were taken.
    pub overflow: u64,
}

impl XidCounts {
    /// Counts one XID as the sinks receive it (annotated by the catalog).
    pub fn record(&mut self, record: &XidRecord) {
        let gpu = GpuLabels {
            uuid: record
                .gpu
                .as_ref()
                .map(|g| g.uuid.clone())
                .unwrap_or_default(),
            pci_bus_id: record.pci_bus_id.clone(),
            index: record
                .gpu
                .as_ref()
                .map(|g| g.index.to_string())
                .unwrap_or_default(),
        };
        let severity = record
            .annotations
            .severity
            .clone()
            .unwrap_or_else(|| "error".to_string());
        let series = XidSeries {
            gpu: gpu.clone(),
            code: record.code.to_string(),
            name: record.annotations.name.clone().unwrap_or_default(),
            severity,
        };
        let key = if self.series.contains_key(&series) || self.series.len() < MAX_SERIES {
            series
        } else {
            self.overflow += 1;
            XidSeries {
                gpu: GpuLabels {
                    uuid: String::new(),
                    pci_bus_id: String::new(),
                    index: String::new(),
                },
                code: "other".to_string(),
                name: String::new(),
                severity: series.severity,
            }
        };
        *self.series.entry(key).or_default() += 1;
        if self.last.contains_key(&gpu) || self.last.len() < MAX_GPUS {
            let last = LastXid {
                unix_seconds: record.time_ns as f64 / 1e9,
                code: record.code,
            };
            let slot = self.last.entry(gpu).or_insert(last);
            if last.unix_seconds >= slot.unix_seconds {
                *slot = last;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gpuship_sinks::schema::{GpuIdentity, XidSource};

    use super::*;

    fn xid(code: u32, bus: &str, time_ns: i64, severity: Option<&str>) -> XidRecord {
        let mut record = XidRecord::new(XidSource::Kmsg);
        record.code = code;
        record.pci_bus_id = bus.to_string();
        record.time_ns = time_ns;
        record.gpu = Some(Arc::new(GpuIdentity {
            uuid: format!("GPU-{bus}"),
            model: "H100".into(),
            index: 3,
            minor: None,
        }));
        record.annotations.name = Some(format!("name {code}"));
        record.annotations.severity = severity.map(str::to_string);
        record
    }

    #[test]
    fn counts_per_gpu_code_and_severity_and_keeps_the_latest() {
        let mut counts = XidCounts::default();
        counts.record(&xid(79, "0000:3b:00.0", 2_000_000_000, Some("fatal")));
        counts.record(&xid(79, "0000:3b:00.0", 1_000_000_000, Some("fatal")));
        counts.record(&xid(31, "0000:3b:00.0", 1_500_000_000, None));
        let gpu = GpuLabels {
            uuid: "GPU-0000:3b:00.0".into(),
            pci_bus_id: "0000:3b:00.0".into(),
            index: "3".into(),
        };
        let fatal = XidSeries {
            gpu: gpu.clone(),
            code: "79".into(),
            name: "name 79".into(),
            severity: "fatal".into(),
        };
        assert_eq!(counts.series[&fatal], 2);
        let page_fault = XidSeries {
            code: "31".into(),
            name: "name 31".into(),
            severity: "error".into(),
            ..fatal
        };
        assert_eq!(counts.series[&page_fault], 1);
        // The latest by report time, not by arrival.
        assert_eq!(
            counts.last[&gpu],
            LastXid {
                unix_seconds: 2.0,
                code: 79
            }
        );
        assert_eq!(counts.overflow, 0);
    }

    #[test]
    fn series_beyond_the_bound_go_to_an_overflow_series_per_severity() {
        let mut counts = XidCounts::default();
        for i in 0..MAX_SERIES as u32 + 10 {
            counts.record(&xid(i, "0000:01:00.0", 1, Some("info")));
        }
        counts.record(&xid(u32::MAX, "0000:02:00.0", 1, Some("fatal")));
        assert_eq!(counts.series.len(), MAX_SERIES + 2);
        assert_eq!(counts.overflow, 11);
        let overflow = |severity: &str| XidSeries {
            gpu: GpuLabels {
                uuid: String::new(),
                pci_bus_id: String::new(),
                index: String::new(),
            },
            code: "other".into(),
            name: String::new(),
            severity: severity.into(),
        };
        assert_eq!(counts.series[&overflow("info")], 10);
        assert_eq!(counts.series[&overflow("fatal")], 1);
        // Every XID is in exactly one series.
        assert_eq!(counts.series.values().sum::<u64>(), MAX_SERIES as u64 + 11);
        assert_eq!(counts.last.len(), 2);
    }
}
