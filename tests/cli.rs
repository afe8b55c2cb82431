//! The command line as users meet it: `validate`, bad configs, `--help`.

mod common;

use std::process::Command;

use common::agent::binary;
use common::repo_root;

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
        "line 2: batch.max_events: must be greater than 0",
        "line 7: sinks[0].zstd_level: 0 is outside 1..=22",
        "line 8: sinks[0].max_file_rows: must be greater than 0",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
}

#[test]
fn run_refuses_a_bad_config_before_touching_anything() {
    let (_dir, path) = write_config("[[sinks]]\ntype = \"smoke_signals\"\n");
    let (code, _, stderr) = gpuship(&["run", "--config", &path]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("line 1: sinks[0]") && stderr.contains("smoke_signals"),
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
    let (code, stdout, _) = gpuship(&["run", "--help"]);
    assert_eq!(code, 0);
    for needle in ["--config", "--pid", "--summary-json", "[COMMAND]..."] {
        assert!(stdout.contains(needle), "{needle} missing from:\n{stdout}");
    }
}

#[test]
fn without_bpf_capabilities_run_refuses_with_instructions() {
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
