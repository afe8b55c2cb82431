//! Libraries found after start: attached one by one onto the loaded program, with the
//! function ids of the libraries before them, and detached one by one; and the processes the
//! `openat` tracepoints saw open a libcuda.

use std::path::Path;

use anyhow::Context;
use libbpf_rs::{Link, MapCore, MapFlags};

use super::{attach, probe_sites, repeat_lookups, CudaProbes};
use crate::bpf::cuda::CudaSkel;
use crate::sources::cuda::discovery::FileKey;
use crate::sources::cuda::library::exported_functions;
use crate::sources::cuda::plan::{plan_probes_onto, Selected};

/// Most processes taken from `library_opens` per drain (the map holds 4,096).
const MAX_OPENS_PER_DRAIN: usize = 4096;

/// Attaches the `openat` and `openat2` tracepoints that report processes opening a libcuda.
/// `openat2` is optional (Linux >= 5.6; glibc's loader uses `openat`).
pub(super) fn attach_library_opens(skel: &CudaSkel<'_>) -> anyhow::Result<Vec<Link>> {
    let mut links = vec![skel
        .progs
        .library_openat
        .attach()
        .context("attaching tracepoint syscalls/sys_enter_openat")?];
    match skel.progs.library_openat2.attach() {
        Ok(link) => links.push(link),
        Err(err) => tracing::debug!(%err, "no syscalls/sys_enter_openat2 tracepoint"),
    }
    Ok(links)
}

impl CudaProbes<'_> {
    /// The processes that opened a libcuda since the last call, with the time of their first
    /// such open (CLOCK_MONOTONIC ns), taken out of the map.
    pub fn take_library_opens(&self) -> Vec<(u32, u64)> {
        let map = &self.skel.maps.library_opens;
        let mut opens = Vec::new();
        for key in map.keys().take(MAX_OPENS_PER_DRAIN) {
            let Ok(pid) = <[u8; 4]>::try_from(key.as_slice()).map(u32::from_ne_bytes) else {
                continue;
            };
            let opened = match map.lookup(&key, MapFlags::ANY) {
                Ok(Some(value)) => <[u8; 8]>::try_from(value.as_slice())
                    .map(u64::from_ne_bytes)
                    .unwrap_or(0),
                _ => 0,
            };
            let _ = map.delete(&key);
            opens.push((pid, opened));
        }
        opens
    }

    /// Attaches the planned functions of the library `key`, reached at `reach`; returns how
    /// many symbols got probes. Functions already probed elsewhere keep their id; new ones
    /// extend [`CudaProbes::functions`] (the caller hands the new table on).
    pub fn attach_library(&mut self, key: FileKey, reach: &Path) -> anyhow::Result<usize> {
        if self.libraries.borrow().iter().any(|(k, _)| *k == key) {
            return Ok(0);
        }
        let exported = exported_functions(reach)?;
        let config = &self.later.config;
        let mut plan = plan_probes_onto(
            &self.functions,
            &[(reach.to_path_buf(), exported)],
            &Selected {
                functions: &config.functions,
                exclude: &config.exclude_functions,
                entry_only: &config.entry_only,
                stats: &config.stats,
                stats_entry_only: &config.stats_entry_only,
            },
        );
        anyhow::ensure!(
            !plan.probes.is_empty(),
            "no requested function is exported by {}",
            reach.display()
        );
        if self.later.budget {
            plan.mark_hot(&config.hot_functions);
        }
        probe_sites::place_probes(&mut plan.probes);
        let sessions = self.later.sessions
            && repeat_lookups(
                config,
                self.later.multi,
                self.later.kernel_release.as_deref(),
                &plan,
            )
            .is_ok();
        let (attached, in_sessions) =
            attach::attach_all(&self.skel, &plan.probes, self.later.multi, sessions)?;
        let symbols = plan.probes.len();
        let hot: Vec<_> = plan.probes.iter().filter(|p| p.hot).cloned().collect();
        if let Some(budget) = self.budget.borrow_mut().as_mut() {
            budget.add_library(&self.skel, key, reach, hot, sessions)?;
        }
        {
            let mut libraries = self.libraries.borrow_mut();
            for (_, links) in attached {
                libraries.push((key, links));
            }
        }
        for probe in plan.probes.iter().filter(|p| p.stats) {
            let id = probe.function_id();
            if !self.stats_function_ids.contains(&id) {
                self.stats_function_ids.push(id);
            }
        }
        self.aggregates |= !self.stats_function_ids.is_empty();
        self.probed_symbols += symbols;
        self.functions = plan.functions;
        tracing::info!(
            library = %reach.display(),
            file = %key,
            symbols,
            repeat_lookups_at_entry = in_sessions,
            "CUDA library attached"
        );
        Ok(symbols)
    }

    /// Detaches the probes of `key` (return probes first); false when none were attached.
    pub fn detach_library(&self, key: FileKey) -> bool {
        if let Some(budget) = self.budget.borrow_mut().as_mut() {
            budget.remove_library(key);
        }
        let mut libraries = self.libraries.borrow_mut();
        let before = libraries.len();
        libraries.retain_mut(|(k, links)| {
            if *k == key {
                links.detach();
                false
            } else {
                true
            }
        });
        libraries.len() != before
    }

    /// Files with probes attached.
    pub fn attached_files(&self) -> usize {
        let mut keys: Vec<FileKey> = self.libraries.borrow().iter().map(|(k, _)| *k).collect();
        keys.dedup();
        keys.len()
    }
}
