//! Shared helpers for the integration tests: build the C stand-in libcuda and workload, start
//! and stop the real agent binary, read its Parquet output through arrow and DuckDB.
//!
//! Every test gets its own copy of the stand-in library: uprobes attach to an inode, so agents
//! of tests running in parallel never see each other's calls. What else tests running in one
//! process could share (the machine's CPUs, the kernel log) is arbitrated in [`serial`].

pub mod agent;
pub mod cuda_rows;
pub mod cuda_stats;
pub mod grafana_schema;
pub mod kafka;
pub mod lake;
pub mod markdown;
pub mod metrics;
pub mod operator_kit;
pub mod otlp_metrics;
pub mod peers;
pub mod rest_catalog;
pub mod serial;

pub use serial::{exclusive, shared};

use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes one line to the kernel log, as a driver would (root; `<N>` sets the level).
pub fn kmsg(line: &str) {
    use std::io::Write;
    let mut kmsg = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/kmsg")
        .expect("open /dev/kmsg (root)");
    kmsg.write_all(format!("{line}\n").as_bytes())
        .expect("write /dev/kmsg");
}

/// Polls `done` every 200 ms until it holds; after `limit` panics with `what` and `context()`
/// (typically the agent's log).
pub fn wait_until(
    limit: std::time::Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
    context: impl Fn() -> String,
) {
    let deadline = std::time::Instant::now() + limit;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}:\n{}",
            context()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Root of the repository.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The stand-in library and workload, built into a fresh folder.
pub struct Fixtures {
    /// Keeps the folder alive.
    pub dir: tempfile::TempDir,
    /// `<dir>/libcuda.so.1`.
    pub libcuda: PathBuf,
    /// `<dir>/cuda_workload`.
    pub workload: PathBuf,
}

impl Fixtures {
    /// Builds the fixtures with `make -C tests/fixtures` (gcc). Panics with make's output.
    pub fn build() -> Fixtures {
        let dir = tempfile::Builder::new()
            .prefix("gpuship-fx-")
            .tempdir()
            .expect("tempdir");
        let output = Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(repo_root().join("tests/fixtures"))
            .arg(format!("OUT={}", dir.path().display()))
            .output()
            .expect("running make for the test fixtures");
        assert!(
            output.status.success(),
            "building fixtures failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Fixtures {
            libcuda: dir.path().join("libcuda.so.1"),
            workload: dir.path().join("cuda_workload"),
            dir,
        }
    }

    /// A workload command using this library.
    pub fn workload(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.workload);
        command.args(args).env("CUDA_LIB", &self.libcuda);
        command
    }

    /// Runs the workload to completion and returns (pid, stdout).
    pub fn run_workload(&self, args: &[&str], env: &[(&str, &str)]) -> (u32, String) {
        let mut command = self.workload(args);
        command
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped());
        let child = command.spawn().expect("starting workload");
        let pid = child.id();
        let output = child.wait_with_output().expect("waiting for workload");
        assert!(
            output.status.success(),
            "workload failed: {:?}",
            output.status
        );
        (pid, String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Agent config of the views' tests: kernel-log XIDs, the default probes on this library
    /// (plus `cuda_extra` lines), GPUs from the fake folder `gpus`, device files under `dev`,
    /// Parquet into `lake` with files closed after a second, every row named `host`.
    pub fn lake_config(
        &self,
        host: &str,
        cuda_extra: &str,
        (gpus, dev, lake): (&Path, &Path, &Path),
    ) -> String {
        format!(
            "[agent]\nprogress_interval_secs = 1\nhost_name = \"{host}\"\n\n\
             [sources.xid]\ntracepoint = false\nkmsg = true\n\n\
             [sources.cuda]\nlibraries = [\"{}\"]\nfunctions = [\"default\"]\nstats = []\n{cuda_extra}\
             drain_interval_ms = 20\n\n\
             [batch]\ntimeout_ms = 200\n\n\
             [enrich]\nnvidia_proc_dir = \"{}\"\ndev_dir = \"{}\"\n\n\
             [[sinks]]\ntype = \"parquet\"\npath = \"{}\"\nmax_file_age_secs = 1\n",
            self.libcuda.display(),
            gpus.display(),
            dev.display(),
            lake.display()
        )
    }

    /// `cuda_workload sequence 1` with `cuCtxSynchronize` failing with 700, held before its
    /// first call until released (so that XIDs naming its pid can be logged first); the gate
    /// file goes in `gate_dir`.
    pub fn gated_sequence(&self, gate_dir: &Path) -> GatedWorkload {
        let child = self
            .workload(&["sequence", "1"])
            .env("WORKLOAD_WAIT_FILE", gate_dir.join("go"))
            .env("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("starting the workload");
        GatedWorkload {
            child,
            gate: gate_dir.join("go"),
        }
    }

    /// Agent config text tracing only this library (no XID sources) into `data`.
    pub fn cuda_config(&self, data: &Path, functions: &str) -> String {
        format!(
            "[agent]\nprogress_interval_secs = 1\n\n[sources.xid]\ntracepoint = false\nkmsg = false\n\n\
             [sources.cuda]\nlibraries = [\"{}\"]\nfunctions = {functions}\nstats = []\ndrain_interval_ms = 20\n\n\
             [batch]\ntimeout_ms = 100\n\n[[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
            self.libcuda.display(),
            data.display()
        )
    }
}

/// A workload waiting for its gate file (`Fixtures::gated_sequence`).
pub struct GatedWorkload {
    child: std::process::Child,
    gate: PathBuf,
}

impl GatedWorkload {
    /// The workload's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Opens the gate, waits for the workload to succeed, then for the agent's next drain.
    pub fn release(self) {
        std::fs::write(&self.gate, b"").expect("writing the gate file");
        let output = self
            .child
            .wait_with_output()
            .expect("waiting for the workload");
        assert!(output.status.success(), "workload: {:?}", output.status);
        std::thread::sleep(std::time::Duration::from_millis(600));
    }
}
