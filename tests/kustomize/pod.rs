//! The agent's pod as each overlay renders it: exactly the capabilities it needs and nothing
//! privileged by default (the `privileged` component lifts that), every taint tolerated, the
//! GPU nodes of each platform selected, the mounts each platform needs, and probes that tell
//! a wedged agent (restart it) from one whose sink is down (not ready, keep it).

use serde_json::{json, Value};

use super::render::{overlay, Rendered};
use super::{an_install, OVERLAYS};

/// The capabilities the agent's container adds to an empty set (base/daemonset.yaml): the
/// list the container test runs the image with.
pub const CAPABILITIES: [&str; 5] = ["BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH", "SYSLOG"];

fn least_privilege() -> Value {
    json!({
        "runAsUser": 0,
        "runAsGroup": 0,
        "runAsNonRoot": false,
        "privileged": false,
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"], "add": CAPABILITIES},
        "seccompProfile": {"type": "RuntimeDefault"},
        "appArmorProfile": {"type": "Unconfined"},
    })
}

#[test]
fn the_agent_runs_with_exactly_its_capabilities_and_nothing_privileged() {
    for name in OVERLAYS {
        let rendered = overlay(name);
        assert_eq!(
            rendered.container()["securityContext"],
            least_privilege(),
            "{name}"
        );
        let pod = &rendered.daemonset()["spec"]["template"]["spec"];
        assert!(pod.get("securityContext").is_none(), "{name}: {pod}");
        assert!(
            pod.get("hostNetwork").is_none() && pod.get("hostIPC").is_none(),
            "{name}"
        );
        assert_eq!(pod["automountServiceAccountToken"], false, "{name}");
        assert!(!rendered.text.contains("privileged: true"), "{name}");
    }
    // The same list in the manifest's own words (the container test reads it there).
    let base = crate::support::operator_kit::read("deploy/kubernetes/base/daemonset.yaml");
    let listed: Vec<&str> = base
        .lines()
        .skip_while(|l| l.trim() != "add:")
        .skip(1)
        .map_while(|l| l.trim().strip_prefix("- "))
        .collect();
    assert_eq!(listed, CAPABILITIES);
}

#[test]
fn the_privileged_component_lifts_the_restrictions() {
    let rendered = an_install(true);
    assert_eq!(
        rendered.container()["securityContext"],
        json!({
            "runAsUser": 0,
            "runAsGroup": 0,
            "runAsNonRoot": false,
            "privileged": true,
            "allowPrivilegeEscalation": true,
            "readOnlyRootFilesystem": true,
            "seccompProfile": {"type": "Unconfined"},
            "appArmorProfile": {"type": "Unconfined"},
        })
    );
    // Everything else as the overlay has it.
    let mut plain = an_install(false).daemonset().clone();
    let mut privileged = rendered.daemonset().clone();
    for daemonset in [&mut plain, &mut privileged] {
        daemonset["spec"]["template"]["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("securityContext");
    }
    assert_eq!(plain, privileged);
}

/// Host PID namespace, every taint tolerated (a GPU-health NoExecute taint must not evict it),
/// node-critical priority, time to drain, one node in ten at a time in a rollout.
#[test]
fn the_agent_stays_on_tainted_gpu_nodes_and_drains_on_stop() {
    for name in OVERLAYS {
        let rendered = overlay(name);
        let spec = &rendered.daemonset()["spec"];
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["hostPID"], true, "{name}");
        assert_eq!(
            pod["tolerations"],
            json!([{"operator": "Exists"}]),
            "{name}"
        );
        assert_eq!(pod["priorityClassName"], "system-node-critical", "{name}");
        assert_eq!(pod["terminationGracePeriodSeconds"], 60, "{name}");
        assert_eq!(pod["serviceAccountName"], "gpuship", "{name}");
        assert_eq!(
            spec["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}),
            "{name}"
        );
        let container = rendered.container();
        assert_eq!(
            container["args"],
            json!(["run", "--config", "/etc/gpuship/gpuship.toml"])
        );
        assert_eq!(
            container["env"],
            json!([{"name": "K8S_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}])
        );
        assert_eq!(
            container["resources"],
            json!({"requests": {"cpu": "200m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}})
        );
    }
    // GKE admits node-critical pods outside kube-system up to a quota that names the class.
    assert_eq!(
        overlay("gke").kind("ResourceQuota")["spec"],
        json!({
            "hard": {"pods": "15000"},
            "scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["system-node-critical"]}
            ]},
        })
    );
}

/// Startup and liveness on /metrics (answered while the process serves, whatever its sinks
/// do); readiness on /health (503 while starting, draining or with a sink down).
#[test]
fn the_probes_restart_a_wedged_agent_and_unready_one_whose_sink_is_down() {
    for name in OVERLAYS {
        let container = overlay(name).container().clone();
        let get = |path: &str| json!({"path": path, "port": "metrics"});
        assert_eq!(
            container["startupProbe"],
            json!({"httpGet": get("/metrics"), "periodSeconds": 5, "failureThreshold": 60})
        );
        assert_eq!(
            container["livenessProbe"],
            json!({"httpGet": get("/metrics"), "periodSeconds": 20, "timeoutSeconds": 10, "failureThreshold": 6})
        );
        assert_eq!(
            container["readinessProbe"],
            json!({"httpGet": get("/health"), "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3})
        );
    }
}

/// (volume name, its source, where the container mounts it, read-only, propagation) of every
/// volume, in the pod's order.
fn mounts(rendered: &Rendered) -> Vec<Value> {
    let pod = &rendered.daemonset()["spec"]["template"]["spec"];
    let container = rendered.container();
    pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|volume| {
            let name = &volume["name"];
            let found: Vec<&Value> = container["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| &m["name"] == name)
                .collect();
            assert_eq!(found.len(), 1, "{name}");
            let mut source = volume.clone();
            source.as_object_mut().unwrap().remove("name");
            json!([
                name,
                source,
                found[0]["mountPath"],
                found[0]["readOnly"],
                found[0]["mountPropagation"]
            ])
        })
        .collect()
}

fn host(path: &str, kind: &str) -> Value {
    json!({"hostPath": {"path": path, "type": kind}})
}

/// What every overlay mounts: the config, the state on the host, a scratch /tmp, tracefs, the
/// kernel's BTF, the kernel log and the kubelet's pod log folders.
fn common(config_map: &Value) -> Vec<Value> {
    vec![
        json!(["config", {"configMap": {"name": config_map}}, "/etc/gpuship", true, null]),
        json!([
            "state",
            host("/var/lib/gpuship", "DirectoryOrCreate"),
            "/var/lib/gpuship",
            null,
            null
        ]),
        json!(["tmp", {"emptyDir": {"sizeLimit": "64Mi"}}, "/tmp", null, null]),
        json!([
            "tracefs",
            host("/sys/kernel/tracing", "Directory"),
            "/sys/kernel/tracing",
            true,
            null
        ]),
        json!([
            "btf",
            host("/sys/kernel/btf", "Directory"),
            "/sys/kernel/btf",
            true,
            null
        ]),
        json!([
            "kmsg",
            host("/dev/kmsg", "CharDevice"),
            "/dev/kmsg",
            true,
            null
        ]),
        json!([
            "pod-logs",
            host("/var/log/pods", "DirectoryOrCreate"),
            "/var/log/pods",
            true,
            null
        ]),
    ]
}

#[test]
fn each_overlay_selects_its_gpu_nodes_and_mounts_its_driver() {
    let exists = |key: &str| json!({"matchExpressions": [{"key": key, "operator": "Exists"}]});
    let is = |key: &str, value: &str| json!({"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]});
    let required = |terms: Vec<Value>| json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}});
    for name in OVERLAYS {
        let rendered = overlay(name);
        let pod = &rendered.daemonset()["spec"]["template"]["spec"];
        let config = rendered.kind("ConfigMap")["metadata"]["name"].clone();
        let mut expected = common(&config);
        match name {
            "gke" => {
                assert_eq!(
                    pod["affinity"],
                    required(vec![exists("cloud.google.com/gke-accelerator")])
                );
                assert!(pod.get("nodeSelector").is_none());
                expected.insert(
                    0,
                    json!([
                        "nvidia-libs",
                        host("/home/kubernetes/bin/nvidia/lib64", "Directory"),
                        "/usr/local/nvidia/lib64",
                        true,
                        null
                    ]),
                );
            }
            "host-driver" => {
                assert_eq!(
                    pod["affinity"],
                    required(vec![
                        is("nvidia.com/gpu.present", "true"),
                        is("feature.node.kubernetes.io/pci-10de.present", "true"),
                        is("accelerator", "nvidia"),
                        exists("k8s.amazonaws.com/accelerator"),
                        is("karpenter.k8s.aws/instance-gpu-manufacturer", "nvidia"),
                    ])
                );
                assert!(pod.get("nodeSelector").is_none());
            }
            "gpu-operator" => {
                assert_eq!(
                    pod["nodeSelector"],
                    json!({"nvidia.com/gpu.present": "true"})
                );
                assert!(pod.get("affinity").is_none());
                expected.insert(
                    0,
                    json!([
                        "run-nvidia",
                        host("/run/nvidia", "DirectoryOrCreate"),
                        "/run/nvidia",
                        true,
                        "HostToContainer"
                    ]),
                );
            }
            other => panic!("{other}"),
        }
        assert_eq!(mounts(&rendered), expected, "{name}");
    }
}
