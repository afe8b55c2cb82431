//! The README's two commands, `make run` and `make test`, as root (a container's shell, which
//! has no sudo) and as a user (who has sudo): `make -n` shows what each would run, without
//! running it. Root: nothing through sudo. A user: apt-get and the agent through sudo, the
//! build as the user, and `make test` re-run as a whole under sudo. `make run` builds only the
//! agent; `make lake` (the command `gpuship report` names when gpuship-lake is missing:
//! tests/lake_binary.rs) and `make build` build the views' binary.

mod install;

use std::os::unix::process::CommandExt;
use std::process::Command;

/// `make -n <target>` in the repository, as `uid` when given; its standard output.
fn dry_run(target: &str, uid: Option<u32>) -> String {
    let mut command = Command::new("make");
    command
        .args(["-n", target])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("MAKEFLAGS")
        .env_remove("SUDO_USER");
    if let Some(uid) = uid {
        command.uid(uid).gid(uid).env("HOME", "/nonexistent");
    }
    let output = command.output().expect("make");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "make -n {target}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

const NOBODY: Option<u32> = Some(65534);

#[test]
fn as_root_nothing_goes_through_sudo() {
    for target in ["run", "test", "bench"] {
        let plan = dry_run(target, None);
        assert!(!plan.contains("sudo"), "make {target} as root:\n{plan}");
    }
    let run = dry_run("run", None);
    assert!(run.contains("apt-get update"), "{run}");
    assert!(
        run.lines()
            .any(|l| l.starts_with("./target/release/gpuship run")),
        "{run}"
    );
    // Unit tests (the root-only ones on), then every integration test, then the benches once,
    // each timed.
    let test = dry_run("test", None);
    for part in [
        "test --workspace --lib --bins --locked --features gpuship/root-tests",
        "test --workspace --test '*' --locked --features gpuship/root-tests",
        "test --workspace --bench '*' --locked --features gpuship/root-tests",
    ] {
        assert!(test.contains(part), "{part}:\n{test}");
    }
    // `make unit` needs no root: no sudo, and the root-only tests stay off.
    let unit = dry_run("unit", NOBODY);
    assert!(!unit.contains("sudo"), "{unit}");
    assert!(
        unit.contains("test --workspace --lib --bins --locked"),
        "{unit}"
    );
    assert!(!unit.contains("root-tests"), "{unit}");
}

#[test]
fn as_a_user_root_work_goes_through_sudo_and_the_build_does_not() {
    let run = dry_run("run", NOBODY);
    assert!(run.contains("sudo apt-get update"), "{run}");
    assert!(
        run.lines()
            .any(|l| l.starts_with("sudo ./target/release/gpuship run")),
        "{run}"
    );
    let build = run
        .lines()
        .find(|l| l.contains("build --release --locked"))
        .expect("a build line");
    assert!(!build.contains("sudo"), "built as the user: {build}");
    for target in ["test", "bench"] {
        let plan = dry_run(target, NOBODY);
        let rerun = plan
            .lines()
            .find(|l| l.starts_with("sudo "))
            .unwrap_or_else(|| panic!("make {target} as a user:\n{plan}"));
        assert!(rerun.ends_with(&format!(" {target}")), "{rerun}");
        assert!(rerun.contains("make CARGO="), "{rerun}");
        assert!(
            !plan.contains("test --workspace"),
            "nothing runs before the re-run:\n{plan}"
        );
    }
}

/// The cargo builds in a plan, each after the cargo binary's path.
fn cargo_builds(plan: &str) -> Vec<&str> {
    plan.lines()
        .filter_map(|line| line.split_once("cargo build ").map(|(_, args)| args))
        .collect()
}

#[test]
fn make_run_builds_the_agent_alone_and_make_build_both_binaries() {
    const AGENT: &str = "--release --locked -p gpuship --bin gpuship";
    const LAKE: &str = "--release --locked -p gpuship-lake --bin gpuship-lake";
    let run = dry_run("run", None);
    assert_eq!(cargo_builds(&run), [AGENT], "{run}");
    assert!(!run.contains("gpuship-lake"), "{run}");
    assert_eq!(cargo_builds(&dry_run("agent", None)), [AGENT]);
    assert_eq!(cargo_builds(&dry_run("lake", None)), [LAKE]);
    assert_eq!(cargo_builds(&dry_run("build", None)), [AGENT, LAKE]);
    // File:line tables split into target/release-debug/split/gpuship.debug.
    let debuginfo = dry_run("debuginfo", None);
    assert_eq!(
        cargo_builds(&debuginfo),
        ["--profile release-debug --locked -p gpuship --bin gpuship"],
        "{debuginfo}"
    );
    let split =
        "objcopy --strip-debug --add-gnu-debuglink=target/release-debug/split/gpuship.debug \
                 target/release-debug/gpuship target/release-debug/split/gpuship";
    assert!(debuginfo.lines().any(|l| l == split), "{debuginfo}");
}
