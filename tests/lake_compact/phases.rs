//! `gpuship-lake compact` stopped at each phase of its work (`GPUSHIP_LAKE_COMPACT_PAUSE_AT`):
//! while it waits there, gpuship's readers see each row once; SIGKILLed there and run again, the
//! lake ends fully compacted with exactly the rows it had, and nothing left on disk twice.

use super::fixture::{
    assert_compacted, compact, duckdb_sums, hour_folder, lake_binary, lake_sums, names, stderr,
    write_lake,
};
use crate::support::lake::duckdb;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Starts a compaction that pauses at `phase`, waits until it says so, checks what the first
/// hour it works on (`xid`, 4 hours ago: 9 agents' files) holds then and the readers, kills it,
/// checks again, reruns it and checks the end state.
fn killed_at(phase: &str, expected_state: fn(&[String]) -> bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    write_lake(root, 3, &[4, 3], 3, 30);
    let before = lake_sums(&data, &[]);

    // Parts of 4 KiB, so that a file is in the middle of its upload at `writing`.
    let mut child = paused_at(&data, phase, &["--upload-part-bytes", "4096"], &[]);
    let state = names(&hour_folder(root, "xid", 4));
    assert!(expected_state(&state), "paused at {phase}: {state:?}");
    assert_eq!(
        lake_sums(&data, &[]),
        before,
        "a reader while paused at {phase}"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert_eq!(
        lake_sums(&data, &[]),
        before,
        "a reader after the kill at {phase}"
    );

    let rerun = compact(&data, &["--retire-after", "0s"], &[]);
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    assert_compacted(root, &[4, 3]);
    assert_eq!(lake_sums(&data, &[]), before, "after the rerun");
    assert_eq!(
        duckdb_sums(&data, |sql: &str| duckdb(sql)),
        before,
        "on disk, once"
    );
}

/// How many names in `state` start with `prefix` and contain `part`.
fn count(state: &[String], prefix: &str, part: &str) -> usize {
    state
        .iter()
        .filter(|n| n.starts_with(prefix) && n.contains(part))
        .count()
}

#[test]
fn killed_after_planning() {
    killed_at("listed", |s| {
        s.len() == 9 && count(s, "part-", ".parquet") == 9
    });
}

#[test]
fn killed_while_writing_a_compacted_file() {
    // A staged, unfinished upload beside the agents' files.
    killed_at("writing", |s| {
        s.len() == 10 && count(s, "compact-", ".parquet#") == 1
    });
}

#[test]
fn killed_before_the_commit() {
    killed_at("written", |s| {
        s.len() == 10 && count(s, "compact-", ".parquet") == 1 && count(s, "_compaction-", "") == 0
    });
}

#[test]
fn killed_after_the_commit() {
    killed_at("committed", |s| {
        s.len() == 11 && count(s, "part-", "") == 9 && count(s, "_compaction-", ".json") == 1
    });
}

#[test]
fn killed_while_deleting_replaced_files() {
    killed_at("retiring", |s| {
        s.len() == 10 && count(s, "part-", "") == 8 && count(s, "_compaction-", ".json") == 1
    });
}

/// `gpuship-lake compact --data <data> --retire-after 0s <extra>` started with `env` to pause
/// at `phase`, once it says it is there.
pub fn paused_at(data: &str, phase: &str, extra: &[&str], env: &[(&str, String)]) -> Child {
    let mut child = Command::new(lake_binary())
        .args(["compact", "--data", data, "--retire-after", "0s"])
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("GPUSHIP_LAKE_COMPACT_PAUSE_AT", phase)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpuship-lake compact");
    let (lines, seen) = mpsc::channel();
    let stderr_pipe = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let expected = format!("gpuship-lake compact: paused at {phase}");
    let mut printed = Vec::new();
    loop {
        match seen.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line == expected => return child,
            Ok(line) => printed.push(line),
            Err(err) => {
                let _ = child.kill();
                panic!(
                    "never paused at {phase}: {err} ({:?}): {printed:?}",
                    child.wait()
                );
            }
        }
    }
}
