//! docs/operations.md's `/metrics` tables against what a running agent serves: every family
//! the agent declares is documented and every documented family is declared (names, types),
//! and each family's samples carry exactly the labels the table lists.

use std::collections::{BTreeMap, BTreeSet};

use super::{read, table_rows};
use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::markdown::code_spans;
use crate::support::metrics::http;
use crate::support::Fixtures;

/// A family as documented or served: its type and its label names.
type Families = BTreeMap<String, (String, BTreeSet<String>)>;

/// The names of a table's first cell: `` `a_total` / `_b_total` `` is `a_total` and `b_total`
/// (a name starting with `_` replaces as many trailing words of the one before).
fn row_names(cell: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for name in code_spans(cell) {
        match (name.strip_prefix('_'), names.first()) {
            (Some(suffix), Some(base)) => {
                let words: Vec<&str> = base.split('_').collect();
                let keep = words.len() - suffix.split('_').count();
                names.push(format!("{}_{suffix}", words[..keep].join("_")));
            }
            _ => names.push(name),
        }
    }
    names
}

/// `ring` -> {ring}; `outcome (`a`, `b`)` -> {outcome}; `` -> {}.
fn label_names(cell: &str) -> BTreeSet<String> {
    let mut plain = String::new();
    let mut depth = 0;
    for c in cell.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    plain
        .split(',')
        .map(|label| label.trim().to_string())
        .filter(|label| !label.is_empty())
        .collect()
}

fn documented() -> Families {
    let doc = read("docs/operations.md");
    let mut families = Families::new();
    for row in table_rows(&doc, "`gpuship_") {
        if !["counter", "gauge", "histogram"].contains(&row[1].as_str()) {
            continue; // the cardinality table
        }
        for name in row_names(&row[0]) {
            let labels = label_names(&row[2]);
            let previous = families.insert(name.clone(), (row[1].clone(), labels));
            assert!(previous.is_none(), "{name} documented twice");
        }
    }
    families
}

/// Families from the `# TYPE` lines (counters get their `_total` back), labels from samples.
fn served(text: &str) -> Families {
    let mut families = Families::new();
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let (name, kind) = declared.split_once(' ').expect("# TYPE name type");
            let name = match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_string(),
            };
            families.insert(name, (kind.to_string(), BTreeSet::new()));
        }
    }
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let series = line.rsplit_once(' ').expect("sample").0;
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|suffix| name.strip_suffix(suffix))
            .find(|base| families.get(*base).is_some_and(|f| f.0 == "histogram"))
            .unwrap_or(name);
        let entry = families
            .get_mut(family)
            .unwrap_or_else(|| panic!("sample of an undeclared family: {line}"));
        for pair in labels
            .trim_end_matches('}')
            .split("\",")
            .filter(|p| !p.is_empty())
        {
            let label = pair.split_once('=').expect("label=value").0;
            if label != "le" {
                entry.1.insert(label.to_string());
            }
        }
    }
    families
}

#[test]
fn the_metrics_tables_list_what_the_agent_serves() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    // Library discovery and OTLP metrics on, so that their families are served too (the
    // OTLP exports fail: nothing listens on port 1).
    let config = fixtures.cuda_config(data.path(), r#"["default"]"#).replace(
        "[sources.cuda]\n",
        "[sources.cuda]\ndiscover_libraries = true\nlibrary_rescan_secs = 3600\n",
    ) + "\n[metrics]\naddress = \"127.0.0.1:0\"\n[metrics.otlp]\n\
           endpoint = \"http://127.0.0.1:1\"\ninterval_secs = 1\ntimeout_secs = 1\n";
    let agent = Agent::start(&config, &[]);
    fixtures.run_workload(&["launches", "200"], &[]);
    let address = agent.metrics_address();
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the calls on /metrics",
        || {
            http(&address, "GET /metrics HTTP/1.1\r\n\r\n")
                .1
                .contains("gpuship_cuda_calls_total{")
        },
        || agent.log(),
    );
    let (status, text) = http(&address, "GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, 200);
    agent.stop();

    let served = served(&text);
    let documented = documented();
    let names = |f: &Families| f.keys().cloned().collect::<BTreeSet<_>>();
    let undocumented: Vec<_> = names(&served)
        .difference(&names(&documented))
        .cloned()
        .collect();
    let unserved: Vec<_> = names(&documented)
        .difference(&names(&served))
        .cloned()
        .collect();
    assert_eq!(
        (undocumented, unserved),
        (vec![], vec![]),
        "(served but not in docs/operations.md, documented but not served)"
    );
    // A family with no sample in this run shows no labels; the others show all of theirs.
    let differing: Vec<String> = served
        .iter()
        .filter(|(name, (kind, labels))| {
            let (documented_kind, documented_labels) = &documented[*name];
            kind != documented_kind || (!labels.is_empty() && labels != documented_labels)
        })
        .map(|(name, served)| {
            format!(
                "{name}: served {served:?}, documented {:?}",
                documented[name]
            )
        })
        .collect();
    assert!(
        differing.is_empty(),
        "types or labels that differ from docs/operations.md:\n{}",
        differing.join("\n")
    );
}
