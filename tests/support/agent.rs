//! Starting the real `gpuship` binary and stopping it by pid.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running agent. Dropping it kills the process (tests stop it with [`Agent::stop`]).
pub struct Agent {
    child: Option<Child>,
    lines: Arc<Mutex<Vec<String>>>,
    summary_path: PathBuf,
    _dir: tempfile::TempDir,
}

/// What a stopped agent left behind.
pub struct Stopped {
    /// The JSON written by --summary-json.
    pub outcome: serde_json::Value,
    /// Everything it logged.
    pub log: String,
    /// Its exit status.
    pub status: std::process::ExitStatus,
}

/// The agent binary built by cargo for the tests.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_gpuship")
}

impl Agent {
    /// Starts `gpuship run --config <config> <extra>` and waits until it logs "capture started".
    pub fn start(config: &str, extra: &[&str]) -> Agent {
        Self::start_with_env(config, extra, &[])
    }

    /// [`Agent::start`] with extra environment variables (credentials, ...).
    pub fn start_with_env(config: &str, extra: &[&str], env: &[(&str, &str)]) -> Agent {
        let dir = tempfile::tempdir().expect("tempdir");
        let config_path = dir.path().join("gpuship.toml");
        // Parallel tests must not fight over the default metrics port.
        let config = if config.contains("[metrics]") {
            config.to_string()
        } else {
            format!("{config}\n[metrics]\naddress = \"127.0.0.1:0\"\n")
        };
        // Tests run side by side, each with its own stand-in library: an agent attaches only
        // the files its test names, unless the test is about discovery.
        let config = if config.contains("discover_libraries") {
            config
        } else if config.contains("[sources.cuda]\n") {
            config.replacen(
                "[sources.cuda]\n",
                "[sources.cuda]\ndiscover_libraries = false\n",
                1,
            )
        } else {
            format!("{config}\n[sources.cuda]\ndiscover_libraries = false\n")
        };
        // Each agent keeps its spool in its own folder.
        let state = format!("state_dir = \"{}\"\n", dir.path().join("state").display());
        let config = if config.contains("state_dir") {
            config
        } else if config.contains("[agent]\n") {
            config.replacen("[agent]\n", &format!("[agent]\n{state}"), 1)
        } else {
            format!("[agent]\n{state}\n{config}")
        };
        std::fs::write(&config_path, config).expect("writing config");
        let summary_path = dir.path().join("summary.json");
        let mut command = Command::new(binary());
        command
            .arg("--log-level=info")
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .arg("--summary-json")
            .arg(&summary_path)
            .args(extra)
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("starting gpuship");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (started_tx, started_rx) = mpsc::channel();
        for stream in [
            Box::new(child.stderr.take().expect("stderr")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stdout.take().expect("stdout")),
        ] {
            let lines = lines.clone();
            let started_tx = started_tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let line = strip_ansi(&line);
                    if line.contains("capture started") {
                        let _ = started_tx.send(());
                    }
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let mut agent = Agent {
            child: Some(child),
            lines,
            summary_path,
            _dir: dir,
        };
        if started_rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let log = agent.log();
            let _ = agent.child.as_mut().map(Child::kill);
            panic!("agent did not start capturing:\n{log}");
        }
        agent
    }

    /// The pid of the agent process.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Everything logged so far.
    pub fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits until the log contains `needle`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.log().contains(needle) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("agent never logged {needle:?}:\n{}", self.log());
    }

    /// The address the metrics endpoint listens on (from the log).
    pub fn metrics_address(&self) -> String {
        self.wait_for_log("metrics listening", Duration::from_secs(10));
        let log = self.log();
        let line = log
            .lines()
            .find(|l| l.contains("metrics listening"))
            .expect("metrics line");
        line.split("address=")
            .nth(1)
            .expect("address field")
            .split_whitespace()
            .next()
            .expect("value")
            .to_string()
    }

    /// Sends SIGTERM to the agent's pid and waits for it to drain and exit.
    pub fn stop(mut self) -> Stopped {
        let child = self.child.as_mut().expect("running");
        // SAFETY: kill(2) on the pid of a child we own and have not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        self.wait()
    }

    /// Kills the agent with SIGKILL (no drain, no summary) and returns its log.
    pub fn kill_hard(mut self) -> String {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
        std::thread::sleep(Duration::from_millis(100));
        self.log()
    }

    /// Waits for the agent to exit on its own (traced command or pid ended).
    pub fn wait(mut self) -> Stopped {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("agent did not exit:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Let the reader threads take the last lines.
        std::thread::sleep(Duration::from_millis(100));
        let log = self.log();
        let text = std::fs::read_to_string(&self.summary_path)
            .unwrap_or_else(|e| panic!("no summary JSON ({e}); status {status:?}; log:\n{log}"));
        let outcome = serde_json::from_str(&text).expect("summary JSON parses");
        Stopped {
            outcome,
            log,
            status,
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Stopped {
    /// A ring's counters from the final accounting.
    pub fn ring(&self, name: &str) -> &serde_json::Value {
        self.outcome["accounting"]["rings"]
            .as_array()
            .and_then(|rings| rings.iter().find(|r| r["ring"] == name))
            .unwrap_or_else(|| panic!("no ring {name} in {}", self.outcome))
    }

    /// A sink's counters for one kind.
    pub fn sink(&self, kind: &str) -> &serde_json::Value {
        self.outcome["accounting"]["sinks"]
            .as_array()
            .and_then(|sinks| sinks.iter().find(|s| s["kind"] == kind))
            .unwrap_or_else(|| panic!("no sink for {kind} in {}", self.outcome))
    }

    /// The counters of the sink named `name` for one kind.
    pub fn sink_named(&self, name: &str, kind: &str) -> serde_json::Value {
        self.outcome["accounting"]["sinks"]
            .as_array()
            .and_then(|sinks| {
                sinks
                    .iter()
                    .find(|s| s["sink"] == name && s["kind"] == kind)
            })
            .unwrap_or_else(|| panic!("no sink {name} for {kind} in {}", self.outcome))
            .clone()
    }

    /// Asserts the accounting identities hold exactly and nothing was lost.
    pub fn assert_nothing_lost(&self, ring: &str, kind: &str) -> u64 {
        let ring = self.ring(ring);
        let sink = self.sink(kind);
        assert_eq!(ring["lost_in_kernel"], 0, "{}", self.outcome);
        assert_eq!(ring["decode_errors"], 0, "{}", self.outcome);
        assert_eq!(ring["unmatched_returns"], 0, "{}", self.outcome);
        assert_eq!(ring["inflight_full"], 0, "{}", self.outcome);
        assert_eq!(ring["emitted"], ring["received"], "{}", self.outcome);
        assert_eq!(ring["pending_in_ring"], 0, "{}", self.outcome);
        assert_eq!(
            sink["delivered"], sink["received"],
            "{}\n{}",
            self.outcome, self.log
        );
        assert_eq!(sink["in_flight"], 0, "{}", self.outcome);
        assert_eq!(sink["failed"], 0, "{}", self.outcome);
        assert_eq!(sink["dropped"], 0, "{}", self.outcome);
        sink["delivered"].as_u64().expect("number")
    }
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A fresh data folder for one test.
pub fn data_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("gpuship-data-")
        .tempdir()
        .expect("tempdir")
}
