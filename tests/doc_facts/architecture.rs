//! docs/ARCHITECTURE.md and bpf/include/README.md against the tree: the number of crates the
//! architecture states and its crates table against the workspace members, the tables it says
//! the lake has against the kinds, every path its table names and the source folder its recipe
//! counts against the tree, and every shared BPF header named in the headers' README.

use std::collections::BTreeSet;

use gpuship_sinks::EventKind;

use super::{read, table_rows};
use crate::support::markdown::code_spans;
use crate::support::repo_root;

/// The workspace members' package names, from each member's Cargo.toml.
fn workspace_packages() -> BTreeSet<String> {
    let manifest: toml::Table = read("Cargo.toml").parse().expect("Cargo.toml");
    let members = manifest["workspace"]["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m.as_str().expect("member path").to_string());
    members
        .map(|member| {
            let path = if member == "." {
                "Cargo.toml".to_string()
            } else {
                format!("{member}/Cargo.toml")
            };
            let package: toml::Table = read(&path).parse().expect("member manifest");
            package["package"]["name"]
                .as_str()
                .expect("package name")
                .to_string()
        })
        .collect()
}

#[test]
fn the_architecture_names_every_crate_and_their_number() {
    let doc = read("docs/ARCHITECTURE.md");
    let packages = workspace_packages();
    let section = &doc[doc.find("## Crates").expect("## Crates")..];
    let table: BTreeSet<String> = table_rows(section, "`gpuship")
        .iter()
        .map(|row| code_spans(&row[0]).remove(0))
        .collect();
    assert_eq!(table, packages, "docs/ARCHITECTURE.md's crates table");
    let words = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    ];
    let stated = format!("gpuship is {} crates", words[packages.len()]);
    assert!(
        doc.contains(&stated),
        "docs/ARCHITECTURE.md should say {stated:?}"
    );
    let lake_tables = doc
        .lines()
        .find(|line| line.contains("the lake as DataFusion tables"))
        .expect("the lake's tables");
    for kind in EventKind::ALL {
        assert!(
            code_spans(lake_tables).contains(&kind.as_str().to_string()),
            "the lake's tables in docs/ARCHITECTURE.md lack {kind}"
        );
    }
}

#[test]
fn every_shared_bpf_header_is_in_its_readme() {
    let readme = read("bpf/include/README.md");
    let named: BTreeSet<String> = code_spans(&readme).into_iter().collect();
    let mut headers = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("bpf/include")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".h") {
            assert!(
                named.contains(&name),
                "bpf/include/README.md does not name {name}"
            );
            headers.push(name);
        }
    }
    assert!(headers.len() >= 8, "{headers:?}");
}

/// Every path the "Where things are" table names exists: the first cell's code spans that start
/// at a top-level folder, and the files a row names after `(+ ` or in `{a,b}` groups are
/// left out (they are relative to the row's first path).
#[test]
fn every_path_the_architecture_names_exists() {
    let doc = read("docs/ARCHITECTURE.md");
    let roots = [
        "agent/", "bpf/", "lake/", "model/", "sinks/", "top/", "tests/", "catalog/",
    ];
    let mut checked = 0;
    for row in table_rows(&doc, "`") {
        for span in code_spans(&row[0]) {
            if !roots.iter().any(|root| span.starts_with(root)) || span.contains(['<', '{', '*']) {
                continue;
            }
            assert!(
                repo_root().join(&span).exists(),
                "docs/ARCHITECTURE.md names {span}, which does not exist"
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} paths checked");
}

/// The recipe's count of the `driver` source's folder is the folder's.
#[test]
fn the_counted_source_folder_has_the_stated_number_of_files() {
    let doc = read("docs/ARCHITECTURE.md");
    let stated: usize = doc
        .split("Counted on the `driver` source as the code stands: its folder (")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the recipe states the driver folder's file count");
    let files = std::fs::read_dir(repo_root().join("agent/sources/driver"))
        .expect("agent/sources/driver")
        .filter(|entry| entry.as_ref().is_ok_and(|e| e.path().is_file()))
        .count();
    assert_eq!(stated, files);
}
