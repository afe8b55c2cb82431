//! The operator kit's Grafana dashboard (deploy/grafana/gpuship.json): TypeScript's compiler
//! checks it against Grafana's own schema types and is shown to reject broken dashboards; every
//! query parses as PromQL; panels, ids, titles and variables hold together.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::dashboard;
use crate::support::grafana_schema::schema_check;
use crate::support::operator_kit::{dashboard_queries, panels, promtool, read};

#[test]
fn the_dashboard_matches_grafanas_schema() {
    // The version the Makefile pins is the one that checks.
    let makefile = read("Makefile");
    let pinned = makefile
        .split_whitespace()
        .find_map(|w| w.strip_prefix("@grafana/schema@"))
        .expect("the Makefile pins @grafana/schema");
    let installed: Value = serde_json::from_str(&read(
        "target/testenv/node/node_modules/@grafana/schema/package.json",
    ))
    .expect("make testenv installs @grafana/schema");
    assert_eq!(installed["version"], pinned, "run `make testenv`");
    let (ok, report) = schema_check(&dashboard());
    assert!(ok, "the dashboard does not fit @grafana/schema:\n{report}");
}

#[test]
fn the_schema_check_rejects_broken_dashboards() {
    let mut broken = dashboard();
    let first = |wanted: &dyn Fn(&Value) -> bool| {
        broken["panels"]
            .as_array()
            .unwrap()
            .iter()
            .position(wanted)
            .expect("a panel to break")
    };
    let series = first(&|p| p["type"] == "timeseries");
    let stat = first(&|p| p["type"] == "stat");
    let table = first(&|p| {
        p["type"] == "table"
            && p["fieldConfig"]["overrides"]
                .as_array()
                .is_some_and(|o| !o.is_empty())
    });
    let panels = &mut broken["panels"];
    panels[series]["options"]["legend"]["displayMode"] = "tabular".into();
    panels[stat]["options"]
        .as_object_mut()
        .unwrap()
        .remove("reduceOptions");
    panels[table]["fieldConfig"]["overrides"][0]["properties"][0]["id"] = "custom.widthh".into();
    panels[table]["fieldConfig"]["defaults"]["custom"]["align"] = "middle".into();
    panels[series]["gridPosition"] = serde_json::json!({"x": 0});
    let (ok, report) = schema_check(&broken);
    assert!(!ok, "{report}");
    for error in [
        "'\"tabular\"' is not assignable",
        "Property 'reduceOptions' is missing",
        "Property 'widthh' does not exist",
        "'\"middle\"' is not assignable",
        "'\"gridPosition\"' does not exist",
    ] {
        assert!(report.contains(error), "no {error:?} in:\n{report}");
    }
}

/// Every dashboard query is PromQL that Prometheus parses, once Grafana has put in its
/// variables: promtool checks them as recording rules.
#[test]
fn every_dashboard_query_parses_as_promql() {
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let queries = dashboard_queries(&dashboard());
    for (n, (_, expr)) in queries.iter().enumerate() {
        let expr = expr
            .replace("$__rate_interval", "2m")
            .replace("$__range", "6h")
            .replace("$__interval", "1m")
            .replace("$instance", ".*")
            .replace("$gpu", ".*");
        assert!(!expr.contains('$'), "a variable outside a matcher: {expr}");
        rules.push_str(&format!(
            "      - record: dashboard:query_{n}\n        expr: {}\n",
            serde_json::to_string(&expr).unwrap()
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("queries.yaml");
    std::fs::write(&file, &rules).unwrap();
    let (ok, text) = promtool(&["check", "rules", &file.display().to_string()]);
    assert!(ok, "{text}\n{rules}");
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{text}"
    );
}

/// Panels sit on Grafana's 24-column grid without overlapping; ids and titles are unique;
/// every query uses the dashboard's data-source variable and only variables the dashboard
/// defines.
#[test]
fn the_dashboard_layout_and_variables_hold_together() {
    let dashboard = dashboard();
    let variables: BTreeSet<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(variables, BTreeSet::from(["datasource", "instance", "gpu"]));
    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    let mut cells: BTreeMap<(i64, i64), String> = BTreeMap::new();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or_default().to_string();
        assert!(
            ids.insert(panel["id"].as_i64().unwrap()),
            "duplicate id: {title}"
        );
        let grid = |k: &str| panel["gridPos"][k].as_i64().unwrap();
        assert!(
            grid("x") + grid("w") <= 24,
            "{title} is wider than the grid"
        );
        for x in grid("x")..grid("x") + grid("w") {
            for y in grid("y")..grid("y") + grid("h") {
                if let Some(other) = cells.insert((x, y), title.clone()) {
                    panic!("{title} overlaps {other}");
                }
            }
        }
        if panel["type"] == "row" {
            continue;
        }
        assert!(
            titles.insert(title.clone()),
            "two panels are titled {title}"
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let mut refs = BTreeSet::new();
        for target in panel["targets"].as_array().unwrap() {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            assert!(
                refs.insert(target["refId"].as_str().unwrap()),
                "{title}: refId twice"
            );
            let expr = target["expr"].as_str().unwrap();
            for used in expr.split('$').skip(1) {
                let name: String = used
                    .trim_start_matches('{')
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    name.starts_with("__") || variables.contains(name.as_str()),
                    "{title}: ${name} is not a variable of the dashboard"
                );
            }
        }
    }
}
