//! The operator kit, checked by the tools that will read it: promtool checks the alerting
//! rules (deploy/prometheus/gpuship-rules.yaml) and runs their unit tests, in which every alert
//! fires on the series it is about, with its exact labels and annotations, and stays silent on
//! healthy ones; TypeScript's compiler checks the Grafana dashboard (deploy/grafana/gpuship.json)
//! against Grafana's own schema types; every PromQL query of the dashboard parses; and every
//! metric a rule, a rule test or a panel names is one the agent exposes. Both validators are
//! shown to reject broken input, so a pass means they ran. docs/operations.md, "Operator kit:
//! dashboard and alerts". The dashboard's checks: `operator_kit/grafana.rs`.

mod grafana;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::support::operator_kit::{
    dashboard_queries, expectations, input_series_names, metric_names, promtool, read, rules,
    DASHBOARD, PROMETHEUS_CONFIG, RULES, RULE_TESTS,
};
use crate::support::repo_root;

/// The sample names of `/metrics`: agent/metrics/render.rs writes the pipeline's and
/// agent/metrics/health_render.rs the GPU-health families (listed in health_table.rs). This list must match them. A
/// histogram family appears as its `_bucket`, `_sum` and `_count` samples.
pub(crate) const EXPOSED: &[&str] = &[
    // Pipeline.
    "gpuship_kernel_emitted_events_total",
    "gpuship_kernel_lost_events_total",
    "gpuship_ring_received_events_total",
    "gpuship_ring_pending_events",
    "gpuship_ring_decode_errors_total",
    "gpuship_probe_unmatched_returns_total",
    "gpuship_probe_inflight_full_total",
    "gpuship_probe_aggregated_calls_total",
    "gpuship_probe_stats_full_total",
    "gpuship_kmsg_xid_events_total",
    "gpuship_kmsg_parse_errors_total",
    "gpuship_kmsg_lost_gaps_total",
    "gpuship_component_received_events_total",
    "gpuship_component_sent_events_total",
    "gpuship_component_failed_events_total",
    "gpuship_component_discarded_events_total",
    "gpuship_component_spooled_events_total",
    "gpuship_spool_events",
    "gpuship_buffer_events",
    "gpuship_sink_healthy",
    "gpuship_sink_delivery_errors_total",
    "gpuship_build_info",
    // GPU health.
    "gpuship_gpu_xid_errors_total",
    "gpuship_gpu_last_xid_timestamp_seconds",
    "gpuship_gpu_last_xid_code",
    "gpuship_cuda_calls_total",
    "gpuship_cuda_call_errors_total",
    "gpuship_cuda_call_duration_seconds_bucket",
    "gpuship_cuda_call_duration_seconds_sum",
    "gpuship_cuda_call_duration_seconds_count",
    "gpuship_metrics_series_overflow_total",
];

/// Series Prometheus writes for every target it scrapes.
const PROMETHEUS_SERIES: &[&str] = &["up"];

/// The alerts the kit promises (docs/operations.md lists them).
const ALERTS: &[&str] = &[
    "GpushipFatalXid",
    "GpushipXidStorm",
    "GpushipCudaFailuresRising",
    "GpushipKernelEventsLost",
    "GpushipSinkUnhealthy",
    "GpushipSinkSpooling",
    "GpushipEventsDiscarded",
    "GpushipAgentDown",
];

fn path(relative: &str) -> String {
    repo_root().join(relative).display().to_string()
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON")
}

#[test]
fn the_rules_pass_promtool_check_rules() {
    let rules = rules(&read(RULES));
    let names: BTreeSet<&str> = rules.iter().map(|r| r.alert.as_str()).collect();
    assert_eq!(names, ALERTS.iter().copied().collect::<BTreeSet<_>>());
    let (ok, text) = promtool(&["check", "rules", &path(RULES)]);
    assert!(ok, "{text}");
    // promtool counts the rules the tests read: none is hidden from the checks below.
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "{text}"
    );
}

#[test]
fn every_alert_fires_and_stays_silent_in_the_rules_unit_tests() {
    let expected = expectations(&read(RULE_TESTS));
    for alert in ALERTS {
        let (fires, silent) = expected.get(*alert).copied().unwrap_or_default();
        assert!(
            fires > 0 && silent > 0,
            "{alert}: {fires} evaluations expect it to fire and {silent} expect silence; \
             the unit tests need both"
        );
    }
    let unknown: Vec<&String> = expected
        .keys()
        .filter(|a| !ALERTS.contains(&a.as_str()))
        .collect();
    assert!(unknown.is_empty(), "tests of no rule: {unknown:?}");
    let (ok, text) = promtool(&["test", "rules", &path(RULE_TESTS)]);
    assert!(ok && text.contains("SUCCESS"), "{text}");
}

#[test]
fn promtool_rejects_broken_rules_and_failing_rule_tests() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let unparsable = write(
        "unparsable.yaml",
        "groups:\n  - name: broken\n    rules:\n      - alert: Broken\n        \
         expr: rate(gpuship_kernel_lost_events_total[5m] > 0\n",
    );
    let (ok, text) = promtool(&["check", "rules", &unparsable]);
    assert!(!ok && text.contains("could not parse expression"), "{text}");
    let misspelt = write(
        "misspelt.yaml",
        "groups:\n  - name: broken\n    rules:\n      - alert: Broken\n        expresion: up == 0\n",
    );
    let (ok, text) = promtool(&["check", "rules", &misspelt]);
    assert!(!ok && text.contains("field expresion not found"), "{text}");
    // The real rules against a test that expects another summary: the unit tests can fail.
    write("gpuship-rules.yaml", &read(RULES));
    let tests = read(RULE_TESTS);
    assert!(tests.contains("on gpu-node-1:9464 cannot deliver"));
    let wrong = write(
        "wrong.test.yaml",
        &tests.replace(
            "on gpu-node-1:9464 cannot deliver",
            "on gpu-node-9:9464 cannot deliver",
        ),
    );
    let (ok, text) = promtool(&["test", "rules", &wrong]);
    assert!(
        !ok && text.contains("alertname: GpushipSinkUnhealthy"),
        "{text}"
    );
}

#[test]
fn the_example_scrape_config_passes_promtool_check_config() {
    let (ok, text) = promtool(&["check", "config", &path(PROMETHEUS_CONFIG)]);
    assert!(ok, "{text}");
    assert!(
        text.contains("is valid prometheus config file syntax"),
        "{text}"
    );
    // The rules select no job; the scrape job sets the label they select instead.
    assert!(!read(RULES).contains("job="));
    assert!(read(PROMETHEUS_CONFIG).contains("          gpuship_install: bare-metal\n"));
}

/// The runbook links of the rules are `<base>#<anchor>`, one per rule, and every anchor names a
/// section of docs/operations.md; the base is a placeholder an install replaces
/// (tests/kustomize.rs checks that the overlays do).
#[test]
fn every_runbook_link_names_a_section_of_the_operations_doc() {
    let anchors: BTreeSet<String> = read("docs/operations.md")
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            l.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect();
    let links: Vec<String> = read(RULES)
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("runbook_url: https://gpuship.invalid/docs/operations.md#")
        })
        .map(str::to_string)
        .collect();
    assert_eq!(
        links.len(),
        rules(&read(RULES)).len(),
        "one runbook link per rule"
    );
    for link in links {
        assert!(anchors.contains(&link), "docs/operations.md has no #{link}");
    }
}
#[test]
fn every_metric_name_is_one_the_agent_exposes() {
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut note = |name: String, place: &str| {
        used.entry(name).or_default().insert(place.to_string());
    };
    for rule in rules(&read(RULES)) {
        let names = metric_names(&rule.expr);
        assert!(
            !names.is_empty(),
            "{}: no metric in {}",
            rule.alert,
            rule.expr
        );
        for name in names {
            note(name, &format!("rule {}", rule.alert));
        }
    }
    for name in input_series_names(&read(RULE_TESTS)) {
        note(name, "rule unit tests");
    }
    for (place, expr) in dashboard_queries(&dashboard()) {
        let names = metric_names(&expr);
        assert!(!names.is_empty(), "{place}: no metric in {expr}");
        for name in names {
            note(name, &place);
        }
    }
    let unknown: Vec<_> = used
        .iter()
        .filter(|(name, _)| {
            !EXPOSED.contains(&name.as_str()) && !PROMETHEUS_SERIES.contains(&name.as_str())
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "metrics the agent does not expose: {unknown:?}"
    );
    // The names came out of the queries (the parser found the families they are about).
    for family in [
        "gpuship_gpu_xid_errors_total",
        "gpuship_cuda_call_duration_seconds_bucket",
        "up",
    ] {
        assert!(used.contains_key(family), "{family} not found: {used:?}");
    }
}

#[test]
fn the_metric_name_parser_skips_labels_functions_keywords_and_variables() {
    let names = metric_names(
        r#"sum by (instance, le) (rate(a_bucket{job="x",le=~"0.1|1",q="}"}[5m] offset 1h))
           / on (instance) group_left (version) b:recorded and c > bool 1e9
           or label_replace(d, "e", "$1", "f", "(.*)") unless vector(0) # g
           or histogram_quantile(0.99, h{instance=~"$instance",gpu=~"${gpu}"}[$__rate_interval])
           or max without(x) (i) * Inf"#,
    );
    let expected: BTreeSet<String> = ["a_bucket", "b:recorded", "c", "d", "h", "i"]
        .map(String::from)
        .into();
    assert_eq!(names, expected);
}
