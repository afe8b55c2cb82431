//! The Kubernetes manifests (deploy/kubernetes: a Kustomize base, an overlay per platform, the
//! `privileged` component and the install transformer) as a cluster gets them: each overlay,
//! and an install's own kustomization on top of one, rendered by kubectl's Kustomize; every
//! built-in object checked against the Kubernetes API schemas (`kubernetes-validate
//! --strict`), the PodMonitor and the PrometheusRule against prometheus-operator's CRD schemas
//! (@kubernetes-models/prometheus-operator) and asserted whole; the rules, as rendered into
//! the PrometheusRule, through `promtool check rules` and their unit tests. The tools come
//! from `make testenv`. The pod's security, placement, mounts and probes: `kustomize/pod.rs`;
//! the renderer and validators: `kustomize/render.rs`; the compaction CronJob:
//! `kustomize/compact.rs`.

mod compact;
mod pod;
mod render;

use std::collections::BTreeSet;

use serde_json::{json, Value};

use self::render::{crd_check, install, kubernetes_validate, overlay, yaml_to_json, Rendered};
use crate::support::agent::binary;
use crate::support::operator_kit::{promtool, read, RULES, RULE_TESTS};
use crate::support::repo_root;

/// The overlays, one per platform.
const OVERLAYS: [&str; 3] = ["gke", "host-driver", "gpu-operator"];

/// The runbook base the rules and the base carry until an install sets its own.
const DEFAULT_RUNBOOKS: &str = "https://gpuship.invalid/docs/operations.md";

/// An install's own kustomization, as docs/deploy.md shows it: an overlay, its registry's
/// image, its runbook base and install name, and (with `privileged`) the component.
fn an_install(privileged: bool) -> Rendered {
    let component = if privileged {
        "components:\n  - ../../deploy/kubernetes/components/privileged\n"
    } else {
        ""
    };
    install(&format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources:\n  - ../../deploy/kubernetes/overlays/host-driver\n{component}\
         images:\n  - name: localhost/gpuship\n    newName: registry.example.com/infra/gpuship\n    \
         newTag: 0.1.0-rc1\n\
         configMapGenerator:\n  - name: gpuship-install\n    behavior: merge\n    literals:\n      \
         - runbookBase=https://wiki.example.com/gpuship/operations\n      - install=prod-eks\n\
         transformers:\n  - ../../deploy/kubernetes/install\n"
    ))
}

#[test]
fn every_overlay_renders_the_objects_a_cluster_needs() {
    let config = read("deploy/kubernetes/base/gpuship.toml");
    for name in OVERLAYS {
        let rendered = overlay(name);
        let mut expected = vec![
            "Namespace/gpuship",
            "ServiceAccount/gpuship",
            "ConfigMap/gpuship-config",
            "Service/gpuship-metrics",
            "DaemonSet/gpuship",
            "PodMonitor/gpuship",
            "PrometheusRule/gpuship",
        ];
        if name == "gke" {
            expected.insert(1, "ResourceQuota/gpuship-critical-pods");
        }
        // The ConfigMap's name carries its content's hash; the install settings stay out.
        let kinds: Vec<String> = rendered
            .objects
            .iter()
            .map(|o| {
                let name = o["metadata"]["name"].as_str().unwrap();
                let name = name
                    .strip_prefix("gpuship-config-")
                    .map_or(name, |_| "gpuship-config");
                format!("{}/{name}", o["kind"].as_str().unwrap())
            })
            .collect();
        assert_eq!(kinds, expected, "{name}");
        for object in &rendered.objects[1..] {
            assert_eq!(
                object["metadata"]["namespace"], "gpuship",
                "{name}: {object}"
            );
        }
        let config_map = rendered.kind("ConfigMap");
        assert_eq!(
            config_map["data"],
            json!({ "gpuship.toml": config }),
            "{name}"
        );
        let mounted = &rendered.daemonset()["spec"]["template"]["spec"]["volumes"];
        let volume = mounted
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "config");
        assert_eq!(
            volume.unwrap()["configMap"]["name"],
            config_map["metadata"]["name"],
            "{name}: the DaemonSet mounts the generated ConfigMap"
        );
    }
}

#[test]
fn every_rendered_object_matches_the_kubernetes_api_schemas() {
    let mut renders: Vec<(String, Rendered)> = OVERLAYS
        .iter()
        .map(|n| (n.to_string(), overlay(n)))
        .collect();
    renders.push(("an install, privileged".into(), an_install(true)));
    for (name, rendered) in &renders {
        let (ok, text) = kubernetes_validate(&rendered.text);
        assert!(ok, "{name}: {text}");
        let mut checked = 0;
        for object in &rendered.objects {
            let kind = object["kind"].as_str().unwrap();
            let id = format!(
                "{}/{}",
                kind.to_lowercase(),
                object["metadata"]["name"].as_str().unwrap()
            );
            if kind == "PodMonitor" || kind == "PrometheusRule" {
                // No built-in schema: checked against the CRDs' below.
                assert!(
                    text.contains(&format!("Couldn't find schema for kind {kind}")),
                    "{text}"
                );
            } else {
                assert!(
                    text.contains(&format!("passed for resource {id} against version 1.34")),
                    "{name}: {id}: {text}"
                );
                checked += 1;
            }
        }
        assert!(!text.contains("ERROR") && checked >= 5, "{name}: {text}");
    }
}

#[test]
fn the_podmonitor_and_prometheusrule_match_prometheus_operators_crd_schemas() {
    for rendered in OVERLAYS.map(overlay).into_iter().chain([an_install(false)]) {
        let objects = vec![
            rendered.kind("PodMonitor").clone(),
            rendered.kind("PrometheusRule").clone(),
        ];
        let (ok, text) = crd_check(&objects);
        assert!(ok, "{text}");
        assert_eq!(
            text.trim(),
            "valid PodMonitor/gpuship\nvalid PrometheusRule/gpuship"
        );
    }
}

#[test]
fn the_schema_checks_reject_broken_objects() {
    let rendered = overlay("gpu-operator");
    let misspelt = rendered
        .text
        .replace("mountPropagation:", "mountPropogation:");
    let (_, text) = kubernetes_validate(&misspelt);
    assert!(
        text.contains("did not validate for resource daemonset/gpuship")
            && text.contains("'mountPropogation' was unexpected"),
        "{text}"
    );
    let mut monitor = rendered.kind("PodMonitor").clone();
    monitor["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["action"] = json!("copy");
    let mut rule = rendered.kind("PrometheusRule").clone();
    rule["spec"]["groups"][0]["rules"][2]["for"] = json!("5 minutes");
    let (ok, text) = crd_check(&[monitor, rule]);
    assert!(!ok, "{text}");
    assert!(text.contains("invalid PodMonitor/gpuship: data/spec/podMetricsEndpoints/0/relabelings/0/action must be equal to one of the allowed values"), "{text}");
    assert!(
        text.contains(
            "invalid PrometheusRule/gpuship: data/spec/groups/0/rules/2/for must match pattern"
        ),
        "{text}"
    );
}

/// The PodMonitor, whole: it scrapes the DaemonSet's pods on their metrics port, names each
/// target after its node and sets `gpuship_install` on every series. The Service selects the
/// same pods and keeps the not-ready ones.
#[test]
fn the_podmonitor_scrapes_every_agent_and_labels_its_series() {
    for name in OVERLAYS {
        let rendered = overlay(name);
        assert_eq!(
            *rendered.kind("PodMonitor"),
            podmonitor("gpuship"),
            "{name}"
        );
        let pod = &rendered.daemonset()["spec"]["template"];
        assert_eq!(
            pod["metadata"]["labels"],
            json!({"app.kubernetes.io/name": "gpuship"})
        );
        assert_eq!(
            pod["spec"]["containers"][0]["ports"],
            json!([{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}])
        );
        let service = rendered.kind("Service");
        assert_eq!(
            service["spec"],
            json!({
                "clusterIP": "None",
                "publishNotReadyAddresses": true,
                "selector": {"app.kubernetes.io/name": "gpuship"},
                "ports": [{"name": "metrics", "port": 9464, "targetPort": "metrics", "protocol": "TCP"}],
            })
        );
    }
}

fn podmonitor(install: &str) -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "gpuship", "namespace": "gpuship", "labels": {"app.kubernetes.io/name": "gpuship"}},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "gpuship"}},
            "podMetricsEndpoints": [{
                "port": "metrics",
                "path": "/metrics",
                "interval": "30s",
                "relabelings": [
                    {"action": "replace", "targetLabel": "gpuship_install", "replacement": install},
                    {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"},
                ],
            }],
        },
    })
}

/// The rules file parsed, with its runbook base replaced by `base`.
fn rules_json(base: &str) -> Value {
    let text = read(RULES).replace(&format!("{DEFAULT_RUNBOOKS}#"), &format!("{base}#"));
    yaml_to_json(&text).remove(0)
}

#[test]
fn an_install_sets_its_image_runbook_base_and_install_label() {
    let rendered = an_install(false);
    let container = &rendered.daemonset()["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        "registry.example.com/infra/gpuship:0.1.0-rc1"
    );
    assert_eq!(*rendered.kind("PodMonitor"), podmonitor("prod-eks"));
    let base = "https://wiki.example.com/gpuship/operations";
    let spec = &rendered.kind("PrometheusRule")["spec"];
    assert_eq!(*spec, rules_json(base));
    let urls: Vec<&str> = spec["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["annotations"]["runbook_url"].as_str().unwrap())
        .collect();
    let alerts: BTreeSet<String> = spec["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{base}#{}", r["alert"].as_str().unwrap().to_lowercase()))
        .collect();
    assert_eq!(urls.len(), 9);
    assert_eq!(
        urls.iter().map(|u| u.to_string()).collect::<BTreeSet<_>>(),
        alerts
    );
    // Without an install's settings: the image deploy/container builds, the default base.
    let default = overlay("host-driver");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        default.daemonset()["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("localhost/gpuship:{version}")
    );
    assert_eq!(
        default.kind("PrometheusRule")["spec"],
        rules_json(DEFAULT_RUNBOOKS)
    );
    assert_eq!(*default.kind("PodMonitor"), podmonitor("gpuship"));
}

/// The install kustomization docs/deploy.md shows renders, with the settings it names.
#[test]
fn the_documented_install_renders_with_its_settings() {
    let doc = read("docs/deploy.md");
    let kustomization: String = doc
        .lines()
        .skip_while(|l| {
            !l.starts_with("mkdir -p my-gpuship && cat > my-gpuship/kustomization.yaml")
        })
        .skip(1)
        .take_while(|l| *l != "EOF")
        .map(|l| format!("{}\n", l.replace("../gpuship/", "../../")))
        .collect();
    assert!(kustomization.contains("transformers:"), "{kustomization}");
    let rendered = install(&kustomization);
    assert_eq!(
        rendered.container()["image"],
        "registry.example.com/infra/gpuship:0.1.0"
    );
    let base = "https://git.example.com/infra/gpuship/-/blob/v0.1.0/docs/operations.md";
    assert_eq!(rendered.kind("PrometheusRule")["spec"], rules_json(base));
    let mut monitor = podmonitor("prod-gke");
    monitor["metadata"]["labels"]["release"] = json!("kube-prometheus-stack");
    assert_eq!(*rendered.kind("PodMonitor"), monitor);
    assert_eq!(
        rendered.kind("PrometheusRule")["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(
        rendered.daemonset()["spec"]["selector"],
        json!({"matchLabels": {"app.kubernetes.io/name": "gpuship"}})
    );
}

/// base/prometheusrule.yaml is what deploy/kubernetes/prometheusrule.sh makes of the rules.
#[test]
fn the_prometheusrule_is_the_rules_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("prometheusrule.yaml");
    let script = repo_root().join("deploy/kubernetes/prometheusrule.sh");
    let status = std::process::Command::new("sh")
        .arg(&script)
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        std::fs::read_to_string(&out).unwrap()
            == read("deploy/kubernetes/base/prometheusrule.yaml"),
        "base/prometheusrule.yaml is stale: run deploy/kubernetes/prometheusrule.sh"
    );
}

/// The rules as the cluster gets them (spec.groups of the rendered PrometheusRule, with an
/// install's runbook base) pass `promtool check rules` and the rules' unit tests, among them
/// alerts under kube-prometheus-stack's job names.
#[test]
fn the_rendered_rules_pass_promtool_and_their_unit_tests() {
    let base = "https://wiki.example.com/gpuship/operations";
    let spec = an_install(false).kind("PrometheusRule")["spec"].clone();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("gpuship-rules.yaml");
    std::fs::write(&rules, serde_json::to_string_pretty(&spec).unwrap()).unwrap();
    let (ok, text) = promtool(&["check", "rules", rules.to_str().unwrap()]);
    assert!(ok && text.contains("SUCCESS: 9 rules found"), "{text}");
    let tests = read(RULE_TESTS);
    assert!(tests.contains("job=\"monitoring/gpuship-podmonitor\""));
    let tests = tests.replace(&format!("{DEFAULT_RUNBOOKS}#"), &format!("{base}#"));
    let test_file = dir.path().join("gpuship-rules.test.yaml");
    std::fs::write(&test_file, tests).unwrap();
    let (ok, text) = promtool(&["test", "rules", test_file.to_str().unwrap()]);
    assert!(ok && text.contains("SUCCESS"), "{text}");
}

#[test]
fn the_agent_config_in_the_configmap_is_valid() {
    let path = repo_root().join("deploy/kubernetes/base/gpuship.toml");
    let output = std::process::Command::new(binary())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("valid (1 sink(s))"));
}
