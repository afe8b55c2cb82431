//! One agent per state directory and per local Parquet root: a second `gpuship run` on either
//! is refused with the path and the holder's pid, until the first one ends (even by SIGKILL).
//! The state directory and what the agent creates in it are private (0700 / 0600), and a
//! state directory others can write to is refused.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::agent::{binary, data_dir, Agent};

/// Kernel-log XIDs only, Parquet into `lake`, state in `state`.
fn config(state: &Path, lake: &Path) -> String {
    format!(
        "[agent]\nstate_dir = \"{}\"\n\n[sources.xid]\ntracepoint = false\nkmsg = true\n\n\
         [sources.cuda]\nenabled = false\n\n[metrics]\naddress = \"127.0.0.1:0\"\n\n\
         [[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n\n[[sinks]]\ntype = \"blackhole\"\n",
        state.display(),
        lake.display()
    )
}

/// `gpuship run` with `config`, expected to refuse to start: exit status 1 at once. One that
/// starts instead is killed after a minute, so that the failure is an assertion, not a hang.
fn refused(config: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpuship.toml");
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(binary())
        .args(["run", "--config"])
        .arg(&path)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(1),
        "the second agent was not refused:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn a_second_agent_on_the_same_state_dir_or_parquet_path_is_refused() {
    let _shared = support::shared();
    let dir = data_dir();
    let (state, lake) = (dir.path().join("state"), dir.path().join("lake"));
    let first = Agent::start(&config(&state, &lake), &[]);
    let pid = first.pid();

    // Same state directory, another lake.
    let output = refused(&config(&state, &dir.path().join("other-lake")));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "state directory {} is in use by another gpuship agent (pid {pid}, lock file {}/lock)",
            state.display(),
            state.display()
        )),
        "{stderr}"
    );
    // Another state directory, the same lake (spelled differently).
    let output = refused(&config(
        &dir.path().join("state2"),
        &dir.path().join("lake/../lake/"),
    ));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("parquet path ")
            && stderr.contains(&format!(
                "is in use by another gpuship agent (pid {pid}, lock file "
            ))
            && stderr.contains("lake/.gpuship.lock)"),
        "{stderr}"
    );
    // The refused agents started nothing: the state directory is checked first.
    assert!(!dir.path().join("other-lake").exists());
    assert!(!dir.path().join("state2/spool").exists());

    // What the first agent created is private.
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("lock")), 0o600);
    assert_eq!(mode(&state.join("spool")), 0o700);
    for sink in std::fs::read_dir(state.join("spool")).unwrap() {
        assert_eq!(mode(&sink.unwrap().path()), 0o700);
    }
    assert_eq!(
        std::fs::read_to_string(state.join("lock")).unwrap(),
        format!("{pid}\n")
    );

    // SIGKILL: no clean shutdown, and the kernel still releases both locks.
    drop(first);
    let second = Agent::start(&config(&state, &lake), &[]);
    let stopped = second.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
}

#[test]
fn a_state_dir_writable_by_others_is_refused() {
    let dir = data_dir();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = refused(&config(&state, &dir.path().join("lake")));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "{} is writable by group or others (mode 0777): refusing to keep state there",
            state.display()
        )),
        "{stderr}"
    );
    assert!(!state.join("lock").exists());
    assert!(!state.join("spool").exists());
}
