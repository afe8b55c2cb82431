//! `gpuship top` against the real agent, in a real terminal (tmux): the workload's functions
//! with their exact totals, its process, an XID as it arrives, zero loss; `q` quits and gives
//! the terminal back; an unreachable agent is said and retried. `--once` prints the same
//! totals as plain text, and fails with a message when nothing listens. `/live` itself is
//! checked against the same totals.

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::agent::{binary, data_dir, Agent};
use crate::support::metrics::http;
use crate::support::{kmsg, Fixtures};

/// Probes every function of the workload's sequence.
const FUNCTIONS: &str = r#"["default", "cuDriverGetVersion", "cuDeviceGetCount"]"#;

/// (calls, errors) per function for `sequence 2` with cuCtxSynchronize forced to fail: each
/// function once per pass, except the two allocations (one too large) and two frees.
fn expected_totals() -> BTreeMap<&'static str, (u64, u64)> {
    let mut totals: BTreeMap<&str, (u64, u64)> = [
        "cuInit",
        "cuDevicePrimaryCtxRetain",
        "cuCtxCreate_v2",
        "cuMemAllocManaged",
        "cuMemAllocAsync",
        "cuMemcpyHtoD_v2",
        "cuMemcpyDtoH_v2",
        "cuMemcpyDtoD_v2",
        "cuMemcpyAsync",
        "cuMemcpyHtoDAsync_v2",
        "cuMemcpyDtoHAsync_v2",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchKernel_ptsz",
        "cuGraphLaunch",
        "cuStreamSynchronize",
        "cuStreamSynchronize_ptsz",
        "cuEventSynchronize",
        "cuModuleLoadData",
        "cuLibraryLoadData",
        "cuCtxSynchronize_v2",
        "cuMemFreeAsync",
        "cuCtxDestroy_v2",
        "cuDriverGetVersion",
        "cuDeviceGetCount",
    ]
    .into_iter()
    .map(|f| (f, (2, 0)))
    .collect();
    totals.insert("cuMemAlloc_v2", (4, 2));
    totals.insert("cuMemFree_v2", (4, 0));
    totals.insert("cuCtxSynchronize", (2, 2));
    totals
}

fn run_sequence(fixtures: &Fixtures) -> u32 {
    let (pid, stdout) = fixtures.run_workload(
        &["sequence", "2"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")],
    );
    assert_eq!(stdout.trim(), "workload: sequence iterations=2 calls=60");
    pid
}

/// The rows of the function table found in `screen`: name -> (total calls, total errors).
fn function_totals(screen: &str) -> BTreeMap<String, (u64, u64)> {
    screen
        .lines()
        .filter(|l| l.starts_with("cu"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            match cells.as_slice() {
                [name, _, _, _, calls, errors] => Some((
                    name.to_string(),
                    (calls.parse().ok()?, errors.parse().ok()?),
                )),
                _ => None,
            }
        })
        .collect()
}

fn expected_as_strings() -> BTreeMap<String, (u64, u64)> {
    expected_totals()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// The process table row of `pid`: [pid, comm, calls/s, calls, errors].
fn process_row(screen: &str, pid: u32) -> Option<Vec<String>> {
    screen
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|cells| cells.len() == 5 && cells[0] == pid.to_string())
}

const NO_LOSS: &str =
    "lost: kernel 0 sink_dropped 0 sink_failed 0 decode 0 kmsg_gaps 0 unmatched 0 inflight_full 0";

/// A tmux session of our own (own server socket, no user config), killed by name on drop.
struct Tmux {
    name: String,
}

impl Tmux {
    /// Runs `command` in a detached 200x50 session. When the command ends, the session says
    /// so and stays, so its screen can be read.
    fn start(command: &str) -> Tmux {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "gpuship-top-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let tmux = Tmux { name };
        let script = format!("{command}; echo \"top exited with $?\"; sleep 120");
        let status = tmux
            .command()
            .args([
                "new-session",
                "-d",
                "-s",
                &tmux.name,
                "-x",
                "200",
                "-y",
                "50",
            ])
            .arg(script)
            .status()
            .expect("tmux (make testenv installs it)");
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.args(["-L", &self.name, "-f", "/dev/null"]);
        command
    }

    fn screen(&self) -> String {
        let output = self
            .command()
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits until `done` holds for the screen; panics with the last screen.
    fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("the screen never showed {what}:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn send_keys(&self, keys: &str) {
        let status = self
            .command()
            .args(["send-keys", "-t", &self.name, keys])
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .command()
            .args(["kill-session", "-t", &self.name])
            .status();
    }
}

fn top(agent: &str, interval: &str) -> String {
    format!("{} top --agent {agent} --interval {interval}", binary())
}

fn top_once(agent: &str) -> Output {
    Command::new(binary())
        .args(["top", "--once", "--interval", "200ms", "--agent", agent])
        .output()
        .expect("running gpuship top --once")
}

#[test]
fn the_live_view_shows_calls_processes_xids_and_no_loss_and_q_quits() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures
        .cuda_config(data.path(), FUNCTIONS)
        .replace("kmsg = false", "kmsg = true");
    let agent = Agent::start(&config, &[]);
    let address = agent.metrics_address();
    let tmux = Tmux::start(&top(&address, "200ms"));
    tmux.wait_for("an empty view", |s| {
        s.contains(&format!("gpuship top  agent {address}  up "))
            && s.contains("(no CUDA calls yet)")
            && s.contains("(no XIDs since the agent started)")
    });

    let pid = run_sequence(&fixtures);
    kmsg(&format!(
        "<3>NVRM: Xid (PCI:0000:7e:00): 79, pid={pid}, name=cuda_workload, GPU has fallen off the bus."
    ));
    let expected = expected_as_strings();
    // The kernel log is the host's: other XIDs may show too; this bus id is only ours.
    let screen = tmux.wait_for("the workload's totals and its XID", |s| {
        function_totals(s) == expected && s.contains("0000:7e:00.0")
    });
    assert_eq!(
        process_row(&screen, pid).map(|cells| [
            cells[1].clone(),
            cells[3].clone(),
            cells[4].clone()
        ]),
        Some(["cuda_workload".to_string(), "60".into(), "4".into()]),
        "{screen}"
    );
    assert!(screen.lines().any(|l| l == NO_LOSS), "{screen}");
    let xids: u64 = screen
        .lines()
        .find_map(|l| l.split("  XIDs ").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .expect("XID count in the header");
    assert!(xids >= 1, "the header counts the XID:\n{screen}");
    let xid = screen
        .lines()
        .find(|l| l.contains("0000:7e:00.0"))
        .expect("XID row");
    assert!(
        xid.ends_with(
            "   79 GPU fell off the PCIe bus  fatal   0000:7e:00.0 GPU has fallen off the bus."
        ),
        "{xid}"
    );
    assert!(screen.contains("every 200ms  q quits"), "{screen}");

    tmux.send_keys("q");
    let screen = tmux.wait_for("top exiting", |s| s.contains("top exited with 0"));
    // The alternate screen is gone: what remains is the shell's normal screen.
    assert!(!screen.contains("FUNCTION"), "{screen}");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 60);
}

#[test]
fn once_and_live_give_the_exact_totals() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let agent = Agent::start(&fixtures.cuda_config(data.path(), FUNCTIONS), &[]);
    let address = agent.metrics_address();
    let pid = run_sequence(&fixtures);

    // The consumer publishes every 50 ms after a drain: wait for the last call to show.
    let deadline = Instant::now() + Duration::from_secs(20);
    let live = loop {
        let (status, body) = http(&address, "GET /live HTTP/1.1\r\n\r\n");
        assert_eq!(status, 200);
        let live: serde_json::Value = serde_json::from_str(&body).expect("/live is JSON");
        if live["processes"][0]["calls"] == 60 {
            break live;
        }
        assert!(Instant::now() < deadline, "calls never reached 60: {live}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(live["version"], 1);
    let functions: BTreeMap<String, (u64, u64)> = live["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| {
            let n = |k: &str| f[k].as_u64().expect("number");
            (
                f["function"].as_str().expect("name").to_string(),
                (n("calls"), n("errors")),
            )
        })
        .collect();
    assert_eq!(functions, expected_as_strings());
    assert!(live["functions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["duration_ns_sum"].as_u64() > Some(0)));
    assert_eq!(
        live["processes"],
        serde_json::json!([{"pid": pid, "comm": "cuda_workload", "calls": 60, "errors": 4}])
    );
    assert_eq!(live["xids"], serde_json::json!([]));
    let cuda = &live["accounting"]["rings"][1];
    assert_eq!(
        (cuda["ring"].as_str(), cuda["received"].as_u64()),
        (Some("cuda"), Some(60))
    );

    let output = top_once(&address);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!text.contains('\x1b'), "plain text: {text}");
    assert_eq!(function_totals(&text), expected_as_strings(), "{text}");
    let row = process_row(&text, pid).expect("process row");
    // Nothing ran between the two polls: the rate is exactly zero.
    assert_eq!(row[1..], ["cuda_workload", "0.0", "60", "4"], "{text}");
    assert!(text.lines().any(|l| l == NO_LOSS), "{text}");
    assert!(
        text.contains("events/s 0.0  cuda calls/s 0.0  processes 1  XIDs 0"),
        "{text}"
    );
    agent.stop();
}

#[test]
fn once_against_a_closed_port_fails_and_says_why() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().unwrap().port()
    };
    let output = top_once(&format!("127.0.0.1:{port}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(output.stdout.is_empty());
    assert!(
        stderr.contains(&format!(
            "cannot reach the agent at 127.0.0.1:{port}: Connection refused"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("is `gpuship run` running"), "{stderr}");
}

#[test]
fn the_live_view_says_when_the_agent_is_unreachable_and_retries_until_it_comes() {
    let _shared = support::shared();
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().unwrap().port()
    };
    let address = format!("127.0.0.1:{port}");
    let tmux = Tmux::start(&top(&address, "200ms"));
    tmux.wait_for("the agent being unreachable", |s| {
        s.contains(&format!(
            "agent unreachable: cannot reach the agent at {address}"
        ))
    });

    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = format!(
        "{}\n[metrics]\naddress = \"{address}\"\n",
        fixtures.cuda_config(data.path(), FUNCTIONS)
    );
    let agent = Agent::start(&config, &[]);
    let pid = run_sequence(&fixtures);
    let screen = tmux.wait_for("the agent's view", |s| {
        process_row(s, pid).is_some_and(|cells| cells[3] == "60")
    });
    assert!(!screen.contains("unreachable"), "{screen}");
    tmux.send_keys("C-c");
    tmux.wait_for("top exiting on Ctrl-C", |s| s.contains("top exited with 0"));
    agent.stop();
}

/// Runs the workload once through a symlink named `name`, so that its process name (the
/// basename of what was executed, 15 bytes at most) is `name`.
fn run_named(fixtures: &Fixtures, name: &str) {
    let link = fixtures.dir.path().join(name);
    std::os::unix::fs::symlink(&fixtures.workload, &link).expect("symlink");
    let output = Command::new(&link)
        .args(["sequence", "1"])
        .env("CUDA_LIB", &fixtures.libcuda)
        .output()
        .expect("running the renamed workload");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("calls=30"), "{stdout}");
}

#[test]
fn once_escapes_control_characters_in_process_names_and_xid_messages() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures
        .cuda_config(data.path(), FUNCTIONS)
        .replace("kmsg = false", "kmsg = true");
    let agent = Agent::start(&config, &[]);
    let address = agent.metrics_address();
    // Screen clear, CR, DEL, a C1 CSI; and an OSC 52 clipboard write ended by BEL.
    for name in ["\x1b[2J\r\x7f\u{9b}w", "\x1b]52;c;YQ==\x07"] {
        run_named(&fixtures, name);
    }
    kmsg(
        "<3>NVRM: Xid (PCI:0000:7d:00): 13, pid=1, name=\x1b[2Jx, Graphics Exception \
         \x1b]52;c;aGk=\x07 ESR \r\x1b[31m red \u{9b}1J\x7f end",
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = http(&address, "GET /live HTTP/1.1\r\n\r\n");
        let live: serde_json::Value = serde_json::from_str(&body).expect("/live is JSON");
        let xid_seen = live["xids"]
            .as_array()
            .is_some_and(|x| x.iter().any(|x| x["pci_bus_id"] == "0000:7d:00.0"));
        let calls: u64 = live["processes"]
            .as_array()
            .map_or(0, |p| p.iter().filter_map(|p| p["calls"].as_u64()).sum());
        if xid_seen && calls == 60 {
            // The raw text really is in the agent's answer: only the printing escapes it.
            assert!(body.contains("\\u001b]52;c;YQ==\\u0007"), "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never saw both workloads and the XID: {live}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let output = top_once(&address);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    let raw: Vec<char> = text
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(raw.is_empty(), "control characters {raw:?} in:\n{text}");
    // Names are escaped, then cut to their 16-character column.
    assert!(text.contains(" \\x1b[2J\\r\\x7f\\u… "), "{text}");
    assert!(text.contains(" \\x1b]52;c;YQ==\\… "), "{text}");
    let xid = text
        .lines()
        .find(|l| l.contains("0000:7d:00.0"))
        .expect("XID row");
    assert!(
        xid.ends_with(
            "Graphics Exception \\x1b]52;c;aGk=\\x07 ESR \\r\\x1b[31m red \\u{9b}1J\\x7f end"
        ),
        "{xid}"
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
}

#[test]
fn closing_the_terminal_ends_top_and_a_quit_signal_restores_it() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().unwrap().port()
    };
    let address = format!("127.0.0.1:{port}");
    // The pid of `top`: the only child of the pane's shell.
    let top_pid = |tmux: &Tmux| -> u32 {
        let output = tmux
            .command()
            .args(["list-panes", "-t", &tmux.name, "-F", "#{pane_pid}"])
            .output()
            .expect("tmux list-panes");
        let shell = String::from_utf8_lossy(&output.stdout).trim().to_string();
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .expect("the pane's shell");
        children.trim().parse().expect("one child: top")
    };
    let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    let waiting = |what: &str| format!("agent unreachable: cannot reach the agent at {what}");

    // SIGTERM: top ends with status 0 and the shell's screen is back.
    let tmux = Tmux::start(&top(&address, "200ms"));
    tmux.wait_for("the agent being unreachable", |s| {
        s.contains(&waiting(&address))
    });
    let pid = top_pid(&tmux);
    let status = Command::new("kill").arg(pid.to_string()).status().unwrap();
    assert!(status.success());
    let screen = tmux.wait_for("top exiting on SIGTERM", |s| {
        s.contains("top exited with 0")
    });
    assert!(!screen.contains("unreachable"), "{screen}");

    // The terminal goes away (the tmux server dies): top notices and ends, it does not spin.
    let tmux = Tmux::start(&top(&address, "200ms"));
    tmux.wait_for("the agent being unreachable", |s| {
        s.contains(&waiting(&address))
    });
    let pid = top_pid(&tmux);
    let _ = tmux.command().arg("kill-server").status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "top {pid} outlived its terminal");
        std::thread::sleep(Duration::from_millis(100));
    }
}
