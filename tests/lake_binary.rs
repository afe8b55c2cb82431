//! `gpuship report|export-trace|query` as installed: the agent's binary hands them to the
//! `gpuship-lake` binary beside it, arguments, output and exit status unchanged, and says where
//! it looked, and the command that builds it, when that binary is missing (`make run` builds
//! only the agent: tests/makefile.rs).

use std::path::Path;
use std::process::{Command, Output};

use crate::support::agent::binary;

fn run(gpuship: &Path, args: &[&str], path_var: &str) -> Output {
    Command::new(gpuship)
        .args(args)
        .env("PATH", path_var)
        .env("NO_COLOR", "1")
        .output()
        .expect("gpuship runs")
}

#[test]
fn the_views_run_gpuship_lake_under_the_gpuship_name() {
    let gpuship = Path::new(binary());
    assert!(
        gpuship.with_file_name("gpuship-lake").is_file(),
        "cargo builds gpuship-lake beside gpuship"
    );
    let help = run(gpuship, &["report", "--help"], "/nonexistent");
    assert_eq!(help.status.code(), Some(0));
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Usage: gpuship report [OPTIONS] --since <SINCE>"),
        "{help}"
    );
    assert!(help.contains("--output"), "{help}");

    let empty = tempfile::tempdir().expect("a temp dir");
    let data = empty.path().to_str().expect("a UTF-8 temp path");
    let none = run(
        gpuship,
        &[
            "query",
            "SELECT count(*) FROM xid",
            "--since",
            "1h",
            "--data",
            data,
        ],
        "/nonexistent",
    );
    assert_eq!(none.status.code(), Some(3), "no data is exit status 3");
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(stderr.contains("NO DATA"), "{stderr}");

    let usage = run(gpuship, &["export-trace", "--no-such-flag"], "/nonexistent");
    assert_eq!(
        usage.status.code(),
        Some(2),
        "clap's usage error, from gpuship-lake"
    );
    let stderr = String::from_utf8_lossy(&usage.stderr);
    assert!(stderr.contains("--no-such-flag"), "{stderr}");
}

#[test]
fn gpuship_lake_version_names_the_version_the_commit_and_the_build_date() {
    let lake = Path::new(binary()).with_file_name("gpuship-lake");
    let output = Command::new(lake)
        .arg("--version")
        .output()
        .expect("gpuship-lake runs");
    assert_eq!(output.status.code(), Some(0));
    crate::cli::version::assert_version_output(
        "gpuship-lake",
        &String::from_utf8_lossy(&output.stdout),
    );
}

#[test]
fn without_gpuship_lake_the_views_say_where_they_looked() {
    let alone = tempfile::tempdir().expect("a temp dir");
    let copy = alone.path().join("gpuship");
    std::fs::copy(binary(), &copy).expect("copy gpuship");
    for view in ["report", "export-trace", "query"] {
        let out = run(&copy, &[view, "--since", "1h"], "/nonexistent");
        assert_eq!(out.status.code(), Some(1), "{view}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.trim_end(),
            format!(
                "gpuship: `gpuship {view}` runs gpuship-lake, which is neither in {} nor on \
                 PATH: build it with `make lake` in gpuship's source tree (`make run` builds \
                 only the agent), which puts it beside gpuship in target/release/, or install \
                 it beside gpuship",
                alone.path().display()
            ),
            "{view}"
        );
        assert!(out.stdout.is_empty(), "{view}");
    }
    // Found on PATH when not beside.
    let lake_dir = Path::new(binary()).parent().expect("target dir");
    let out = run(
        &copy,
        &["report", "--help"],
        lake_dir.to_str().expect("a UTF-8 target path"),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
