//! The shape of this test crate: cargo's auto-discovery of tests is off (`autotests = false`,
//! one `integration` crate rooted at tests/main.rs), so a test file that nobody declares would
//! compile nowhere and run never. Every `tests/*.rs` must be a `mod` of tests/main.rs and every
//! `tests/support/*.rs` a `mod` of tests/support/mod.rs.

use std::path::Path;

use crate::support::repo_root;

/// The `.rs` files of `dir` (not its subfolders) other than `root`, by stem.
fn rust_files(dir: &Path, root: &str) -> Vec<String> {
    let mut stems: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.is_file() && path.extension().is_some_and(|e| e == "rs"))
        .filter_map(|path| Some(path.file_stem()?.to_str()?.to_string()))
        .filter(|stem| stem != root)
        .collect();
    stems.sort();
    stems
}

/// The stems of `dir`'s files that `dir/<root>.rs` does not declare with `mod <stem>;`.
fn undeclared(dir: &Path, root: &str) -> Vec<String> {
    let root_file = dir.join(format!("{root}.rs"));
    let text = std::fs::read_to_string(&root_file)
        .unwrap_or_else(|e| panic!("{}: {e}", root_file.display()));
    let declared: Vec<&str> = text
        .lines()
        .filter_map(|line| {
            let line = line.trim().strip_prefix("pub ").unwrap_or(line.trim());
            line.strip_prefix("mod ")?.strip_suffix(';')
        })
        .collect();
    rust_files(dir, root)
        .into_iter()
        .filter(|stem| !declared.contains(&stem.as_str()))
        .collect()
}

#[test]
fn every_test_file_is_declared_in_main() {
    let tests = repo_root().join("tests");
    assert!(
        rust_files(&tests, "main").len() > 30,
        "tests/ holds the suite"
    );
    assert_eq!(
        undeclared(&tests, "main"),
        Vec::<String>::new(),
        "tests/*.rs files that tests/main.rs does not declare would never run"
    );
}

#[test]
fn every_support_file_is_declared_in_the_support_module() {
    let support = repo_root().join("tests/support");
    assert_eq!(
        undeclared(&support, "mod"),
        Vec::<String>::new(),
        "tests/support/*.rs files that tests/support/mod.rs does not declare"
    );
}

/// `(file, line)` of every line of the `.rs` files under `dir` (recursively) that `bad` picks.
fn lines_where(dir: &Path, bad: &dyn Fn(&str) -> bool) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            found.extend(lines_where(&path, bad));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("a source file");
            found.extend(
                text.lines()
                    .filter(|line| bad(line))
                    .map(|line| (path.display().to_string(), line.trim().to_string())),
            );
        }
    }
    found
}

/// The sources own their settings and the configuration composes them: the sources never
/// import the configuration module, and it imports nothing of theirs but the composed
/// `[sources]` table (docs/ARCHITECTURE.md, `agent/config/`).
#[test]
fn sources_and_config_import_in_one_direction_only() {
    let agent = repo_root().join("agent");
    assert_eq!(
        lines_where(&agent.join("sources"), &|line| line
            .contains("crate::config")),
        Vec::<(String, String)>::new(),
        "agent/sources/ imports agent/config/"
    );
    assert_eq!(
        lines_where(&agent.join("config"), &|line| {
            line.contains("crate::sources::") && !line.contains("crate::sources::config")
        }),
        Vec::<(String, String)>::new(),
        "agent/config/ imports a source's module other than sources/config.rs"
    );
}

/// The source folders (each a vertical slice registered in agent/sources/mod.rs).
const SOURCE_FOLDERS: [&str; 4] = ["cuda", "driver", "kmsg", "xid_tracepoint"];

/// The agent modules a source may use: the shared parts of `sources/`, the event plumbing and
/// counters it reports into, and the utilities. Not `run`, `doctor`, `config`, the consumer,
/// the fan-out, the XID stage or the views: those use the sources, never the reverse.
const SHARED_WITH_SOURCES: [&str; 12] = [
    "sources",
    "accounting",
    "batcher",
    "bpf",
    "decode",
    "diagnosis",
    "enrich",
    "escape",
    "health",
    "state_file",
    "summary",
    "table_problems",
];

/// The `crate::<module>` names `line` imports or names.
fn crate_modules(line: &str) -> Vec<&str> {
    line.match_indices("crate::")
        .map(|(at, _)| {
            let rest = &line[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// Whether `line` names source folder `folder` through `crate::sources::` (a path or a brace
/// group).
fn names_source(line: &str, folder: &str) -> bool {
    let path = format!("sources::{folder}");
    let named = line.match_indices(&path).any(|(at, _)| {
        !line[at + path.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    });
    let grouped = line.find("sources::{").is_some_and(|at| {
        line[at..]
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|word| word == folder)
    });
    named || grouped
}

/// A source is a folder: it climbs out of `sources/` only to shared modules, and never into
/// another source's folder (ARCHITECTURE.md, "How to add a source").
#[test]
fn source_folders_import_only_shared_modules_and_no_other_source() {
    let sources = repo_root().join("agent/sources");
    for folder in SOURCE_FOLDERS {
        let found = lines_where(&sources.join(folder), &|line| {
            crate_modules(line)
                .iter()
                .any(|module| !SHARED_WITH_SOURCES.contains(module))
                || SOURCE_FOLDERS
                    .iter()
                    .any(|other| *other != folder && names_source(line, other))
        });
        assert_eq!(
            found,
            Vec::<(String, String)>::new(),
            "agent/sources/{folder}/ imports outside the shared modules or another source"
        );
    }
}

/// `run/`, `doctor/` and `config/` iterate the registered sources; none names one.
#[test]
fn run_doctor_and_config_name_no_source() {
    let agent = repo_root().join("agent");
    for dir in ["run", "doctor", "config"] {
        let found = lines_where(&agent.join(dir), &|line| {
            SOURCE_FOLDERS
                .iter()
                .any(|folder| names_source(line, folder))
        });
        assert_eq!(
            found,
            Vec::<(String, String)>::new(),
            "agent/{dir}/ names a source folder"
        );
    }
}

/// The test's list of source folders is the registry's: a new folder is checked too.
#[test]
fn the_source_folder_list_is_every_folder_under_sources() {
    let mut folders: Vec<String> = std::fs::read_dir(repo_root().join("agent/sources"))
        .expect("agent/sources")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.is_dir())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    folders.sort();
    assert_eq!(folders, SOURCE_FOLDERS);
}

#[test]
fn the_import_scanner_finds_paths_and_brace_groups() {
    assert_eq!(
        crate_modules("use crate::run::x; use crate::sources::cuda::y;"),
        ["run", "sources"]
    );
    assert!(names_source("use crate::sources::cuda::probes;", "cuda"));
    assert!(names_source(
        "use crate::sources::{self, driver, tracefs};",
        "driver"
    ));
    assert!(!names_source("use crate::sources::cuda_results;", "cuda"));
    assert!(!names_source(
        "use crate::sources::{self, tracefs};",
        "kmsg"
    ));
}
