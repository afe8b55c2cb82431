//! What tests/operator_kit.rs reads out of the operator kit (the Prometheus rules, their unit
//! tests, the Grafana dashboard) and the validators it runs on them, installed by
//! `make testenv`: promtool (Debian's prometheus package) and TypeScript's compiler with
//! Grafana's schema types (@grafana/schema, npm). A missing tool fails the test, naming
//! `make testenv`: a check that skipped would pass CI without having run. The dashboard's check
//! against Grafana's schema types: `grafana_schema.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::repo_root;

/// The alerting rules.
pub const RULES: &str = "deploy/prometheus/gpuship-rules.yaml";
/// Their unit tests (`promtool test rules`).
pub const RULE_TESTS: &str = "deploy/prometheus/gpuship-rules.test.yaml";
/// The example scrape configuration.
pub const PROMETHEUS_CONFIG: &str = "deploy/prometheus/prometheus.yml";
/// The dashboard.
pub const DASHBOARD: &str = "deploy/grafana/gpuship.json";

/// A file of the repository, as text.
pub fn read(relative: &str) -> String {
    let path = repo_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A program of the test environment (under target/testenv); panics when it is missing.
pub fn testenv_tool(relative: &str) -> PathBuf {
    let path = repo_root().join("target/testenv").join(relative);
    assert!(
        path.is_file(),
        "{} is missing: run `make testenv` (make test does)",
        path.display()
    );
    path
}

/// Runs `program` with `args`; whether it succeeded, and its stdout and stderr together.
pub fn run<S: AsRef<OsStr>>(program: &Path, args: &[S]) -> (bool, String) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// `promtool ARGS...`.
pub fn promtool<S: AsRef<OsStr>>(args: &[S]) -> (bool, String) {
    run(&testenv_tool("bin/promtool"), args)
}

/// Words that are PromQL keywords or aggregation operators, never metric names.
const KEYWORDS: &str = "and or unless bool offset atan2 inf nan sum avg count min max group \
    stddev stdvar topk bottomk quantile count_values limitk limit_ratio";
/// Keywords followed by a list of label names in parentheses.
const LABEL_LISTS: &str = "by without on ignoring group_left group_right";

/// The metric names a PromQL expression selects: the identifiers outside strings, label
/// matchers (`{...}`), ranges (`[...]`), label lists (`by (...)`, `on (...)`, ...) and comments
/// that are not function names (followed by `(`), keywords, numbers or durations. Grafana's
/// variables (`$instance`, `${gpu}`, `$__range`) are left out.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            quote @ ('"' | '\'' | '`') => i = skip_string(&chars, i, quote),
            '{' => i = skip_group(&chars, i, '{', '}'),
            '[' => i = skip_group(&chars, i, '[', ']'),
            '#' => {
                i = chars[i..]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(chars.len(), |n| i + n)
            }
            '$' if chars.get(i + 1) == Some(&'{') => i = skip_group(&chars, i + 1, '{', '}'),
            '$' => i = skip_while(&chars, i + 1, ident),
            c if c.is_ascii_digit() || c == '.' => {
                i = skip_while(&chars, i, |c| ident(c) || c == '.')
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let end = skip_while(&chars, i, ident);
                let word: String = chars[i..end].iter().collect();
                let after = skip_while(&chars, end, char::is_whitespace);
                let call = chars.get(after) == Some(&'(');
                i = end;
                let lower = word.to_ascii_lowercase();
                if LABEL_LISTS.split_whitespace().any(|k| k == word) {
                    if call {
                        i = skip_group(&chars, after, '(', ')');
                    }
                } else if !call && !KEYWORDS.split_whitespace().any(|k| k == lower) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

fn skip_while(chars: &[char], from: usize, keep: impl Fn(char) -> bool) -> usize {
    chars[from..]
        .iter()
        .position(|&c| !keep(c))
        .map_or(chars.len(), |n| from + n)
}

/// The index after the string that starts at `from` (backslash escapes, except in backticks).
fn skip_string(chars: &[char], from: usize, quote: char) -> usize {
    let mut i = from + 1;
    while i < chars.len() && chars[i] != quote {
        i += if chars[i] == '\\' && quote != '`' {
            2
        } else {
            1
        };
    }
    i + 1
}

/// The index after the group that opens at `from`, over strings and nested groups.
fn skip_group(chars: &[char], from: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            quote @ ('"' | '\'' | '`') => {
                i = skip_string(chars, i, quote);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    chars.len()
}

/// One alerting rule: its name and expression.
#[derive(Debug)]
pub struct Rule {
    pub alert: String,
    pub expr: String,
}

/// The rules of a rules file, read line by line: `- alert: NAME` and its `expr:`, inline or as
/// a block scalar (`expr: |`). The tests compare the count with promtool's.
pub fn rules(yaml: &str) -> Vec<Rule> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut rules = Vec::new();
    let mut alert = None;
    for (n, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            alert = Some(name.trim().to_string());
        } else if let Some(value) = trimmed.strip_prefix("expr:") {
            let value = value.trim();
            let expr = if value.starts_with('|') || value.starts_with('>') {
                let indent = line.len() - trimmed.len();
                lines[n + 1..]
                    .iter()
                    .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
                    .map(|l| l.trim())
                    .collect::<Vec<_>>()
                    .join("\n")
            } else {
                value.trim_matches(|c| c == '"' || c == '\'').to_string()
            };
            let alert = alert
                .take()
                .unwrap_or_else(|| panic!("expr without alert: {line}"));
            rules.push(Rule { alert, expr });
        }
    }
    rules
}

/// Per alert name, how many evaluations of a rules unit-test file expect it to fire
/// (`exp_alerts:` with entries) and how many expect silence (`exp_alerts: []`).
pub fn expectations(test_yaml: &str) -> BTreeMap<String, (usize, usize)> {
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut alert = None;
    for line in test_yaml.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("alertname:") {
            alert = Some(name.trim().to_string());
        } else if let Some(value) = line.strip_prefix("exp_alerts:") {
            let name = alert.take().expect("exp_alerts without alertname");
            let entry = counts.entry(name).or_default();
            if value.trim() == "[]" {
                entry.1 += 1;
            } else {
                entry.0 += 1;
            }
        }
    }
    counts
}

/// The metric names of a rules unit-test file's input series (`- series: 'name{...}'`).
pub fn input_series_names(test_yaml: &str) -> Vec<String> {
    test_yaml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- series:"))
        .map(|s| {
            let s = s.trim().trim_matches(|c| c == '\'' || c == '"');
            s.split('{').next().unwrap_or(s).to_string()
        })
        .collect()
}

/// Every panel of a dashboard, rows' nested panels included.
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel);
        if let Some(nested) = panel["panels"].as_array() {
            all.extend(nested);
        }
    }
    all
}

/// Every PromQL expression of a dashboard, with where it is: each panel target's `expr` and
/// the selector of each query variable's `label_values(SELECTOR, LABEL)`.
pub fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_else(|| {
                panic!("panel {:?}: target without expr: {target}", panel["title"])
            });
            queries.push((format!("panel {}", panel["title"]), expr.to_string()));
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or(variable["query"].as_str())
            .expect("a query variable's query");
        let selector = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.rsplit_once(','))
            .map(|(selector, _label)| selector.trim())
            .unwrap_or_else(|| {
                panic!(
                    "variable {}: not label_values(SELECTOR, LABEL)",
                    variable["name"]
                )
            });
        queries.push((
            format!("variable {}", variable["name"]),
            selector.to_string(),
        ));
    }
    queries
}
