//! docs/ARCHITECTURE.md and bpf/include/README.md against the tree: the number of crates the
//! architecture states and its crates table against the workspace members, the tables it says
//! the lake has against the kinds, and every shared BPF header named in the headers' README.

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
