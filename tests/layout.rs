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
