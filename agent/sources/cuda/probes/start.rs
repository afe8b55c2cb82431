//! The libraries the CUDA probes start with: the configured ones and those running processes
//! map, one per file, and the probe plan over them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::sources::cuda::config::CudaSourceConfig;
use crate::sources::cuda::discovery::{identity, Action, Discovery, FileKey};
use crate::sources::cuda::library::{exported_functions, resolve_libraries};
use crate::sources::cuda::plan::{plan_probes, ProbePlan};

/// Where a library attached at start came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Configured,
    Discovered,
}

/// A library to attach at start: the path the agent opens, and its file.
#[derive(Debug, Clone)]
pub(super) struct StartLibrary {
    pub(super) path: PathBuf,
    pub(super) key: FileKey,
    pub(super) origin: Origin,
}

/// The libraries to attach at start, and the discovery that goes on from there.
pub(super) struct FoundLibraries {
    pub(super) libraries: Vec<StartLibrary>,
    pub(super) discovery: Option<Discovery>,
}

/// The configured libraries, and those running processes map (one per file, configured ones
/// first), or why there is nothing to probe and nothing to wait for.
pub(super) fn find_libraries(
    config: &CudaSourceConfig,
    proc_dir: &Path,
) -> Result<FoundLibraries, String> {
    let (configured, missing_paths) = resolve_libraries(&config.libraries);
    if !missing_paths.is_empty() {
        tracing::warn!(paths = ?missing_paths, "configured CUDA libraries do not exist");
    }
    let mut libraries: Vec<StartLibrary> = Vec::new();
    for path in configured {
        let key = match identity::mapped_file_key(&path) {
            Ok(key) => key,
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "configured CUDA library cannot be read");
                continue;
            }
        };
        if !libraries.iter().any(|l| l.key == key) {
            libraries.push(StartLibrary {
                path,
                key,
                origin: Origin::Configured,
            });
        }
    }
    let mut discovery = None;
    if config.discovers_libraries() {
        let now = Instant::now();
        let rescan = Duration::from_secs(config.library_rescan_secs.max(1));
        let mut found = Discovery::new(proc_dir, rescan, now);
        for library in &libraries {
            found.configured(library.key, &library.path, 0);
        }
        for action in found.scan_all(now) {
            if let Action::Attach { key, reach, .. } = action {
                libraries.push(StartLibrary {
                    path: reach,
                    key,
                    origin: Origin::Discovered,
                });
            }
        }
        discovery = Some(found);
    }
    if libraries.is_empty() && discovery.is_none() {
        return Err(format!(
            "no libcuda.so.1 found (libraries = {:?}); install the NVIDIA driver or set [sources.cuda] libraries",
            config.libraries
        ));
    }
    Ok(FoundLibraries {
        libraries,
        discovery,
    })
}

/// Discovered libraries that could not be read, with why.
pub(super) type Unreadable = Vec<(FileKey, String)>;

/// The probe plan of the libraries found at start, or why there is nothing to probe. With
/// discovery on, no library yet is an empty plan: the probes come with the first process that
/// maps one.
pub(super) fn plan(
    config: &CudaSourceConfig,
    libraries: &[StartLibrary],
) -> anyhow::Result<Result<(ProbePlan, Unreadable), String>> {
    let mut exported = Vec::new();
    let mut unreadable = Vec::new();
    for library in libraries {
        match exported_functions(&library.path) {
            Ok(functions) => exported.push((library.path.clone(), functions)),
            Err(err) if library.origin == Origin::Discovered => {
                tracing::warn!(error = %err, "a CUDA library a process maps cannot be read; tried again at the next rescan");
                unreadable.push((library.key, err.to_string()));
            }
            Err(err) => return Err(err.into()),
        }
    }
    let plan: ProbePlan = plan_probes(
        &exported,
        &config.functions,
        &config.exclude_functions,
        &config.entry_only,
        &config.stats,
        &config.stats_entry_only,
    );
    if !plan.missing.is_empty() && !exported.is_empty() {
        tracing::info!(functions = ?plan.missing, "requested CUDA functions not exported by the library; skipped");
    }
    if plan.probes.is_empty() && !config.discovers_libraries() {
        let paths: Vec<&PathBuf> = libraries.iter().map(|l| &l.path).collect();
        return Ok(Err(format!(
            "no requested function is exported by {paths:?}"
        )));
    }
    Ok(Ok((plan, unreadable)))
}
