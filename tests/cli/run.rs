//! `gpuship run` as users meet it: refused with instructions without BPF capabilities, logs
//! without colour codes in a pipe or as JSON lines, and a sink that cannot start or stops with
//! an error named on stderr with a non-zero exit.

use std::process::Command;

use super::{gpuship, write_config};
use crate::support;
use crate::support::agent::{binary, Agent};

#[test]
fn without_bpf_capabilities_run_refuses_with_instructions() {
    let _shared = support::shared();
    let output = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(binary())
        .args(["run"])
        .current_dir("/")
        .output()
        .expect("setpriv (util-linux)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)"),
        "{stderr}"
    );
}

/// `gpuship run -- true` with the kernel log as the only source and a blackhole sink: a short
/// real run that logs. Returns (exit code, stderr as bytes).
fn short_run(extra: &[&str]) -> (i32, Vec<u8>) {
    let (dir, path) = write_config("");
    let config = format!(
        "[agent]\nstate_dir = \"{}\"\n[sources.xid]\ntracepoint = false\nkmsg = true\n\
         [sources.cuda]\nenabled = false\n[metrics]\naddress = \"127.0.0.1:0\"\n\
         [[sinks]]\ntype = \"blackhole\"\n",
        dir.path().join("state").display()
    );
    std::fs::write(&path, config).unwrap();
    let output = Command::new(binary())
        .args(extra)
        .args(["run", "--config", &path, "--", "true"])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .output()
        .expect("run gpuship");
    (output.status.code().unwrap_or(-1), output.stderr)
}

#[test]
fn logs_have_no_colour_codes_when_stderr_is_not_a_terminal() {
    let _shared = support::shared();
    let (code, stderr) = short_run(&[]);
    let text = String::from_utf8_lossy(&stderr);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("capture started"), "{text}");
    assert!(!stderr.contains(&0x1b), "escape codes in a pipe:\n{text:?}");
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    let _shared = support::shared();
    let (code, stderr) = short_run(&["--log-format", "json"]);
    let text = String::from_utf8_lossy(&stderr);
    assert_eq!(code, 0, "{text}");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: not JSON: {line:?}"))
        })
        .collect();
    let message = |m: &str| {
        lines
            .iter()
            .find(|l| l["fields"]["message"] == m)
            .unwrap_or_else(|| panic!("no {m:?} in\n{text}"))
    };
    assert_eq!(message("capture started")["level"], "INFO");
    assert!(
        message("metrics listening on /metrics, /health and /live")["fields"]["address"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:"))
    );
    // The end-of-run summary, plain text otherwise, is one more JSON line.
    assert!(message("run summary")["fields"]["summary"].is_string());
    assert!(!stderr.contains(&0x1b), "{text:?}");

    // A start error is a JSON line too.
    let output = Command::new(binary())
        .args([
            "--log-format",
            "json",
            "run",
            "--config",
            "/nonexistent.toml",
        ])
        .output()
        .expect("run gpuship");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect();
    let error = lines.last().unwrap_or_else(|| panic!("{stderr}"));
    assert_eq!(error["level"], "ERROR", "{stderr}");
    assert!(
        error["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("/nonexistent.toml")),
        "{stderr}"
    );
}

/// Sources that need no BPF: XIDs from the kernel log only.
const KMSG_ONLY: &str = "[sources.xid]\ntracepoint = false\n[sources.cuda]\nenabled = false\n\
                         [sources.driver]\nioctl = false\n";

#[test]
fn run_exits_non_zero_naming_a_sink_that_cannot_start() {
    let _shared = support::shared();
    // The header secret holds a CR/LF: it cannot be sent, so the sink could never deliver.
    // Before, the sink died silently at start, /health said ok and its XIDs were dropped.
    let (_dir, path) = write_config(&format!(
        "{KMSG_ONLY}\n[[sinks]]\ntype = \"otlp\"\nname = \"collector\"\n\
         endpoint = \"http://127.0.0.1:1\"\n[sinks.headers]\n\
         authorization = {{ env = \"GPUSHIP_TEST_CRLF_TOKEN\" }}\n\
         [metrics]\naddress = \"127.0.0.1:0\"\n"
    ));
    let output = Command::new(binary())
        .args(["run", "--config", &path])
        .env("GPUSHIP_TEST_CRLF_TOKEN", "Bearer s3cret\r\nX-Injected: 1")
        .env("NO_COLOR", "1")
        .output()
        .expect("run gpuship");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "sink collector cannot start: header authorization: the value contains a line \
             break (CR/LF); not a valid header value"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("capture started"), "{stderr}");
    assert!(
        !stderr.contains("s3cret"),
        "the secret is never printed:\n{stderr}"
    );
    // validate makes run's start check too, with the same words; --syntax-only checks the
    // file alone.
    let output = Command::new(binary())
        .args(["validate", "--config", &path])
        .env("GPUSHIP_TEST_CRLF_TOKEN", "Bearer s3cret\r\nX-Injected: 1")
        .output()
        .expect("run gpuship");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{path}: sink collector cannot start: header authorization: the value contains a \
             line break (CR/LF); not a valid header value"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
    let (code, stdout, stderr) = gpuship(&["validate", "--syntax-only", "--config", &path]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("valid (1 sink(s))"), "{stdout}");
}

#[test]
fn a_sink_that_stops_with_an_error_says_so_at_once_and_the_run_ends_non_zero() {
    let _shared = support::shared();
    // Passes every check before start; librdkafka refuses the property when the producer is
    // created inside the running sink.
    let agent = Agent::start(
        &format!(
            "{KMSG_ONLY}\n[[sinks]]\ntype = \"kafka\"\nname = \"events\"\n\
             brokers = \"127.0.0.1:1\"\n[sinks.librdkafka_options]\n\"no.such.property\" = \"1\"\n"
        ),
        &[],
    );
    agent.wait_for_log("sink stopped", std::time::Duration::from_secs(30));
    let log = agent.log();
    let line = log
        .lines()
        .find(|l| l.contains("sink stopped"))
        .expect("logged");
    assert!(
        line.contains("ERROR") && line.contains("sink=events"),
        "{line}"
    );
    assert!(line.contains("events: cannot start"), "{line}");
    let stopped = agent.stop();
    assert_eq!(stopped.status.code(), Some(1), "{}", stopped.log);
    assert!(
        stopped
            .log
            .contains("gpuship run: sink(s) failed: events: cannot start"),
        "{}",
        stopped.log
    );
}
