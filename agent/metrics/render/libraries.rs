//! The CUDA library families of `/metrics` (docs/operations.md, "Is every process
//! captured?"): which libcuda files are attached, how many processes map each, and how late
//! attaches came. One series per library file: at most `discovery::MAX_LIBRARIES` (64) plus
//! those refused, so the label set is bounded.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::family;
use crate::accounting::libraries::LibrarySnapshot;

/// Family names, for the docs and tests.
pub const LIBRARY_FAMILIES: [&str; 9] = [
    "gpuship_cuda_library_attached",
    "gpuship_cuda_library_processes",
    "gpuship_cuda_library_probed_symbols",
    "gpuship_cuda_processes_attached_late_total",
    "gpuship_cuda_library_attach_delay_seconds_total",
    "gpuship_cuda_library_timed_attaches_total",
    "gpuship_cuda_library_attach_delay_max_seconds",
    "gpuship_cuda_library_attach_failures_total",
    "gpuship_cuda_library_detached_total",
];

/// Encodes the library families (nothing when the CUDA source does not discover libraries).
pub(super) fn encode(
    snapshot: &LibrarySnapshot,
    encoder: &mut DescriptorEncoder,
) -> std::fmt::Result {
    if !snapshot.discovering {
        return Ok(());
    }
    let labels = |s: &'_ crate::accounting::libraries::LibraryStatus| {
        vec![
            ("file", s.file.clone()),
            ("path", s.path.clone()),
            ("origin", s.origin.name().to_string()),
        ]
    };
    let owned: Vec<(Vec<(&'static str, String)>, &_)> =
        snapshot.libraries.iter().map(|s| (labels(s), s)).collect();
    let borrowed = |value: fn(&crate::accounting::libraries::LibraryStatus) -> u64| {
        owned
            .iter()
            .map(move |(labels, status)| {
                (
                    labels.iter().map(|(k, v)| (*k, v.as_str())).collect(),
                    value(status),
                )
            })
            .collect::<Vec<_>>()
    };
    family(
        encoder,
        LIBRARY_FAMILIES[0],
        "1 for each libcuda file whose probes are attached, 0 for one processes map that could not be attached (the path is as the first process seen sees it).",
        MetricType::Gauge,
        borrowed(|s| u64::from(s.symbols.is_some())),
    )?;
    family(
        encoder,
        LIBRARY_FAMILIES[1],
        "Processes seen mapping the library at the last read of their maps.",
        MetricType::Gauge,
        borrowed(|s| s.processes),
    )?;
    family(
        encoder,
        LIBRARY_FAMILIES[2],
        "Symbols probed in the library (0 when not attached).",
        MetricType::Gauge,
        borrowed(|s| s.symbols.unwrap_or(0) as u64),
    )?;
    family(
        encoder,
        LIBRARY_FAMILIES[3],
        "Processes that had mapped a libcuda before its probes were attached (their calls until the attach were not seen).",
        MetricType::Counter,
        [(vec![], snapshot.attached_late_processes)],
    )?;
    let delay = encoder.encode_descriptor(
        LIBRARY_FAMILIES[4].trim_end_matches("_total"),
        "Summed time from a process's open of a new libcuda to the attach of its probes.",
        None,
        MetricType::Counter,
    )?;
    ConstCounter::new(snapshot.attach_delay_ns_sum as f64 / 1e9).encode(delay)?;
    family(
        encoder,
        LIBRARY_FAMILIES[5],
        "Attaches timed from a process's open of the library (the delay sum's count).",
        MetricType::Counter,
        [(vec![], snapshot.timed_attaches)],
    )?;
    let max = encoder.encode_descriptor(
        LIBRARY_FAMILIES[6],
        "The longest of those delays.",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(snapshot.attach_delay_ns_max as f64 / 1e9).encode(max)?;
    family(
        encoder,
        LIBRARY_FAMILIES[7],
        "Attaches of a library processes map that failed (why: the logs, gpuship doctor).",
        MetricType::Counter,
        [(vec![], snapshot.attach_failures)],
    )?;
    family(
        encoder,
        LIBRARY_FAMILIES[8],
        "Discovered libraries detached because no process mapped them any more.",
        MetricType::Counter,
        [(vec![], snapshot.detached)],
    )
}
