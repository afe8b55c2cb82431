//! What tests/operator_kit.rs reads out of the operator kit (the Prometheus rules, their unit
//! tests, the Grafana dashboard) and the validators it runs on them, installed by
//! `make testenv`: promtool (Debian's prometheus package) and TypeScript's compiler with
//! Grafana's schema types (@grafana/schema, npm). A missing tool fails the test, naming
//! `make testenv`: a check that skipped would pass CI without having run.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fmt::Write as _;
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

/// The panel types the schema check knows: type, its module of @grafana/schema, and whether
/// its field config has a `custom` part.
const PANEL_KINDS: &[(&str, &str, bool)] = &[
    (
        "timeseries",
        "timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen",
        true,
    ),
    ("table", "table/panelcfg/x/TablePanelCfg_types.gen", true),
    ("stat", "stat/panelcfg/x/StatPanelCfg_types.gen", false),
];

/// TypeScript that compiles exactly when `dashboard` fits Grafana's schema types: the whole
/// dashboard as `Dashboard`, each panel's options, field-config `custom` part and override
/// values as its panel kind's types. Each checked value is preceded by a `//` line naming it.
fn schema_check_source(dashboard: &Value) -> String {
    let mut ts = String::from("import type { Dashboard, FieldConfig } from '@grafana/schema';\n");
    for (kind, module, _) in PANEL_KINDS {
        let from = format!("@grafana/schema/dist/esm/raw/composable/{module}");
        let _ = writeln!(ts, "import type * as {kind} from '{from}';");
    }
    // Grafana's JSON holds an enum's values where the TypeScript types name enum members
    // (nominal types): compare the JSON with the members' values instead.
    ts.push_str(
        "type Json<T> = T extends string ? `${T}`\n  \
         : T extends number | boolean | null | undefined ? T\n  \
         : T extends Array<infer U> ? Array<Json<U>>\n  \
         : T extends object ? { [K in keyof T]: Json<T[K]> } : T;\n",
    );
    let mut count = 0;
    let mut check = |what: &str, ty: &str, value: &Value| {
        count += 1;
        let _ = writeln!(
            ts,
            "// {what}\nexport const v{count}: Json<{ty}> = {value};"
        );
    };
    check("the dashboard", "Dashboard", dashboard);
    for panel in panels(dashboard) {
        let (kind, title) = (panel["type"].as_str().expect("panel type"), &panel["title"]);
        if kind == "row" {
            continue;
        }
        let &(_, _, has_custom) = PANEL_KINDS
            .iter()
            .find(|(k, _, _)| *k == kind)
            .unwrap_or_else(|| panic!("panel {title}: no schema check for panel type {kind}"));
        let what = |part: &str| format!("panel {title}: {part}");
        check(
            &what("options"),
            &format!("{kind}.Options"),
            &panel["options"],
        );
        let custom = &panel["fieldConfig"]["defaults"]["custom"];
        if has_custom {
            let ty = format!("{kind}.FieldConfig");
            check(&what("fieldConfig.defaults.custom"), &ty, custom);
        } else {
            assert!(
                custom.is_null(),
                "panel {title}: {kind} has no custom field config"
            );
        }
        let overrides = panel["fieldConfig"]["overrides"].as_array();
        for (o, item) in overrides.into_iter().flatten().enumerate() {
            for property in item["properties"].as_array().expect("properties") {
                let id = property["id"].as_str().expect("override property id");
                let ty = match id.strip_prefix("custom.") {
                    Some(key) if has_custom => {
                        format!("NonNullable<{kind}.FieldConfig[\"{key}\"]>")
                    }
                    Some(_) => panic!("panel {title}: {kind} has no custom field config ({id})"),
                    None => format!("NonNullable<FieldConfig[\"{id}\"]>"),
                };
                check(
                    &what(&format!("override {o} {id}")),
                    &ty,
                    &property["value"],
                );
            }
        }
    }
    ts
}

/// Type-checks `dashboard` with TypeScript's compiler against @grafana/schema; whether it
/// passed, and the compiler's errors, each followed by the name of the value it is about.
pub fn schema_check(dashboard: &Value) -> (bool, String) {
    let tsc = testenv_tool("node/node_modules/.bin/tsc");
    // Inside the environment's folder, so that `@grafana/schema` resolves to its node_modules.
    let dir = tempfile::Builder::new()
        .prefix("dashboard-check-")
        .tempdir_in(repo_root().join("target/testenv/node"))
        .expect("tempdir");
    let source = schema_check_source(dashboard);
    std::fs::write(dir.path().join("check.ts"), &source).expect("writing check.ts");
    let config = serde_json::json!({
        "compilerOptions": {
            "strict": true, "noEmit": true, "skipLibCheck": true, "types": [],
            "module": "preserve", "moduleResolution": "bundler", "target": "es2022"
        },
        "files": ["check.ts"]
    });
    std::fs::write(dir.path().join("tsconfig.json"), config.to_string()).expect("tsconfig");
    let project = dir.path().join("tsconfig.json");
    let project = project.to_str().expect("a UTF-8 path");
    let (ok, text) = run(&tsc, &["--pretty", "false", "-p", project]);
    let lines: Vec<&str> = source.lines().collect();
    let mut report = String::new();
    for error in text.lines() {
        let _ = writeln!(report, "{error}");
        // `check.ts(LINE,COLUMN): error ...`: name the value from the comment above LINE.
        let line = error
            .split_once("check.ts(")
            .and_then(|(_, rest)| rest.split(',').next())
            .and_then(|n| n.parse::<usize>().ok());
        if let Some(comment) = line.and_then(|l| {
            lines[..l.saturating_sub(1)]
                .iter()
                .rev()
                .find(|s| s.starts_with("//"))
        }) {
            let _ = writeln!(report, "    in {}", &comment[3..]);
        }
    }
    (ok, report)
}
