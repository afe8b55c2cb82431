//! A stand-in CUDA workload in a mount and PID namespace of its own (`unshare --mount --pid
//! --fork`), with libcuda on a private tmpfs at a path only it sees, held at a gate file until
//! the test lets it call.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support;
use crate::support::Fixtures;

/// How a namespace gets its library.
pub(super) enum Library<'a> {
    /// The host file bind-mounted at the namespace's path: the same file (inode).
    Bind(&'a Path),
    /// A copy made inside the namespace's tmpfs: a file no other namespace has.
    Copy(&'a Path),
}

/// A workload in its own mount and PID namespace.
pub(super) struct Contained {
    unshare: Child,
    pub(super) host_pid: u32,
    gate: PathBuf,
}

impl Contained {
    /// Starts `cuda_workload args` with libcuda at `<mount>/libcuda.so.1` on a tmpfs of its
    /// own, waiting for `<gate>` when `gated`; returns once it has mapped the library.
    pub(super) fn start(
        fixtures: &Fixtures,
        mount: &Path,
        library: Library<'_>,
        args: &[&str],
        gate_dir: &Path,
    ) -> Contained {
        std::fs::create_dir_all(mount).unwrap();
        let gate = gate_dir.join(format!("go-{}", rand_suffix()));
        let (place, source) = match library {
            Library::Bind(file) => (
                r#"touch "$1/libcuda.so.1" && mount --bind "$2" "$1/libcuda.so.1""#,
                file,
            ),
            Library::Copy(file) => (r#"cp "$2" "$1/libcuda.so.1""#, file),
        };
        let script = format!(
            r#"mount -t tmpfs tmpfs "$1" && {place} && exec env CUDA_LIB="$1/libcuda.so.1" WORKLOAD_WAIT_FILE="$3" "$4" "${{@:5}}""#
        );
        let mut unshare = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--pid",
                "--fork",
                "bash",
                "-c",
            ])
            .arg(script)
            .arg("bash")
            .arg(mount)
            .arg(source)
            .arg(&gate)
            .arg(&fixtures.workload)
            .args(args)
            .env("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux)");
        let children = format!("/proc/{0}/task/{0}/children", unshare.id());
        let mut host_pid = 0;
        support::wait_until(
            Duration::from_secs(20),
            "the contained workload maps its library",
            || {
                host_pid = std::fs::read_to_string(&children)
                    .ok()
                    .and_then(|c| c.split_whitespace().next()?.parse().ok())
                    .unwrap_or(0);
                host_pid != 0
                    && std::fs::read_to_string(format!("/proc/{host_pid}/maps"))
                        .is_ok_and(|m| m.contains("libcuda.so.1"))
            },
            || format!("children of unshare {}", unshare.id()),
        );
        assert!(
            unshare.try_wait().unwrap().is_none(),
            "the namespace's workload exited early"
        );
        Contained {
            unshare,
            host_pid,
            gate,
        }
    }

    /// Opens its gate and waits for it to end; returns what it printed.
    pub(super) fn release(mut self) -> String {
        std::fs::write(&self.gate, b"").unwrap();
        self.finish()
    }

    fn finish(&mut self) -> String {
        let mut out = String::new();
        if let Some(mut stdout) = self.unshare.stdout.take() {
            stdout.read_to_string(&mut out).unwrap();
        }
        let status = self.unshare.wait().unwrap();
        assert!(status.success(), "contained workload: {status:?} {out}");
        out
    }
}

impl Drop for Contained {
    fn drop(&mut self) {
        if matches!(self.unshare.try_wait(), Ok(None)) {
            let _ = self.unshare.kill();
            let _ = self.unshare.wait();
        }
    }
}

fn rand_suffix() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}
