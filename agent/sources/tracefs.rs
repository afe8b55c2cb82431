//! Locating tracefs, which holds tracepoint format files, mounting it when absent (as the
//! kernel does not always mount it at boot).

use std::path::{Path, PathBuf};

const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The tracefs root, mounting tracefs at /sys/kernel/tracing if no mount is found.
pub fn ensure_mounted() -> Result<PathBuf, String> {
    if let Some(root) = find() {
        return Ok(root);
    }
    let target = Path::new(CANDIDATES[0]);
    let status = std::process::Command::new("mount")
        .args(["-t", "tracefs", "nodev"])
        .arg(target)
        .status()
        .map_err(|err| format!("running mount for tracefs: {err}"))?;
    match find() {
        Some(root) => {
            tracing::info!(path = %root.display(), "mounted tracefs");
            Ok(root)
        }
        None => Err(format!(
            "tracefs is not mounted and `mount -t tracefs nodev {}` failed ({status})",
            target.display()
        )),
    }
}

fn find() -> Option<PathBuf> {
    CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|root| root.join("events").is_dir())
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg_attr(
        not(feature = "root-tests"),
        ignore = "needs root: `make test` runs it"
    )]
    fn tracefs_is_found_or_mounted_as_root() {
        let root = super::ensure_mounted().expect("tests run as root");
        assert!(root.join("events/sched/sched_process_fork/format").exists());
    }
}
