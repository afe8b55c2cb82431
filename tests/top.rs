//! `gpuship top` against the real agent, without a terminal: `--once` prints the workload's
//! functions with their exact totals and its process as plain text, escapes control characters,
//! and fails with a message when nothing listens. `/live` itself is checked against the same
//! totals. The live view in a real terminal (tmux): `top/terminal.rs`.

mod terminal;

use std::collections::BTreeMap;
use std::process::{Command, Output};
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

/// An agent on the stand-in with `FUNCTIONS` that also reads the kernel log (XIDs), with its
/// fixtures and data folder, which must outlive it.
fn agent_with_kmsg() -> (Fixtures, tempfile::TempDir, Agent) {
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures
        .cuda_config(data.path(), FUNCTIONS)
        .replace("kmsg = false", "kmsg = true");
    let agent = Agent::start(&config, &[]);
    (fixtures, data, agent)
}

fn top_once(agent: &str) -> Output {
    Command::new(binary())
        .args(["top", "--once", "--interval", "200ms", "--agent", agent])
        .output()
        .expect("running gpuship top --once")
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
    let (fixtures, _data, agent) = agent_with_kmsg();
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
