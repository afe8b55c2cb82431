//! The CUDA source's side of library discovery, on its drain timer: processes the `openat`
//! tracepoints reported, the discovery's decisions carried out on the probes, the function
//! table handed on when a library brought new functions, and the statuses published for
//! `/metrics` and `/health`.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{CudaCapture, FunctionSet};
use crate::sources::cuda::discovery::{Action, Discovery};
use crate::sources::cuda::roles::RoleTable;

impl CudaCapture<'_> {
    /// Takes the processes that opened a libcuda, lets the discovery decide, and attaches or
    /// detaches what it says.
    pub(super) fn discover_libraries(&mut self, now: Instant) {
        // Out of the probes while they carry out its decisions.
        let Some(mut discovery) = self.probes.discovery.take() else {
            return;
        };
        for (pid, opened_ns) in self.probes.take_library_opens() {
            discovery.opened(pid, opened_ns, now);
        }
        let actions = discovery.poll(now);
        let changed = !actions.is_empty();
        let functions_before = self.probes.functions.len();
        for action in actions {
            self.carry_out(&mut discovery, action);
        }
        self.probes.discovery = Some(discovery);
        if self.probes.functions.len() != functions_before {
            self.functions_changed();
        }
        if changed || now.duration_since(self.libraries_published_at) >= PUBLISH_INTERVAL {
            self.publish_libraries(now);
        }
    }

    fn carry_out(&mut self, discovery: &mut Discovery, action: Action) {
        let counters = &self.accounting.libraries;
        match action {
            Action::Attach {
                key,
                reach,
                shown,
                opened_ns,
                mapped_before,
            } => match self.probes.attach_library(key, &reach) {
                Ok(symbols) => {
                    discovery.attached(key, Ok(symbols));
                    counters
                        .attached_late_processes
                        .fetch_add(mapped_before as u64, Ordering::Relaxed);
                    let delay_ns = opened_ns.map(|at| monotonic_ns().saturating_sub(at));
                    if let Some(delay_ns) = delay_ns {
                        counters.timed_attach(delay_ns);
                    }
                    tracing::info!(
                        path = %shown.display(),
                        file = %key,
                        symbols,
                        processes_attached_late = mapped_before,
                        attach_delay_ms = delay_ns.map(|ns| ns as f64 / 1e6),
                        "a process maps a new CUDA library: attached"
                    );
                }
                Err(err) => {
                    counters.attach_failures.fetch_add(1, Ordering::Relaxed);
                    let reason = format!("{err:#}");
                    tracing::warn!(
                        path = %shown.display(),
                        file = %key,
                        error = reason,
                        "a process maps a CUDA library that cannot be attached; tried again at the next rescan"
                    );
                    discovery.attached(key, Err(reason));
                }
            },
            Action::Detach { key } => {
                if self.probes.detach_library(key) {
                    counters.detached.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(file = %key, "no process maps this CUDA library any more: detached");
                }
            }
        }
    }

    /// Hands the grown function table to everything that names function ids.
    fn functions_changed(&mut self) {
        let functions = self.probes.functions.clone();
        self.decoder.set_functions(functions.clone());
        self.roles = RoleTable::new(&functions);
        self.stats_ids = FunctionSet::new(&self.probes.stats_function_ids);
        self.history.set_functions(&functions);
        self.view.functions(functions);
        if self.stats.is_none() && self.probes.aggregates {
            tracing::warn!("a library found later brought `stats` functions, but the statistics drain did not start with the agent: restart it to aggregate them");
        }
    }

    /// Publishes what each library's attach is, for `/metrics` and `/health`.
    pub(super) fn publish_libraries(&mut self, now: Instant) {
        self.libraries_published_at = now;
        if let Some(discovery) = self.probes.discovery.as_ref() {
            self.accounting.libraries.publish(discovery.statuses());
        }
    }
}

/// How often the statuses are published when nothing changed (process counts move).
const PUBLISH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// CLOCK_MONOTONIC now, in nanoseconds: the clock `bpf_ktime_get_ns` reads.
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the value we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}
