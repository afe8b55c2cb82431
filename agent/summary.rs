//! The end-of-run summary a person reads: calls per function, bytes allocated and copied,
//! failures by result, XIDs by code (as the original one-command tracer printed).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use gpuship_sinks::schema::CudaRow;
use serde::Serialize;

use crate::health::durations::DurationHistogram;
use gpuship_model::cuda_results::result_name;

/// The result name of an entry-only call, which has no result and no duration.
const NOT_CAPTURED_NAME: &str = "NOT_CAPTURED";

/// Per-call counting on the consumer's hot path: counts by function id (a vector index, no
/// string work per call); turned into a [`RunSummary`] once, at the end, and read while running
/// by the live tap (`crate::live`).
#[derive(Debug, Default, Clone)]
pub struct CallTally {
    by_function: Vec<FunctionCounts>,
    bytes_allocated: u64,
    bytes_copied: u64,
    /// Failed calls per (function id, CUresult).
    failures: BTreeMap<(u32, u32), u64>,
}

impl CallTally {
    /// Counts one call of function `function_id`.
    #[inline]
    pub fn record(&mut self, function_id: u32, row: &CudaRow<'_>) {
        let index = function_id as usize;
        if index >= self.by_function.len() {
            self.by_function
                .resize(index + 1, FunctionCounts::default());
        }
        let counts = &mut self.by_function[index];
        counts.calls += 1;
        counts.duration_ns = counts.duration_ns.saturating_add(row.duration_ns);
        // Entry-only calls have no duration to put in the histogram.
        if row.result_name != NOT_CAPTURED_NAME {
            counts.durations.record(row.duration_ns);
        }
        if row.result != 0 {
            counts.errors += 1;
            *self.failures.entry((function_id, row.result)).or_default() += 1;
            return;
        }
        if let Some(bytes) = row.bytes {
            if row.function.starts_with("cuMemAlloc") {
                // Saturating: the sizes come from traced processes (a huge request that fails
                // unseen, entry-only), and an overflow must not stop the consumer.
                self.bytes_allocated = self.bytes_allocated.saturating_add(bytes);
            } else if row.function.starts_with("cuMemcpy") {
                self.bytes_copied = self.bytes_copied.saturating_add(bytes);
            }
        }
    }

    /// Counts `calls` successful calls of `function_id` (named `function`) that the kernel
    /// added up in `stats` mode, with their summed duration, byte count and durations.
    pub fn record_aggregate(
        &mut self,
        function_id: u32,
        function: &str,
        calls: u64,
        duration_ns: u64,
        bytes: u64,
        durations: &DurationHistogram,
    ) {
        let index = function_id as usize;
        if index >= self.by_function.len() {
            self.by_function
                .resize(index + 1, FunctionCounts::default());
        }
        let counts = &mut self.by_function[index];
        counts.calls = counts.calls.saturating_add(calls);
        counts.duration_ns = counts.duration_ns.saturating_add(duration_ns);
        counts.durations.merge(durations);
        if function.starts_with("cuMemAlloc") {
            self.bytes_allocated = self.bytes_allocated.saturating_add(bytes);
        } else if function.starts_with("cuMemcpy") {
            self.bytes_copied = self.bytes_copied.saturating_add(bytes);
        }
    }

    /// Adds the tally into `summary`, naming functions with `name_of`.
    pub fn add_to<'a>(self, summary: &mut RunSummary, name_of: impl Fn(u32) -> Option<&'a str>) {
        for (id, count) in self
            .by_function
            .into_iter()
            .map(|c| c.calls)
            .enumerate()
            .filter(|(_, c)| *c > 0)
        {
            let name = name_of(id as u32).unwrap_or("unknown");
            *summary.calls.entry(name.to_string()).or_default() += count;
        }
        for ((id, result), count) in self.failures {
            let name = name_of(id).unwrap_or("unknown");
            let what = format!("{name} {}", result_name(result));
            *summary.failures.entry(what).or_default() += count;
        }
        summary.bytes_allocated = summary.bytes_allocated.saturating_add(self.bytes_allocated);
        summary.bytes_copied = summary.bytes_copied.saturating_add(self.bytes_copied);
    }

    /// Counts so far, indexed by function id (ids never called may be missing at the end).
    pub fn by_function(&self) -> &[FunctionCounts] {
        &self.by_function
    }

    /// Failed calls so far per (function id, CUresult).
    pub fn failures(&self) -> &BTreeMap<(u32, u32), u64> {
        &self.failures
    }
}

/// What [`CallTally`] counts for one function since the start of the run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FunctionCounts {
    /// Calls recorded.
    pub calls: u64,
    /// Calls that returned a CUresult other than CUDA_SUCCESS (entry-only calls never do).
    pub errors: u64,
    /// Sum of the calls' durations (0 for entry-only functions, which have none).
    pub duration_ns: u64,
    /// The calls' durations (entry-only calls have none and are not in it).
    pub durations: DurationHistogram,
}

/// Aggregates over the rows the consumer decoded.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct RunSummary {
    /// Calls per function name.
    pub calls: BTreeMap<String, u64>,
    /// Bytes requested by successful allocations.
    pub bytes_allocated: u64,
    /// Bytes moved by successful copies.
    pub bytes_copied: u64,
    /// Failed calls per (function, result name).
    pub failures: BTreeMap<String, u64>,
    /// XIDs per code and source.
    pub xids: BTreeMap<String, u64>,
}

impl RunSummary {
    /// Counts one XID.
    pub fn record_xid(&mut self, code: u32, source: &str) {
        *self.xids.entry(format!("{code} ({source})")).or_default() += 1;
    }

    /// Adds another summary into this one.
    pub fn merge(&mut self, other: RunSummary) {
        for (k, v) in other.calls {
            *self.calls.entry(k).or_default() += v;
        }
        for (k, v) in other.failures {
            *self.failures.entry(k).or_default() += v;
        }
        for (k, v) in other.xids {
            *self.xids.entry(k).or_default() += v;
        }
        self.bytes_allocated = self.bytes_allocated.saturating_add(other.bytes_allocated);
        self.bytes_copied = self.bytes_copied.saturating_add(other.bytes_copied);
    }

    /// A few lines of text for the terminal. Function names come from the traced library's
    /// symbols and XID keys from the kernel: their control characters are escaped.
    pub fn render(&self) -> String {
        use crate::escape::Escaped;
        let mut out = String::new();
        let total: u64 = self.calls.values().sum();
        let _ = writeln!(out, "CUDA calls: {total}");
        let mut by_count: Vec<_> = self.calls.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (function, count) in by_count {
            let _ = writeln!(out, "  {count:>10}  {}", Escaped(function));
        }
        let _ = writeln!(
            out,
            "bytes allocated: {}  bytes copied: {}",
            self.bytes_allocated, self.bytes_copied
        );
        let failed: u64 = self.failures.values().sum();
        let _ = writeln!(out, "failed calls: {failed}");
        for (what, count) in &self.failures {
            let _ = writeln!(out, "  {count:>10}  {}", Escaped(what));
        }
        let xids: u64 = self.xids.values().sum();
        let _ = writeln!(out, "XIDs: {xids}");
        for (code, count) in &self.xids {
            let _ = writeln!(out, "  {count:>10}  XID {}", Escaped(code));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(function: &'static str, result: u32, bytes: Option<u64>) -> CudaRow<'static> {
        CudaRow {
            time_ns: 0,
            pid: 1,
            tid: 1,
            comm: "c",
            function,
            duration_ns: 1,
            result,
            result_name: if result == 0 {
                "CUDA_SUCCESS"
            } else {
                "CUDA_ERROR_OUT_OF_MEMORY"
            },
            bytes,
            device_ptr: None,
            stream: None,
            launch: None,
            workload: None,
            objects: Default::default(),
        }
    }

    #[test]
    fn aggregates_calls_bytes_failures_and_xids() {
        let mut tally = CallTally::default();
        tally.record(0, &row("cuMemAlloc_v2", 0, Some(100)));
        tally.record(0, &row("cuMemAlloc_v2", 2, Some(1 << 40)));
        tally.record(3, &row("cuMemcpyHtoD_v2", 0, Some(30)));
        assert_eq!(
            tally.by_function()[0],
            FunctionCounts {
                calls: 2,
                errors: 1,
                duration_ns: 2,
                durations: DurationHistogram {
                    counts: [2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
                },
            }
        );
        assert_eq!(tally.failures()[&(0, 2)], 1);
        assert_eq!(tally.by_function()[1], FunctionCounts::default());
        let mut summary = RunSummary::default();
        tally.add_to(&mut summary, |id| match id {
            0 => Some("cuMemAlloc_v2"),
            3 => Some("cuMemcpyHtoD_v2"),
            _ => None,
        });
        summary.record_xid(79, "kmsg");
        assert_eq!(summary.calls["cuMemAlloc_v2"], 2);
        assert_eq!((summary.bytes_allocated, summary.bytes_copied), (100, 30));
        assert_eq!(
            summary.failures["cuMemAlloc_v2 CUDA_ERROR_OUT_OF_MEMORY"],
            1
        );
        let text = summary.render();
        assert!(text.contains("CUDA calls: 3"), "{text}");
        assert!(text.contains("XID 79 (kmsg)"), "{text}");
    }

    /// Sizes come from traced processes: entry-only allocations whose failure is not seen can
    /// add up past u64; the tally saturates instead of panicking (debug) or wrapping.
    #[test]
    fn byte_totals_saturate() {
        let mut tally = CallTally::default();
        tally.record(0, &row("cuMemAlloc_v2", 0, Some(u64::MAX - 1)));
        tally.record(0, &row("cuMemAlloc_v2", 0, Some(5)));
        let mut summary = RunSummary {
            bytes_allocated: 7,
            ..RunSummary::default()
        };
        tally.add_to(&mut summary, |_| Some("cuMemAlloc_v2"));
        assert_eq!(summary.bytes_allocated, u64::MAX);
    }

    #[test]
    fn names_from_a_traced_library_are_printed_escaped() {
        // A glob probe takes whatever symbol names the library exports.
        let mut summary = RunSummary::default();
        summary.calls.insert("cu\x1b]52;c;aGk=\x07".into(), 3);
        summary.failures.insert("cuX\r\u{9b}2J 999".into(), 1);
        summary.xids.insert("13 (\x1b[2J)".into(), 1);
        let text = summary.render();
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains("3  cu\\x1b]52;c;aGk=\\x07\n"), "{text}");
        assert!(text.contains("1  cuX\\r\\u{9b}2J 999\n"), "{text}");
        assert!(text.contains("1  XID 13 (\\x1b[2J)\n"), "{text}");
    }
}
