//! The agent's state directory (`[agent] state_dir`: each sink's spool, the kernel-log cursor)
//! and the locks that keep one agent per state directory and per local Parquet root.
//!
//! Two agents on one state directory share spool segments (each deletes what the other
//! replays) and the cursor; two agents on one Parquet root write every row twice. So `gpuship
//! run` takes, before anything starts, an exclusive `flock(2)` on `<state_dir>/lock` and on
//! `<root>/.gpuship.lock` of every local Parquet sink, and refuses to start when another
//! process holds one. The kernel releases the locks when the process ends, however it ends
//! (SIGKILL included), so no stale lock ever needs cleaning up; the pid written into the
//! file only names the holder in the error.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use gpuship_sinks::secure_fs::{self, SecureFsError};

use crate::config::{Config, SinkConfig};

/// Name of the lock file in the state directory.
pub const STATE_LOCK: &str = "lock";
/// Name of the lock file in a local Parquet root (hidden: lake readers skip dot files).
pub const PARQUET_LOCK: &str = ".gpuship.lock";

/// Why the agent may not use its state directory or a Parquet root.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error(
        "{what} {path} is in use by another gpuship agent (pid {holder}, lock file {lock}): \
         stop that agent, or give this one its own {what}"
    )]
    Held {
        /// "state directory" or "parquet path".
        what: &'static str,
        /// The directory.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The pid written by the holder ("unknown" if it had not written it yet).
        holder: String,
    },
    /// The state directory is not private, or a file cannot be created.
    #[error("state directory: {0}")]
    Unsafe(#[from] SecureFsError),
    /// flock(2) failed for another reason.
    #[error("locking {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// OS error.
        source: std::io::Error,
    },
}

/// The locks of a running agent; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct AgentLocks {
    _files: Vec<File>,
    /// The directories locked, for the log.
    pub locked: Vec<PathBuf>,
}

/// Makes the state directory private (0700, owned by this user, not writable by others) and
/// takes the locks of `config`'s state directory and local Parquet roots.
pub fn lock(config: &Config) -> Result<AgentLocks, LockError> {
    let state_dir = &config.agent.state_dir;
    secure_fs::ensure_private_dir(state_dir)?;
    let mut locks = AgentLocks {
        _files: vec![lock_dir("state directory", state_dir, STATE_LOCK)?],
        locked: vec![state_dir.clone()],
    };
    let mut seen = HashSet::new();
    for root in parquet_roots(config) {
        // The sink creates its root at start anyway; a root that cannot exist yet (a mount
        // that is not there) cannot be shared either: it is locked when it can be.
        if let Err(err) = std::fs::create_dir_all(&root) {
            tracing::warn!(path = %root.display(), %err, "parquet root not available; not locked");
            continue;
        }
        let key = root.canonicalize().unwrap_or_else(|_| root.clone());
        if !seen.insert(key) {
            continue;
        }
        locks
            ._files
            .push(lock_dir("parquet path", &root, PARQUET_LOCK)?);
        locks.locked.push(root);
    }
    Ok(locks)
}

impl AgentLocks {
    /// Also locks the local Parquet roots of `config` this agent does not hold yet (a reload
    /// that adds a Parquet sink): all of them, or none when another agent holds one.
    pub fn lock_new_roots(&mut self, config: &Config) -> Result<(), LockError> {
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let mut held: HashSet<PathBuf> = self.locked.iter().map(|p| canonical(p)).collect();
        let mut files = Vec::new();
        let mut roots = Vec::new();
        for root in parquet_roots(config) {
            if let Err(err) = std::fs::create_dir_all(&root) {
                tracing::warn!(path = %root.display(), %err, "parquet root not available; not locked");
                continue;
            }
            if !held.insert(canonical(&root)) {
                continue;
            }
            files.push(lock_dir("parquet path", &root, PARQUET_LOCK)?);
            roots.push(root);
        }
        self._files.extend(files);
        self.locked.extend(roots);
        Ok(())
    }
}

/// The local directories of `config`'s Parquet sinks (object-store roots are not locked).
fn parquet_roots(config: &Config) -> Vec<PathBuf> {
    config
        .sinks
        .iter()
        .filter_map(|entry| match &entry.sink {
            SinkConfig::Parquet(parquet) if parquet.s3_url().is_none() => {
                Some(parquet.path.clone())
            }
            _ => None,
        })
        .collect()
}

/// Takes the exclusive lock of `dir/name` without waiting and writes this process's pid in it.
fn lock_dir(what: &'static str, dir: &Path, name: &str) -> Result<File, LockError> {
    let path = dir.join(name);
    let mut file = secure_fs::open_private(&path)?;
    loop {
        // SAFETY: flock(2) on a descriptor `file` owns for the duration of the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            break;
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(LockError::Held {
                    what,
                    path: dir.to_path_buf(),
                    lock: path,
                    holder: if holder.is_empty() {
                        "unknown".into()
                    } else {
                        crate::escape::escape_controls(holder).into_owned()
                    },
                });
            }
            _ => return Err(LockError::Io { path, source: err }),
        }
    }
    let written = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    written.map_err(|source| LockError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SinkEntry;
    use gpuship_sinks::parquet::ParquetSinkConfig;
    use std::os::unix::fs::PermissionsExt;

    fn config(state: &Path, parquet: &[&Path]) -> Config {
        let mut config = Config::default();
        config.agent.state_dir = state.to_path_buf();
        config.sinks = parquet
            .iter()
            .map(|p| SinkEntry::new(SinkConfig::Parquet(ParquetSinkConfig::with_path(p))))
            .collect();
        config
    }

    #[test]
    fn a_reload_locks_only_the_roots_it_adds_and_none_held_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let (lake, second, taken) = (
            dir.path().join("lake"),
            dir.path().join("second"),
            dir.path().join("taken"),
        );
        let mut locks = lock(&config(&state, &[&lake])).unwrap();
        locks
            .lock_new_roots(&config(&state, &[&lake, &second]))
            .unwrap();
        assert_eq!(locks.locked, vec![state.clone(), lake.clone(), second]);
        let other = lock(&config(&dir.path().join("other"), &[&taken])).unwrap();
        let refused = locks.lock_new_roots(&config(&state, &[&lake, &taken]));
        assert!(
            matches!(refused, Err(LockError::Held { .. })),
            "{refused:?}"
        );
        assert_eq!(locks.locked.len(), 3);
        drop(other);
    }

    #[test]
    fn a_second_holder_is_refused_with_the_path_and_pid_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let (state, lake) = (dir.path().join("state"), dir.path().join("lake"));
        let first = lock(&config(&state, &[&lake])).unwrap();
        assert_eq!(first.locked, vec![state.clone(), lake.clone()]);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&state), 0o700);
        assert_eq!(mode(&state.join(STATE_LOCK)), 0o600);
        let pid = std::process::id().to_string();
        assert_eq!(
            std::fs::read_to_string(state.join(STATE_LOCK)).unwrap(),
            format!("{pid}\n")
        );

        // flock locks belong to the open file: a second open in this process conflicts too.
        let err = lock(&config(&state, &[])).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "state directory {} is in use by another gpuship agent (pid {pid}, lock file {}): \
                 stop that agent, or give this one its own state directory",
                state.display(),
                state.join(STATE_LOCK).display()
            )
        );
        let other_state = dir.path().join("other");
        let err = lock(&config(&other_state, &[&lake.join("x/..")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!(
                "parquet path {}/x/.. is in use by another gpuship agent (pid {pid}",
                lake.display()
            )),
            "{err}"
        );
        drop(first);
        lock(&config(&state, &[&lake])).unwrap();
    }

    #[test]
    fn one_root_named_twice_is_locked_once() {
        let dir = tempfile::tempdir().unwrap();
        let lake = dir.path().join("lake");
        let locks = lock(&config(&dir.path().join("s"), &[&lake, &lake.join(".")])).unwrap();
        assert_eq!(locks.locked.len(), 2);
    }

    #[test]
    fn a_state_directory_writable_by_others_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = lock(&config(&state, &[])).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "{} is writable by group or others (mode 0777)",
                state.display()
            )),
            "{err}"
        );
        assert!(!state.join(STATE_LOCK).exists());
    }
}
