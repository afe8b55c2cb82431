//! The Grafana dashboard's schema check for tests/operator_kit.rs: TypeScript's compiler
//! (installed by `make testenv`) type-checks the dashboard, each panel's options, field config
//! and overrides against Grafana's schema types (@grafana/schema, npm).

use std::fmt::Write as _;

use serde_json::Value;

use super::operator_kit::{panels, run, testenv_tool};
use super::repo_root;

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
