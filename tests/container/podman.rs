//! Driving Debian's podman for the container tests: the test image built once per run by
//! `deploy/container/build.sh`, containers removed by name when their handle drops, and the
//! stand-in workloads' own root filesystems.
//!
//! Every call goes through [`podman`], which names runc as the runtime: Debian's crun 1.8
//! refuses this VM's hybrid cgroup layout (v1 controllers beside a v2 hierarchy that holds a
//! controller), runc runs it. Containers get explicit `nofile` and `nproc` limits: podman asks
//! for 1048576 of each by default, above what this VM's root may raise to (it has no
//! CAP_SYS_RESOURCE), and the runtime then fails the container's setrlimit. Podman itself
//! falls back to 32768 processes there, so that is the most a container can get.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::agent::binary;
use crate::support::repo_root;

/// The tag of the image the tests build (never the `make image` one).
pub const TEST_IMAGE: &str = "localhost/gpuship:suite";

/// A podman command with the runtime this machine needs.
pub fn podman() -> Command {
    let mut command = Command::new("podman");
    command.args(["--runtime", "runc"]);
    command
}

/// Runs podman with `args`; panics with its output unless it succeeds.
pub fn podman_ok(args: &[&str]) -> String {
    let output = podman()
        .args(args)
        .output()
        .expect("podman (make testenv installs it)");
    assert!(
        output.status.success(),
        "podman {args:?} failed:\n{}",
        text(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Stdout and stderr of a finished command.
pub fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// The resource limits every container of the tests runs with (module doc).
pub fn limits() -> [String; 4] {
    let mut nofile = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes the struct we own.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut nofile) },
        0
    );
    [
        "--ulimit".into(),
        format!("nofile={0}:{0}", nofile.rlim_max.min(1 << 20)),
        "--ulimit".into(),
        // The process limit counts every process of the uid on the machine, not only the
        // container's: as high as podman can give.
        "nproc=32768:32768".into(),
    ]
}

/// Builds [`TEST_IMAGE`] once per test run with the documented script, from the agent binary
/// this run's tests use (the release build of `make image` would cost minutes of CI and the
/// same recipe). Returns the build's output.
pub fn test_image() -> &'static str {
    static BUILT: OnceLock<String> = OnceLock::new();
    BUILT.get_or_init(|| {
        let context = tempfile::Builder::new()
            .prefix("gpuship-image-")
            .tempdir()
            .expect("tempdir");
        // The previous run's image, so that runs do not pile up unnamed images.
        let _ = podman().args(["rmi", "--force", TEST_IMAGE]).output();
        let output = Command::new(repo_root().join("deploy/container/build.sh"))
            .args(["--binary", binary(), "--tag", TEST_IMAGE, "--context"])
            .arg(context.path())
            .output()
            .expect("running deploy/container/build.sh");
        assert!(
            output.status.success(),
            "build.sh failed:\n{}",
            text(&output)
        );
        text(&output)
    })
}

/// A container, removed (killed if still running) when dropped.
pub struct Container {
    pub name: String,
}

impl Container {
    /// `podman run -d --name <unique> <args>`.
    pub fn run(prefix: &str, args: &[String]) -> Container {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let mut all = vec![
            "run".to_string(),
            "-d".into(),
            "--name".into(),
            name.clone(),
        ];
        all.extend(limits());
        all.extend(args.iter().cloned());
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        podman_ok(&all);
        Container { name }
    }

    /// What the container printed so far.
    pub fn logs(&self) -> String {
        let output = podman()
            .args(["logs", &self.name])
            .output()
            .expect("podman logs");
        text(&output)
    }

    /// Waits until its log contains `needle`; panics with the log after `limit`.
    pub fn wait_for_log(&self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.logs().contains(needle) {
            assert!(
                Instant::now() < deadline && self.running(),
                "{} never logged {needle:?}:\n{}",
                self.name,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether its process still runs.
    pub fn running(&self) -> bool {
        podman_ok(&["inspect", "--format", "{{.State.Running}}", &self.name]).trim() == "true"
    }

    /// The host pid of its first process.
    pub fn pid(&self) -> u32 {
        let pid = podman_ok(&["inspect", "--format", "{{.State.Pid}}", &self.name]);
        pid.trim().parse().expect("a pid")
    }

    /// The host address a published container port is reachable on.
    pub fn port(&self, container_port: u16) -> String {
        let text = podman_ok(&["port", &self.name, &format!("{container_port}/tcp")]);
        text.lines()
            .next()
            .expect("a published port")
            .trim()
            .to_string()
    }

    /// Sends SIGTERM, waits up to `grace` for the exit (then SIGKILL, as the kubelet does
    /// after terminationGracePeriodSeconds) and returns the exit code.
    pub fn stop(&self, grace: Duration) -> i32 {
        let grace = grace.as_secs().to_string();
        podman_ok(&["stop", "--time", &grace, &self.name]);
        self.exit_code()
    }

    /// Waits for it to exit on its own; returns the exit code.
    pub fn exit_code(&self) -> i32 {
        podman_ok(&["wait", &self.name])
            .trim()
            .parse()
            .expect("an exit code")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman()
            .args(["rm", "--force", "--time", "0", &self.name])
            .output();
    }
}

/// A root filesystem for `program` (copied in as `/usr/local/bin/<name>`) with the shared
/// libraries `ldd` names for it and for `libraries`, at the paths the loader resolves.
pub fn rootfs(dir: &Path, program: &Path, name: &str, libraries: &[&Path]) -> PathBuf {
    let bin = dir.join("usr/local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(program, bin.join(name)).expect("copying the program");
    for object in std::iter::once(program).chain(libraries.iter().copied()) {
        let output = Command::new("ldd").arg(object).output().expect("ldd");
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let path = match words.as_slice() {
                [_, "=>", path, ..] if path.starts_with('/') => path,
                [path, ..] if path.starts_with('/') => path,
                _ => continue,
            };
            let target = dir.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::copy(path, &target).unwrap_or_else(|e| panic!("copying {path}: {e}"));
        }
    }
    dir.to_path_buf()
}
