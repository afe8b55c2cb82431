//! The command line as users meet it: `validate`, bad configs, `--help`.

use std::process::Command;

use crate::support;
use crate::support::agent::{binary, Agent};
use crate::support::repo_root;

fn gpuship(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(binary())
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run gpuship");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn write_config(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let path = path.display().to_string();
    (dir, path)
}

#[test]
fn validate_accepts_the_default_and_every_example() {
    let mut paths = vec![repo_root().join("config/gpuship.toml")];
    for entry in std::fs::read_dir(repo_root().join("config/examples")).unwrap() {
        paths.push(entry.unwrap().path());
    }
    for path in paths {
        let (code, stdout, stderr) =
            gpuship(&["validate", "--config", &path.display().to_string()]);
        assert_eq!(code, 0, "{}: {stderr}", path.display());
        assert!(stdout.contains("valid"), "{stdout}");
    }
}

#[test]
fn validate_explains_kafka_and_otlp_mistakes() {
    let (_dir, path) = write_config(
        "[[sinks]]\ntype = \"kafka\"\nbrokers = \"b:9092\"\ntopic = \"gpu.{gpu}\"\n\
         [sinks.librdkafka_options]\nacks = \"1\"\n\n\
         [[sinks]]\ntype = \"otlp\"\nendpoint = \"localhost:4317\"\nbatch_size = 0\n",
    );
    let (code, _, stderr) = gpuship(&["validate", "--config", &path]);
    assert_eq!(code, 1, "{stderr}");
    for expected in [
        "sinks[0].topic",
        "unknown placeholder {gpu}; known: kind, host",
        "sinks[0].librdkafka_options.\"acks\"",
        "conflicts with gpuship's own setting: acknowledged delivery (always acks=all)",
        "sinks[1].endpoint",
        "must be an http:// or https:// URL with a host",
        "sinks[1].batch_size",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in\n{stderr}"
        );
    }

    let (_dir, path) = write_config(
        "[[sinks]]\ntype = \"kafka\"\nbrokers = \"b:9092\"\ncompression = \"brotli\"\n",
    );
    let (code, _, stderr) = gpuship(&["validate", "--config", &path]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("unknown variant `brotli`") && stderr.contains("zstd"),
        "{stderr}"
    );

    let (_dir, path) = write_config(
        "[[sinks]]\ntype = \"kafka\"\nbrokers = \"b:9092\"\n[sinks.sasl]\nmechanism = \"PLAIN\"\n\
         username = \"u\"\npassword = \"hunter2\"\n",
    );
    let (code, _, stderr) = gpuship(&["validate", "--config", &path]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("secrets are not written in the config"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn xid_explains_a_code_and_lists_the_catalog() {
    let (code, stdout, _) = gpuship(&["xid", "79"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "XID 79: GPU fell off the PCIe bus");
    assert_eq!(lines[1], "  category:  hardware");
    assert_eq!(lines[2], "  severity:  fatal");
    assert_eq!(lines[3], "  action:    reboot_node");
    assert!(lines[4].starts_with("  meaning:   "), "{stdout}");
    assert!(lines[5].starts_with("  catalog:   "), "{stdout}");

    let (code, stdout, _) = gpuship(&["xid", "4000"]);
    assert_eq!(code, 2, "an unknown code says so");
    assert!(stdout.starts_with("XID 4000: Unknown XID"), "{stdout}");

    let (code, stdout, _) = gpuship(&["xid", "--list"]);
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().count(), 186, "a header and codes 1 to 185");
    assert!(
        stdout.lines().any(|l| l.starts_with("  48  memory")
            && l.contains("fatal")
            && l.contains("reset_gpu")),
        "{stdout}"
    );
}

#[test]
fn validate_names_an_unknown_key_and_its_line() {
    let (_dir, path) = write_config("[sources.cuda]\nlibraries = [\"auto\"]\nring_size = 8\n");
    let (code, _, stderr) = gpuship(&["validate", "--config", &path]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("line 3") && stderr.contains("unknown field `ring_size`"),
        "{stderr}"
    );
}

#[test]
fn validate_lists_every_bad_value() {
    let (_dir, path) = write_config(
        "[batch]\nmax_events = 0\n\n[[sinks]]\ntype = \"parquet\"\npath = \"/tmp/x\"\nzstd_level = 0\nmax_file_rows = 0\n",
    );
    let (code, _, stderr) = gpuship(&["validate", "--config", &path]);
    assert_eq!(code, 1);
    for expected in [
        "3 problem(s)",
        "line 2: batch.max_events: 0 is outside 1..=1048576",
        "line 7: sinks[0].zstd_level: 0 is outside 1..=22",
        "line 8: sinks[0].max_file_rows: 0 is outside 1..=1000000000",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
}

#[test]
fn run_refuses_a_bad_config_before_touching_anything() {
    let _shared = support::shared();
    let (_dir, path) = write_config("[[sinks]]\ntype = \"smoke_signals\"\n");
    let (code, _, stderr) = gpuship(&["run", "--config", &path]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("line 2: sinks[0].type: unknown sink type `smoke_signals`"),
        "{stderr}"
    );
    let (_dir, path) = write_config("[[sinks]]\ntype = \"kafka\"\n");
    let (code, _, stderr) = gpuship(&["run", "--config", &path]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("line 1: sinks[0]: missing field `brokers`"),
        "{stderr}"
    );
}

#[test]
fn missing_config_file_is_a_clear_error() {
    let (code, _, stderr) = gpuship(&["validate", "--config", "/nonexistent/gpuship.toml"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("cannot read config /nonexistent/gpuship.toml"),
        "{stderr}"
    );
}

#[test]
fn help_documents_every_subcommand_and_the_run_options() {
    let _shared = support::shared();
    let (code, stdout, _) = gpuship(&["run", "--help"]);
    assert_eq!(code, 0);
    for needle in ["--config", "--pid", "--summary-json", "[COMMAND]..."] {
        assert!(stdout.contains(needle), "{needle} missing from:\n{stdout}");
    }
}

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
fn huge_durations_are_refused_by_validate_and_run_instead_of_panicking() {
    let _shared = support::shared();
    // Each of these made `run` panic or misbehave ("overflow when adding duration to instant",
    // a sink task panicking at SIGTERM, incidents split by a wrapped window).
    let (_dir, path) = write_config(
        "[agent]\nstats_interval_secs = 18446744073709551615\n\
         shutdown_timeout_secs = 18446744073709551615\n\
         [sources.xid]\nincident_window_secs = 18446744073709551615\ntracepoint = false\n\
         [sources.cuda]\nenabled = false\n",
    );
    for command in ["validate", "run"] {
        let (code, _, stderr) = gpuship(&[command, "--config", &path]);
        assert_eq!(code, 1, "{command}: {stderr}");
        for expected in [
            "3 problem(s)",
            "line 2: agent.stats_interval_secs: 18446744073709551615 is outside 0..=86400",
            "line 3: agent.shutdown_timeout_secs: 18446744073709551615 is outside 0..=3600",
            "line 5: sources.xid.incident_window_secs: 18446744073709551615 is outside 0..=86400",
        ] {
            assert!(
                stderr.contains(expected),
                "{command}: missing {expected:?} in\n{stderr}"
            );
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn a_missing_explicit_library_is_refused_but_auto_finding_nothing_is_not() {
    let _shared = support::shared();
    let (_dir, path) = write_config(
        "[sources.xid]\ntracepoint = false\n\n[sources.cuda]\n\
         libraries = [\"/nonexistent/libcuda.so.1\"]\n",
    );
    let expected =
        "line 5: sources.cuda.libraries[0]: /nonexistent/libcuda.so.1 does not exist on this host";
    for command in ["validate", "run"] {
        let (code, _, stderr) = gpuship(&[command, "--config", &path]);
        assert_eq!(code, 1, "{command}: {stderr}");
        assert!(stderr.contains(expected), "{command}: {stderr}");
        assert!(stderr.contains("1 problem(s)"), "{stderr}");
    }
    // "auto" is discovery: finding nothing is a warning at run time, not a config problem.
    let (_dir, path) = write_config("[sources.cuda]\nlibraries = [\"auto\"]\n");
    let (code, stdout, stderr) = gpuship(&["validate", "--config", &path]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("valid"), "{stdout}");
}

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
    // validate checks what the file holds; a secret is only read by run.
    let (code, _, stderr) = gpuship(&["validate", "--config", &path]);
    assert_eq!(code, 0, "{stderr}");
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
