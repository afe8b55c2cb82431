//! `gpuship --version` (and `gpuship-lake --version`, tests/lake_binary.rs): one line,
//! `NAME X.Y.Z (commit HASH, built YYYY-MM-DD)`, where HASH is a short commit of this checkout,
//! `-dirty` when the tree had changes, or `unknown` outside a git checkout, and the date is the
//! build's, in UTC (build/version.rs).

use std::process::Command;

use crate::support::agent::binary;
use crate::support::repo_root;

/// `git -C <repo> ARGS`'s output, or `None` when git fails or is missing.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(repo_root())
        .args(args)
        .output()
        .ok()?;
    output.status.success().then(|| {
        String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_string()
    })
}

/// Checks that `stdout` is `name`'s `--version` output, exactly.
pub fn assert_version_output(name: &str, stdout: &str) {
    let line = stdout
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("one line: {stdout:?}"));
    assert!(!line.contains('\n'), "one line: {stdout:?}");
    let rest = line
        .strip_prefix(&format!("{name} {} (commit ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("name, version, commit: {line:?}"));
    let (commit, date) = rest
        .strip_suffix(')')
        .and_then(|r| r.split_once(", built "))
        .unwrap_or_else(|| panic!("`, built DATE)`: {line:?}"));

    let checkout = git(&["rev-parse", "--show-toplevel"]).map(std::path::PathBuf::from);
    let in_git =
        checkout.is_some_and(|top| top.canonicalize().ok() == repo_root().canonicalize().ok());
    if in_git {
        let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
        assert!(
            (7..=40).contains(&hash.len())
                && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "a short lowercase hex hash: {line:?}"
        );
        assert_eq!(
            git(&["cat-file", "-t", hash]).as_deref(),
            Some("commit"),
            "a commit of this checkout: {line:?}"
        );
    } else {
        assert_eq!(commit, "unknown", "built outside git: {line:?}");
    }

    let day = chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d")
        .unwrap_or_else(|err| panic!("YYYY-MM-DD: {line:?}: {err}"));
    assert_eq!(day.format("%Y-%m-%d").to_string(), date, "{line:?}");
    assert!(
        day <= chrono::Utc::now().date_naive(),
        "built today or before, UTC: {line:?}"
    );
}

#[test]
fn version_names_the_version_the_commit_and_the_build_date() {
    for flag in ["--version", "-V"] {
        let output = Command::new(binary())
            .arg(flag)
            .output()
            .expect("run gpuship");
        assert_eq!(output.status.code(), Some(0), "{flag}");
        assert!(output.stderr.is_empty(), "{flag}");
        assert_version_output("gpuship", &String::from_utf8_lossy(&output.stdout));
    }
}
