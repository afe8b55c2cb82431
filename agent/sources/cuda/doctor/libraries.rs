//! `gpuship doctor`'s view of library discovery: every libcuda a running process maps, which
//! processes map it, and whether the agent can reach it to attach (and if not, why).

use std::collections::BTreeMap;
use std::path::Path;

use crate::diagnosis::Check;
use crate::escape::escape_controls;
use crate::sources::cuda::discovery::maps::{self, FileKey, MappedLibrary};
use crate::sources::cuda::library::exported_functions;

/// Processes named per library at most.
const MAX_PIDS_SHOWN: usize = 8;

/// One check per libcuda file that processes under `proc_dir` map.
pub fn mapped_libraries(proc_dir: &Path) -> Vec<Check> {
    let mut files: BTreeMap<FileKey, (MappedLibrary, Vec<u32>)> = BTreeMap::new();
    let mut unreadable = 0usize;
    let mut pids = maps::process_ids(proc_dir);
    pids.sort_unstable();
    for pid in pids {
        match maps::mapped_libraries(proc_dir, pid) {
            Ok(libraries) => {
                for library in libraries {
                    files
                        .entry(library.key)
                        .or_insert_with(|| (library, Vec::new()))
                        .1
                        .push(pid);
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied => unreadable += 1,
            Err(_) => {}
        }
    }
    let mut checks = Vec::new();
    if unreadable > 0 {
        checks.push(Check::fail(
            "cuda discovery",
            false,
            format!("the maps of {unreadable} processes cannot be read"),
            "run as root, or grant CAP_SYS_PTRACE (and hostPID in Kubernetes) so that the libraries of other processes can be found",
        ));
    }
    for (key, (library, pids)) in files {
        checks.push(library_check(proc_dir, key, &library, &pids));
    }
    checks
}

fn library_check(proc_dir: &Path, key: FileKey, library: &MappedLibrary, pids: &[u32]) -> Check {
    let probe = format!(
        "cuda library {} (file {key})",
        escape_controls(&library.path.to_string_lossy())
    );
    let shown: Vec<String> = pids
        .iter()
        .take(MAX_PIDS_SHOWN)
        .map(u32::to_string)
        .collect();
    let more = pids.len().saturating_sub(MAX_PIDS_SHOWN);
    let mappers = format!(
        "mapped by {} processes (pids {}{})",
        pids.len(),
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    );
    let reach = pids
        .iter()
        .map(|&pid| maps::reachable_path(proc_dir, pid, library))
        .find(Result::is_ok)
        .unwrap_or_else(|| maps::reachable_path(proc_dir, pids[0], library));
    match reach {
        Ok(path) => match exported_functions(&path) {
            Ok(functions) => Check::pass(
                probe,
                false,
                format!(
                    "{mappers}; reached at {}, {} exported functions",
                    escape_controls(&path.to_string_lossy()),
                    functions.len()
                ),
            ),
            Err(err) => Check::fail(
                probe,
                false,
                format!("{mappers}; {}", escape_controls(&err.to_string())),
                "the file the process maps is not a readable ELF library; its calls cannot be probed",
            ),
        },
        Err(reason) => Check::fail(
            probe,
            false,
            format!("{mappers}; cannot reach it: {}", escape_controls(&reason)),
            "the agent reaches a container's libcuda through /proc/<pid>/root: run it in the host PID namespace (hostPID: true) with CAP_SYS_PTRACE, or CAP_SYS_ADMIN for /proc/<pid>/map_files when the file was deleted",
        ),
    }
}
