//! The facts the docs state, checked against the code, so that a stale sentence fails CI: the
//! sinks' default kinds and shared keys (docs/configuration.md), the tables `gpuship query`
//! knows (its `--help` and docs/views.md), the sources' defaults (docs/operations.md), the
//! environment each example config documents (and that `validate` refuses the file without
//! it, as `run` would), the variables the Kubernetes configs read (set by the DaemonSet), which
//! kinds carry the GPU columns the Kafka key uses (docs/kafka.md), and the `/metrics` table
//! (`doc_facts/metrics.rs`). docs/schema.md's and docs/otlp.md's tables: `wire_docs.rs`.

mod architecture;
mod examples;
mod metrics;

use std::collections::BTreeSet;

use clap::{Args, Command};
use gpuship::config::{Config, OPTION_KEYS};
use gpuship_sinks::schema::schema_for;
use gpuship_sinks::EventKind;

use crate::support::markdown::{cells, code_spans};
use crate::support::repo_root;

/// A file of the repository, as text.
pub(crate) fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The cells of the Markdown table rows of `text` whose first cell starts with `first`.
pub(crate) fn table_rows(text: &str, first: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|line| line.starts_with(&format!("| {first}")))
        .filter_map(cells)
        .collect()
}

fn kind_names() -> BTreeSet<String> {
    EventKind::ALL
        .iter()
        .map(|kind| kind.as_str().to_string())
        .collect()
}

/// The paragraph of `text` that starts with `start` (up to the next blank line).
fn paragraph<'a>(text: &'a str, start: &str) -> &'a str {
    let at = text
        .find(start)
        .unwrap_or_else(|| panic!("no paragraph starting {start:?}"));
    let rest = &text[at..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

#[test]
fn sink_defaults_and_shared_keys_are_the_documented_ones() {
    let doc = read("docs/configuration.md");
    let kinds = table_rows(&doc, "`kinds`");
    assert_eq!(kinds.len(), 1, "one `kinds` row in docs/configuration.md");
    // `["xid", "cuda"]`: the quoted names.
    let documented: BTreeSet<String> = kinds[0][1]
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    assert_eq!(
        documented,
        kind_names(),
        "docs/configuration.md: a sink's default `kinds` is every kind"
    );

    let section = &doc[doc.find("## `[[sinks]]`: shared keys").expect("section")..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |at| at + 3)];
    let keys: BTreeSet<String> = table_rows(section, "`")
        .iter()
        .map(|row| {
            let key = code_spans(&row[0]).remove(0);
            // `[sinks.buffer]` is the key `buffer`.
            key.trim_start_matches("[sinks.")
                .trim_end_matches(']')
                .to_string()
        })
        .collect();
    let code: BTreeSet<String> = OPTION_KEYS
        .iter()
        .chain(&["type"])
        .map(|key| key.to_string())
        .collect();
    assert_eq!(keys, code, "docs/configuration.md's shared keys");
}

#[test]
fn query_help_and_views_doc_name_every_table() {
    let mut command = gpuship_lake::args::QueryArgs::augment_args(Command::new("query"));
    let lake_help = command.render_long_help().to_string();
    let mut agent = <gpuship::cli::Cli as clap::CommandFactory>::command();
    let agent_help = agent
        .find_subcommand_mut("query")
        .expect("gpuship query")
        .render_long_help()
        .to_string();
    let views = read("docs/views.md");
    let tables = paragraph(&views, "The tables are ");
    for kind in kind_names() {
        for (what, help) in [
            ("gpuship-lake query --help", &lake_help),
            ("gpuship help query", &agent_help),
        ] {
            assert!(
                help.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .any(|word| word == kind),
                "`{what}` does not name the table {kind}:\n{help}"
            );
        }
        assert!(
            code_spans(tables).contains(&kind),
            "docs/views.md's query section does not name the table {kind}:\n{tables}"
        );
    }
}

#[test]
fn source_defaults_are_the_documented_ones() {
    let doc = read("docs/operations.md");
    let config = Config::embedded_default();
    let sources = &config.sources;
    let code = [
        ("`[sources.xid] tracepoint`", sources.xid.tracepoint),
        ("`[sources.xid] kmsg`", sources.xid.kmsg),
        ("`[sources.cuda]`", sources.cuda.enabled),
        ("`[sources.driver] ioctl`", sources.driver.ioctl),
        (
            "`[sources.driver] functions`",
            !sources.driver.functions.is_empty(),
        ),
    ];
    for (key, on) in code {
        let rows = table_rows(&doc, key);
        assert_eq!(rows.len(), 1, "one {key} row in docs/operations.md");
        let documented = match rows[0][1].as_str() {
            "on" => true,
            "off" | "none" => false,
            other => panic!("{key}: default {other:?} is neither on nor off/none"),
        };
        assert_eq!(documented, on, "docs/operations.md: the default of {key}");
    }
}

#[test]
fn kafka_doc_says_which_kinds_carry_the_gpu_of_the_key() {
    let doc = read("docs/kafka.md");
    let rows = table_rows(&doc, "`");
    let documented: Vec<(String, bool)> = rows
        .iter()
        .filter(|row| row.len() == 2 && kind_names().contains(&code_spans(&row[0])[0]))
        .map(|row| {
            let carries = !&row[1].starts_with("no such column");
            (code_spans(&row[0]).remove(0), carries)
        })
        .collect();
    let code: Vec<(String, bool)> = EventKind::ALL
        .iter()
        .map(|&kind| {
            let has = schema_for(kind).field_with_name("pci_bus_id").is_ok();
            (kind.as_str().to_string(), has)
        })
        .collect();
    assert_eq!(
        documented, code,
        "docs/kafka.md's table of the kinds whose rows carry `pci_bus_id` (in kind order)"
    );
}
