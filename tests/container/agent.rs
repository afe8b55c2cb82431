//! The agent's container as the DaemonSet runs it: the image the tests built, the flags
//! [`DaemonSet::podman_args`] derives from the manifest, the ConfigMap's config with its
//! network sinks left out (nothing here answers them; the Parquet sink writes the lake into the
//! host's state folder), a seccomp profile standing in for containerd's `RuntimeDefault`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::daemonset::DaemonSet;
use super::flags::Host;
use super::podman::{test_image, Container};
use crate::support::metrics::http;

/// The node name the downward API would give (`K8S_NODE_NAME`, the rows' `host`).
pub const NODE_NAME: &str = "gpu-node-container-test";

/// The ConfigMap's config with only its Parquet sinks (one at `<state_dir>/parquet` when it
/// has none), and the container path of the lake.
pub fn config_with_parquet_sinks(config: &str, state_dir: &str) -> (String, String) {
    let mut kept = String::new();
    let mut sink = String::new();
    let mut in_sink = false;
    let mut lake = None;
    let flush = |sink: &mut String, kept: &mut String, lake: &mut Option<String>| {
        if sink.lines().any(|l| l.trim() == "type = \"parquet\"") {
            *lake = lake.take().or_else(|| {
                sink.lines()
                    .find_map(|l| l.trim().strip_prefix("path = "))
                    .map(|p| p.trim_matches('"').to_string())
            });
            kept.push_str(sink);
        }
        sink.clear();
    };
    for line in config.lines() {
        let header = line.trim();
        if header == "[[sinks]]" {
            flush(&mut sink, &mut kept, &mut lake);
            in_sink = true;
        } else if header.starts_with('[') && !header.starts_with("[sinks.") {
            flush(&mut sink, &mut kept, &mut lake);
            in_sink = false;
        }
        let target = if in_sink { &mut sink } else { &mut kept };
        target.push_str(line);
        target.push('\n');
    }
    flush(&mut sink, &mut kept, &mut lake);
    match lake {
        Some(lake) => (kept, lake),
        None => {
            let lake = format!("{state_dir}/parquet");
            (
                format!("{kept}\n[[sinks]]\ntype = \"parquet\"\npath = \"{lake}\"\n"),
                lake,
            )
        }
    }
}

/// Podman's default seccomp profile as containerd's `RuntimeDefault` has it for BPF agents:
/// `bpf` allowed with CAP_BPF and `perf_event_open` with CAP_PERFMON (podman 4.3's profile
/// allows them only with CAP_SYS_ADMIN).
pub fn runtime_default_seccomp(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string("/usr/share/containers/seccomp.json")
        .expect("podman's seccomp profile (containers-common)");
    let mut profile: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rules = profile["syscalls"].as_array_mut().expect("syscalls");
    for rule in rules.iter_mut() {
        let denies = rule["action"] == "SCMP_ACT_ERRNO";
        if let Some(names) = rule["names"].as_array_mut() {
            if denies {
                names.retain(|n| n != "bpf" && n != "perf_event_open");
            }
        }
    }
    rules.retain(|r| r["names"].as_array().is_some_and(|n| !n.is_empty()));
    for (name, cap) in [("bpf", "CAP_BPF"), ("perf_event_open", "CAP_PERFMON")] {
        rules.push(serde_json::json!({
            "names": [name], "action": "SCMP_ACT_ALLOW", "includes": {"caps": [cap]}
        }));
    }
    let path = dir.join("runtime-default.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&profile).unwrap()).unwrap();
    path
}

/// One agent container and the folders standing in for the node.
pub struct AgentContainer {
    pub container: Container,
    /// `127.0.0.1:PORT` of its metrics port.
    pub address: String,
}

impl AgentContainer {
    /// Starts the image as the DaemonSet would, with `state` as the host's state folder;
    /// waits for "capture started" and for the readiness probe to pass.
    pub fn start(ds: &DaemonSet, state: &Path, work: &Path) -> AgentContainer {
        let config_dir = work.join("config");
        std::fs::create_dir_all(&config_dir).unwrap();
        let (config, _) = config_with_parquet_sinks(&ds.config, &ds.state_dir());
        std::fs::write(config_dir.join("gpuship.toml"), config).unwrap();
        let seccomp = runtime_default_seccomp(work);
        let host = Host {
            state,
            config: &config_dir,
            node_name: NODE_NAME,
            runtime_default_seccomp: &seccomp,
        };
        let (mut args, _absent) = ds.podman_args(&host);
        args.push(super::podman::TEST_IMAGE.into());
        args.extend(ds.args.iter().cloned());
        test_image();
        let container = Container::run("gpuship-agent", &args);
        container.wait_for_log("capture started", Duration::from_secs(60));
        let address = container.port(ds.port);
        let agent = AgentContainer { container, address };
        agent.wait_ready(ds);
        agent
    }

    /// Polls `/health` until 200, as the readiness probe does; then every probe path answers
    /// 200. The body is `ok`, or `degraded: ...` naming CUDA processes of the host whose
    /// library the agent cannot attach: with hostPID it sees every process of this machine,
    /// other tests' stand-ins included.
    fn wait_ready(&self, ds: &DaemonSet) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = self.get("/health");
            if status == 200 {
                assert!(body == "ok\n" || body.starts_with("degraded: "), "{body}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "/health answered {status} {body:?}:\n{}",
                self.container.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        for path in &ds.probes {
            assert_eq!(self.get(path).0, 200, "probe {path}");
        }
    }

    /// One GET on the metrics port (status, body); 0 when nothing answers.
    pub fn get(&self, path: &str) -> (u16, String) {
        if std::net::TcpStream::connect(&self.address).is_err() {
            return (0, String::new());
        }
        http(
            &self.address,
            &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        )
    }

    /// SIGTERM with the pod's grace period; the exit code and the log.
    pub fn stop(self, ds: &DaemonSet) -> (i32, String) {
        let code = self.container.stop(Duration::from_secs(ds.grace_secs));
        (code, self.container.logs())
    }
}
