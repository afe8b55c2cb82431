//! The agent's half of `stats` mode: every interval it flips the generation the probes add
//! calls to (`stats_generation` in `bpf/cuda.bpf.c`), and at the next poll, when no probe can
//! still be adding to the old generation, takes the old generation's entries out of the
//! `call_stats` table (lookup-and-delete, entry by entry) and turns each into a `cuda_stats`
//! row: calls, bytes, and durations with p50/p99 read from the kernel's histogram.
//!
//! Calls aggregated are counted twice, so none is lost silently: the kernel counts every call
//! it adds (`GPUSHIP_STAT_AGGREGATED`) or cannot add (`GPUSHIP_STAT_STATS_FULL`), and this
//! module counts the calls of the rows it makes (`aggregated_received`).
//!
//! The kernel's duration buckets and the quantiles read from them are shared with the health
//! metrics: [`crate::sources::stats_histogram`].

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gpuship_sinks::schema::{
    CudaStatsBatchBuilder, CudaStatsRow, DurationBucket, DurationStats, HostIdentity,
};
use gpuship_sinks::{EventBatch, EventKind};
use libbpf_rs::MapCore;

use super::decode::NOT_CAPTURED;
use super::plan::FunctionTable;
use crate::accounting::RingCounters;
use crate::bpf::cuda::types::{cuda_stats_key, cuda_stats_value};
use crate::decode::c_chars;
use crate::enrich::WorkloadResolver;
use crate::health::durations::DurationHistogram;
pub use crate::sources::stats_histogram::{bucket_bounds, quantile, BUCKETS};
use gpuship_model::cuda_results::result_name;

/// How much of a closed interval each process's hot functions were observed, under the
/// overhead budget (`super::budget`).
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Observed share of the interval by process; a process not here was observed whole.
    pub by_pid: std::collections::HashMap<u32, f64>,
    /// Hot function ids, by id.
    pub hot: Vec<bool>,
}

impl Observed {
    /// The share of the interval in which `function_id` was probed in `pid`.
    pub fn fraction(&self, pid: u32, function_id: u32) -> f64 {
        if !self.hot.get(function_id as usize).copied().unwrap_or(false) {
            return 1.0;
        }
        self.by_pid.get(&pid).copied().unwrap_or(1.0)
    }
}

/// One entry of the kernel's table, read back.
#[derive(Debug, Clone, Copy)]
pub struct StatsEntry {
    /// Key: process, function, result, generation.
    pub key: cuda_stats_key,
    /// Counts, sums and the histogram.
    pub value: cuda_stats_value,
}

impl StatsEntry {
    /// The entry as a row of the interval `[end_ns - interval_ns, end_ns)`, or None for a
    /// function id the table does not know (counted by the caller, never expected).
    pub fn row(
        &self,
        functions: &FunctionTable,
        end_ns: i64,
        interval_ns: u64,
    ) -> Option<CudaStatsRow> {
        let function = functions.name(self.key.function_id)?;
        let value = &self.value;
        let (result, result_name) = if self.key.result == NOT_CAPTURED {
            (0, "NOT_CAPTURED")
        } else {
            (self.key.result, result_name(self.key.result))
        };
        let counts: Vec<u64> = value.buckets.iter().map(|&c| u64::from(c)).collect();
        let timed: u64 = counts.iter().sum();
        let durations = (timed > 0).then(|| {
            let (min, max) = (value.duration_min_ns, value.duration_max_ns);
            DurationStats {
                sum_ns: value.duration_sum_ns,
                min_ns: min,
                max_ns: max,
                p50_ns: quantile(&counts, 0.50, min, max).unwrap_or(max),
                p99_ns: quantile(&counts, 0.99, min, max).unwrap_or(max),
                buckets: counts
                    .iter()
                    .enumerate()
                    .filter(|(_, &calls)| calls > 0)
                    .map(|(index, &calls)| {
                        let (from_ns, to_ns) = bucket_bounds(index);
                        DurationBucket {
                            from_ns,
                            to_ns,
                            calls,
                        }
                    })
                    .collect(),
            }
        });
        Some(CudaStatsRow {
            time_ns: end_ns,
            interval_ns,
            pid: self.key.tgid as i32,
            comm: c_chars(&value.comm).into_owned(),
            function: function.to_string(),
            result,
            result_name: result_name.to_string(),
            calls: value.calls,
            bytes_sum: (value.bytes_sum > 0).then_some(value.bytes_sum),
            durations,
            workload: None,
            observed_fraction: 1.0,
        })
    }
}

/// Takes every entry of `generation` out of `table`, atomically per entry.
pub fn take_generation(table: &dyn MapCore, generation: u32) -> Vec<StatsEntry> {
    let keys: Vec<Vec<u8>> = table.keys().collect();
    let mut entries = Vec::new();
    for raw_key in keys {
        let Ok(key) = bytemuck::try_pod_read_unaligned::<cuda_stats_key>(&raw_key) else {
            continue;
        };
        if key.generation != generation {
            continue;
        }
        match table.lookup_and_delete(&raw_key) {
            Ok(Some(raw_value)) => {
                match bytemuck::try_pod_read_unaligned::<cuda_stats_value>(&raw_value) {
                    Ok(value) => entries.push(StatsEntry { key, value }),
                    Err(err) => {
                        tracing::warn!(
                            ?err,
                            len = raw_value.len(),
                            "call_stats value of an unexpected size"
                        )
                    }
                }
            }
            Ok(None) => {}
            Err(err) => tracing::warn!(%err, "cannot take a call_stats entry"),
        }
    }
    entries
}

/// The successful calls of one entry taken out (failed calls of `stats` functions are rows,
/// counted where rows are): what the run summary and the live view add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Succeeded {
    /// Function id.
    pub function_id: u32,
    /// Process.
    pub pid: i32,
    /// The thread name of the entry.
    pub comm: [i8; 16],
    /// Calls.
    pub calls: u64,
    /// Their summed duration.
    pub duration_sum_ns: u64,
    /// Their summed byte count.
    pub bytes_sum: u64,
    /// Their durations, in the metrics' buckets.
    pub durations: DurationHistogram,
}

/// What one poll produced.
#[derive(Debug, Default)]
pub struct Polled {
    /// The generation to write into the program, when it changed.
    pub flipped: Option<u32>,
    /// `cuda_stats` rows taken out, if any.
    pub batch: Option<EventBatch>,
    /// Their successful calls.
    pub succeeded: Vec<Succeeded>,
}

/// An interval whose generation was flipped away from and waits to be taken out.
#[derive(Debug, Clone)]
struct Closed {
    generation: u32,
    end_ns: i64,
    interval_ns: u64,
    /// Under a budget: how much of the interval was observed.
    observed: Option<Observed>,
}

/// When to flip, which generation is current, and the interval waiting to be taken out.
#[derive(Debug)]
pub struct StatsDrain {
    interval: Duration,
    next_flip: Instant,
    generation: u32,
    /// Start of the current interval, Unix nanoseconds.
    started_ns: i64,
    closed: Option<Closed>,
    builder: CudaStatsBatchBuilder,
    succeeded: Vec<Succeeded>,
}

fn unix_now_ns() -> i64 {
    crate::enrich::now_ns(libc::CLOCK_REALTIME)
}

impl StatsDrain {
    /// Intervals of `interval`, the first starting now.
    pub fn new(identity: HostIdentity, interval: Duration, now: Instant) -> Self {
        Self {
            interval,
            next_flip: now + interval,
            generation: 0,
            started_ns: unix_now_ns(),
            closed: None,
            builder: CudaStatsBatchBuilder::new(identity),
            succeeded: Vec::new(),
        }
    }

    /// One poll: takes out the interval closed at the previous poll, and closes the current
    /// one when it is due (every interval when `all` is false). With `all` (the probes are
    /// detached, nothing adds any more) it takes out both generations. `observed` is asked
    /// when an interval closes, for the share of it the budget observed.
    #[allow(clippy::too_many_arguments)]
    pub fn poll(
        &mut self,
        now: Instant,
        all: bool,
        table: &dyn MapCore,
        functions: &FunctionTable,
        workloads: &mut WorkloadResolver,
        counters: &RingCounters,
        observed: &mut dyn FnMut() -> Option<Observed>,
    ) -> Polled {
        if let Some(closed) = self.closed.take() {
            self.take_out(closed, table, functions, workloads, counters);
        }
        let mut flipped = None;
        if all {
            let end_ns = unix_now_ns();
            let current = Closed {
                generation: self.generation,
                end_ns,
                interval_ns: end_ns.saturating_sub(self.started_ns).max(0) as u64,
                observed: observed(),
            };
            self.take_out(current, table, functions, workloads, counters);
            self.started_ns = end_ns;
        } else if now >= self.next_flip {
            let end_ns = unix_now_ns();
            self.closed = Some(Closed {
                generation: self.generation,
                end_ns,
                interval_ns: end_ns.saturating_sub(self.started_ns).max(0) as u64,
                observed: observed(),
            });
            self.generation ^= 1;
            self.started_ns = end_ns;
            // A late poll does not bunch intervals: the next one is a whole interval away.
            self.next_flip = now + self.interval;
            flipped = Some(self.generation);
        }
        let batch = if self.builder.is_empty() {
            None
        } else {
            match self.builder.finish() {
                Ok(records) => Some(EventBatch::new(EventKind::CudaStats, records)),
                Err(err) => {
                    tracing::error!(%err, "cannot build a cuda_stats batch");
                    None
                }
            }
        };
        Polled {
            flipped,
            batch,
            succeeded: std::mem::take(&mut self.succeeded),
        }
    }

    fn take_out(
        &mut self,
        closed: Closed,
        table: &dyn MapCore,
        functions: &FunctionTable,
        workloads: &mut WorkloadResolver,
        counters: &RingCounters,
    ) {
        for entry in take_generation(table, closed.generation) {
            // Counted whether or not it becomes a row: the calls left the kernel's table.
            counters
                .aggregated_received
                .fetch_add(entry.value.calls, Ordering::Release);
            if entry.key.result == 0 || entry.key.result == NOT_CAPTURED {
                self.succeeded.push(Succeeded {
                    function_id: entry.key.function_id,
                    pid: entry.key.tgid as i32,
                    comm: entry.value.comm,
                    calls: entry.value.calls,
                    duration_sum_ns: entry.value.duration_sum_ns,
                    bytes_sum: entry.value.bytes_sum,
                    durations: {
                        let mut durations = DurationHistogram::default();
                        durations
                            .add_kernel_buckets(entry.value.buckets.iter().map(|&c| u64::from(c)));
                        durations
                    },
                });
            }
            match entry.row(functions, closed.end_ns, closed.interval_ns) {
                Some(mut row) => {
                    row.workload = workloads.resolve(row.pid).cloned();
                    if let Some(observed) = &closed.observed {
                        row.observed_fraction =
                            observed.fraction(entry.key.tgid, entry.key.function_id);
                    }
                    self.builder.append(row);
                }
                None => {
                    counters.decode_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        function_id = entry.key.function_id,
                        calls = entry.value.calls,
                        "call_stats entry of an unknown function skipped"
                    );
                }
            }
        }
    }
}
