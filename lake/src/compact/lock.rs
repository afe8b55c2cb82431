//! One compaction at a time on a local lake: an exclusive `flock(2)` on
//! `<root>/.gpuship-compact.lock` (hidden, outside every table, so no reader sees it), held
//! until the run ends, released by the kernel when the process dies however it dies. Two runs at once would compact the same agents'
//! files under two markers, and readers would then read their rows twice. On S3 there is no
//! such lock: the scheduler keeps one run at a time (`concurrencyPolicy: Forbid`, a oneshot
//! systemd service).

use std::fs::File;
use std::os::fd::AsRawFd;

use anyhow::Context;

use crate::local::LocalStorage;

/// The lock's name at the lake's root.
pub const LOCK_NAME: &str = ".gpuship-compact.lock";

/// Takes the lock of the local lake `storage`, or says that another run holds it.
pub fn lock(storage: &LocalStorage) -> anyhow::Result<File> {
    let path = storage.path_of(LOCK_NAME)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: flock(2) on a descriptor `file` owns for the duration of the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() == std::io::ErrorKind::WouldBlock {
            anyhow::bail!(
                "another gpuship-lake compact runs on this lake (it holds {}); one at a time",
                path.display()
            );
        }
        return Err(err).with_context(|| format!("locking {}", path.display()));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_run_is_refused_while_the_first_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let lake = LocalStorage::open(dir.path()).unwrap();
        let held = lock(&lake).unwrap();
        let err = lock(&lake).unwrap_err().to_string();
        assert!(
            err.starts_with("another gpuship-lake compact runs on this lake"),
            "{err}"
        );
        drop(held);
        assert!(lock(&lake).is_ok(), "released with its file");
    }
}
