//! GPU health as a fleet alerts on it: XIDs per GPU, code and severity (with each GPU's latest
//! XID), CUDA calls per function, failures per function and CUresult, and call-duration
//! histograms per function. Kept by the live tap ([`crate::live::LiveTap`]) from what the
//! consumer already counts, read once per scrape or export as a [`HealthSnapshot`], exposed on
//! `/metrics` (`crate::metrics`) and over OTLP (`crate::metrics::otlp`).
//!
//! Label sets are bounded by construction (docs/operations.md lists them with the worst-case
//! series count): functions by the probe plan, results by the `cuda.h` table (unknown codes
//! share `CUDA_ERROR_UNRECOGNIZED`), XIDs by [`xids::MAX_SERIES`]. No pod or container label:
//! pods come and go, so their series would grow without bound; the XID and CUDA rows carry
//! the workload instead.

pub mod durations;
pub mod xids;

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::sources::functions::FunctionTable;
use crate::summary::FunctionCounts;
use durations::DurationHistogram;
use gpuship_model::cuda_results::result_name;
use xids::XidCounts;

/// One CUDA function's calls since the agent started.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionHealth {
    /// The function's name.
    pub function: String,
    /// Calls, successful or not (aggregated ones included).
    pub calls: u64,
    /// Their summed duration (entry-only calls add nothing).
    pub duration_sum_ns: u64,
    /// Their durations.
    pub durations: DurationHistogram,
}

/// Failed calls of one function with one result since the agent started.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FailureHealth {
    /// The function's name.
    pub function: String,
    /// The CUresult's `cuda.h` name.
    pub result: &'static str,
    /// Calls.
    pub calls: u64,
}

/// The memory traced processes hold on one GPU, by kind (`MEMORY_KINDS` order), summed over
/// processes: the per-process figures are the `cuda_memory` rows (a process label would grow
/// without bound).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GpuMemoryHealth {
    /// The GPU (empty labels: allocations whose GPU is not known).
    pub gpu: xids::GpuLabels,
    /// Bytes per kind.
    pub bytes: [u64; 5],
}

/// GPUs the memory family keeps (more are summed into none: a node has at most a few dozen).
pub const MAX_MEMORY_GPUS: usize = 256;

/// Everything the health metrics show, read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthSnapshot {
    /// When counting started (the start time of every cumulative series).
    pub started: SystemTime,
    /// XIDs.
    pub xids: XidCounts,
    /// Per CUDA function, those called at least once.
    pub functions: Vec<FunctionHealth>,
    /// Failed calls per function and result.
    pub failures: Vec<FailureHealth>,
    /// Memory held per GPU, as of the CUDA source's last interval.
    pub memory: Vec<GpuMemoryHealth>,
}

impl HealthSnapshot {
    /// Names the consumer's counts: `functions` indexed by function id, `failures` keyed by
    /// (function id, CUresult).
    pub fn new(
        started: SystemTime,
        xids: XidCounts,
        names: &FunctionTable,
        functions: &[FunctionCounts],
        failures: &BTreeMap<(u32, u32), u64>,
    ) -> Self {
        let name = |id: u32| names.name(id).unwrap_or("unknown").to_string();
        let functions = functions
            .iter()
            .enumerate()
            .filter(|(_, c)| c.calls > 0)
            .map(|(id, c)| FunctionHealth {
                function: name(id as u32),
                calls: c.calls,
                duration_sum_ns: c.duration_ns,
                durations: c.durations,
            })
            .collect();
        // Unknown codes share a name: their counts add up in one series.
        let mut named: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
        for (&(id, result), &calls) in failures {
            let slot = named.entry((name(id), result_name(result))).or_default();
            *slot = slot.saturating_add(calls);
        }
        let failures = named
            .into_iter()
            .map(|((function, result), calls)| FailureHealth {
                function,
                result,
                calls,
            })
            .collect();
        Self {
            started,
            xids,
            functions,
            failures,
            memory: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_functions_and_merges_unrecognized_results() {
        let names = FunctionTable::from_names(["cuLaunchKernel", "cuMemAlloc_v2"]);
        let mut launch = FunctionCounts {
            calls: 5,
            errors: 3,
            duration_ns: 50,
            ..FunctionCounts::default()
        };
        launch.durations.record(10);
        let functions = [launch, FunctionCounts::default()];
        let failures = BTreeMap::from([((0, 700), 1), ((0, 123_456), 1), ((0, 654_321), 1)]);
        let snapshot = HealthSnapshot::new(
            SystemTime::UNIX_EPOCH,
            XidCounts::default(),
            &names,
            &functions,
            &failures,
        );
        assert_eq!(
            snapshot.functions,
            vec![FunctionHealth {
                function: "cuLaunchKernel".into(),
                calls: 5,
                duration_sum_ns: 50,
                durations: launch.durations,
            }]
        );
        assert_eq!(
            snapshot.failures,
            vec![
                FailureHealth {
                    function: "cuLaunchKernel".into(),
                    result: "CUDA_ERROR_ILLEGAL_ADDRESS",
                    calls: 1
                },
                FailureHealth {
                    function: "cuLaunchKernel".into(),
                    result: "CUDA_ERROR_UNRECOGNIZED",
                    calls: 2
                },
            ]
        );
    }
}
