//! `gpuship report`, `gpuship export-trace` and `gpuship query` run the `gpuship-lake` binary
//! installed beside `gpuship` (or on `PATH`), the way `git` runs its `git-*` commands: the lake's
//! query engine is large (about 80 MB of code) and the daemon, which runs on every GPU node, never
//! reads the lake, so the agent's binary does not link it. The view's flags, output, exit status
//! and signals are `gpuship-lake`'s, unchanged: the process is replaced, not wrapped.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::anyhow;

/// The binary that runs the views.
pub const LAKE_BINARY: &str = "gpuship-lake";

/// Where `gpuship-lake` is: beside this executable if it is there, else whatever `PATH` finds.
pub fn lake_binary(this_exe: Option<&Path>) -> PathBuf {
    this_exe
        .and_then(|exe| exe.parent())
        .map(|dir| dir.join(LAKE_BINARY))
        .filter(|beside| beside.is_file())
        .unwrap_or_else(|| PathBuf::from(LAKE_BINARY))
}

/// The command line `gpuship-lake` gets for `gpuship <view> ARGS`: the log filter, when the user
/// set one, then the view and its arguments as given.
pub fn lake_arguments(view: &str, log_level: Option<&str>, args: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len() + 3);
    if let Some(level) = log_level {
        out.push(OsString::from("--log-level"));
        out.push(OsString::from(level));
    }
    out.push(OsString::from(view));
    out.extend(args.iter().cloned());
    out
}

/// Replaces this process with `gpuship-lake <view> ARGS`, named `gpuship` in its messages and
/// usage lines. Returns only when it cannot be started, with the reason.
pub fn exec_view(view: &str, log_level: Option<&str>, args: &[OsString]) -> anyhow::Error {
    let this_exe = std::env::current_exe().ok();
    let binary = lake_binary(this_exe.as_deref());
    let err = Command::new(&binary)
        .arg0(OsStr::new("gpuship"))
        .args(lake_arguments(view, log_level, args))
        .exec();
    if err.kind() == std::io::ErrorKind::NotFound {
        let beside = this_exe.as_deref().and_then(Path::parent).map_or_else(
            || "this executable".to_string(),
            |d| d.display().to_string(),
        );
        return anyhow!(
            "`gpuship {view}` runs {LAKE_BINARY}, which is neither in {beside} nor on PATH: \
             build it with `make lake` in gpuship's source tree (`make run` builds only the \
             agent), which puts it beside gpuship in target/release/, or install it beside \
             gpuship"
        );
    }
    anyhow!("cannot start {}: {err}", binary.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lake_binary_beside_this_one_wins_over_path() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("gpuship");
        assert_eq!(
            lake_binary(Some(&exe)),
            PathBuf::from(LAKE_BINARY),
            "none beside: PATH"
        );
        std::fs::write(dir.path().join(LAKE_BINARY), b"").unwrap();
        assert_eq!(lake_binary(Some(&exe)), dir.path().join(LAKE_BINARY));
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::create_dir(dir.path().join("sub").join(LAKE_BINARY)).unwrap();
        assert_eq!(
            lake_binary(Some(&dir.path().join("sub").join("gpuship"))),
            PathBuf::from(LAKE_BINARY),
            "a folder of that name is not the binary"
        );
        assert_eq!(lake_binary(None), PathBuf::from(LAKE_BINARY));
    }

    #[test]
    fn arguments_pass_through_unread_after_the_view() {
        let args: Vec<OsString> = ["--since", "2d", "--output", "-", "--", "x\ny"]
            .map(OsString::from)
            .to_vec();
        assert_eq!(
            lake_arguments("report", Some("debug"), &args),
            [
                "--log-level",
                "debug",
                "report",
                "--since",
                "2d",
                "--output",
                "-",
                "--",
                "x\ny"
            ]
            .map(OsString::from)
            .to_vec()
        );
        assert_eq!(
            lake_arguments("query", None, &[]),
            vec![OsString::from("query")]
        );
    }
}
