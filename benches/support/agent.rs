//! Starting the agent under test for the benches that drive real probes: a config with only the
//! CUDA source on the stand-in library, one sink, metrics and periodic stats off.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Starts `gpuship run` in `dir` (config, state, `summary.json` there) tracing `libcuda` with
/// `cuda_extra` added to `[sources.cuda]` and `sink` as the body of its one `[[sinks]]` table;
/// returns once capture has started.
pub fn start_agent(dir: &Path, libcuda: &Path, cuda_extra: &str, sink: &str) -> Child {
    let config = format!(
        "[agent]\nprogress_interval_secs = 0\nstate_dir = \"{}\"\n[metrics]\nenabled = false\n\
         [sources.xid]\ntracepoint = false\nkmsg = false\n\
         [sources.cuda]\nlibraries = [\"{}\"]\nfunctions = [\"default\"]\n{cuda_extra}\
         [[sinks]]\n{sink}\n",
        dir.join("state").display(),
        libcuda.display()
    );
    let path = dir.join("load.toml");
    std::fs::write(&path, config).expect("config");
    let mut child = Command::new(super::fixtures::agent_binary())
        .args(["run", "--config"])
        .arg(&path)
        .arg("--summary-json")
        .arg(dir.join("summary.json"))
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("agent");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("capture started") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("agent started");
    child
}

/// The `cuda` ring's `(emitted, lost_in_kernel)` from the agent's `summary.json` in `dir`.
pub fn cuda_ring(dir: &Path) -> (u64, u64) {
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).expect("summary"))
            .expect("json");
    let ring = summary["accounting"]["rings"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["ring"] == "cuda"))
        .cloned()
        .unwrap_or_default();
    let count = |name: &str| ring[name].as_u64().unwrap_or(0);
    // Calls in `stats` mode are not ring records: they count as traced calls (aggregated) or
    // as lost (the statistics table was full). A failed stats-mode call is both a row and
    // aggregated; the workloads here make none.
    (
        count("emitted") + count("aggregated") + count("stats_full"),
        count("lost_in_kernel") + count("stats_full"),
    )
}
