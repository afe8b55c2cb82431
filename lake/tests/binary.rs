//! The `gpuship-lake` binary on its own, as a machine without the agent runs it (and as
//! `gpuship report|export-trace|query` run it). This file also makes `cargo test` build the
//! binary, which the agent's tests run through `gpuship`.

use std::process::Command;

fn gpuship_lake(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuship-lake"))
        .args(args)
        .output()
        .expect("gpuship-lake runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_lists_the_three_views() {
    let (code, stdout, _) = gpuship_lake(&["--help"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.starts_with("Reads gpuship's Parquet data lake"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Usage: gpuship-lake [OPTIONS] <COMMAND>"),
        "{stdout}"
    );
    for view in ["report", "export-trace", "query"] {
        assert!(stdout.contains(&format!("\n  {view}")), "{view}: {stdout}");
    }
}

#[test]
fn an_empty_lake_is_exit_status_3_and_a_missing_one_is_1_under_its_own_name() {
    let empty = tempfile::tempdir().expect("a temp dir");
    let data = empty.path().to_str().expect("a UTF-8 temp path");
    let (code, stdout, stderr) =
        gpuship_lake(&["query", "SELECT 1", "--since", "1h", "--data", data]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("NO DATA"), "{stderr}");
    let missing = empty.path().join("absent");
    let missing = missing.to_str().expect("a UTF-8 temp path");
    let (code, _, stderr) = gpuship_lake(&["report", "--since", "1h", "--data", missing]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with(&format!("gpuship-lake: no data lake at {missing}")),
        "{stderr}"
    );
}
