//! The command line as users meet it: `validate`, bad configs, `--help`. `gpuship run`'s
//! refusals, logs and failing sinks: `cli/run.rs`. `--version`: `cli/version.rs`.

mod run;
pub mod version;

use std::process::Command;

use crate::support;
use crate::support::agent::binary;
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
    // The file alone: doc_facts::examples runs each example with the environment it documents.
    let mut paths = vec![repo_root().join("config/gpuship.toml")];
    for entry in std::fs::read_dir(repo_root().join("config/examples")).unwrap() {
        paths.push(entry.unwrap().path());
    }
    for path in paths {
        let (code, stdout, stderr) = gpuship(&[
            "validate",
            "--syntax-only",
            "--config",
            &path.display().to_string(),
        ]);
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
