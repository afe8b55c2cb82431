//! What `--version` says beyond the crate's version, for the build scripts of the agent and of
//! `gpuship-lake` (`#[path]`-included by both): the git commit and the build date, as the
//! compile-time variables `GPUSHIP_COMMIT` and `GPUSHIP_BUILD_DATE`.
//!
//! - `GPUSHIP_COMMIT`: `git rev-parse --short HEAD`, with `-dirty` when tracked files differ
//!   from it (`git status`, untracked files aside); `unknown` outside a git checkout (a tarball)
//!   or without git.
//! - `GPUSHIP_BUILD_DATE`: `YYYY-MM-DD` in UTC, from `SOURCE_DATE_EPOCH` when set (reproducible
//!   builds), else the clock.
//!
//! The script re-runs when HEAD moves (`.git/HEAD`, the branch's ref, `packed-refs`) or
//! `SOURCE_DATE_EPOCH` changes, not on every edit, so incremental builds stay fast: `-dirty` is
//! the tree's state when HEAD last moved or the crate's other `rerun-if-changed` inputs changed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// Prints the `cargo:` lines that set `GPUSHIP_COMMIT` and `GPUSHIP_BUILD_DATE`; `workspace` is
/// the repository's root (the top-level Cargo.toml's folder).
pub fn emit_version_info(workspace: &Path) {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let commit = git_commit(workspace).unwrap_or_else(|| "unknown".to_string());
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .map(|value| {
            value
                .trim()
                .parse::<i64>()
                .unwrap_or_else(|_| panic!("SOURCE_DATE_EPOCH={value:?} is not whole seconds"))
        })
        .unwrap_or_else(|| {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("the clock is after 1970");
            i64::try_from(now.as_secs()).expect("seconds fit i64")
        });
    println!("cargo:rustc-env=GPUSHIP_COMMIT={commit}");
    println!("cargo:rustc-env=GPUSHIP_BUILD_DATE={}", utc_date(epoch));
}

/// The short commit, `-dirty` when so; `None` unless `workspace` is the top of a git checkout (a
/// tarball unpacked inside some other repository is not that repository's commit).
fn git_commit(workspace: &Path) -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let output = Command::new("git")
            .arg("-C")
            .arg(workspace)
            .arg("--no-optional-locks")
            .args(args)
            .output()
            .ok()?;
        output.status.success().then(|| {
            String::from_utf8_lossy(&output.stdout)
                .trim_end()
                .to_string()
        })
    };
    let top = PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != workspace.canonicalize().ok()? {
        return None;
    }
    let git_dir = top.join(git(&["rev-parse", "--git-dir"])?);
    let common_dir = top.join(git(&["rev-parse", "--git-common-dir"])?);
    // Re-run when HEAD moves: HEAD itself (a checkout), the branch it names (a commit), and
    // packed-refs (where a branch's ref may live). Only files that exist: cargo re-runs every
    // build for a missing one.
    let head = git_dir.join("HEAD");
    let mut watched = vec![head.clone()];
    if let Some(reference) = std::fs::read_to_string(&head)
        .ok()
        .and_then(|text| text.strip_prefix("ref: ").map(|r| r.trim().to_string()))
    {
        watched.push(common_dir.join(reference));
    }
    watched.push(common_dir.join("packed-refs"));
    for path in watched.iter().filter(|path| path.is_file()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    let changes = git(&["status", "--porcelain", "--untracked-files=no"])?;
    Some(if changes.is_empty() {
        commit
    } else {
        format!("{commit}-dirty")
    })
}

/// `YYYY-MM-DD` of a Unix time, UTC (Howard Hinnant's civil-from-days).
fn utc_date(epoch_seconds: i64) -> String {
    let days = epoch_seconds.div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
