//! The compaction CronJob (deploy/kubernetes/lake-compact) as a cluster gets it: rendered by
//! kubectl's Kustomize, valid for the Kubernetes API schemas, never two runs at once, running
//! `gpuship-lake compact` on the lake its environment names, without privileges.

use serde_json::json;

use super::render::{kubernetes_validate, render};
use crate::support::repo_root;

#[test]
fn the_compaction_cronjob_renders_valid_and_never_overlaps_itself() {
    let rendered = render(&repo_root().join("deploy/kubernetes/lake-compact"));
    assert_eq!(rendered.objects.len(), 1, "{}", rendered.text);
    let (valid, report) = kubernetes_validate(&rendered.text);
    assert!(valid, "{report}");
    let job = rendered.kind("CronJob");
    assert_eq!(job["metadata"]["namespace"], "gpuship");
    assert_eq!(job["spec"]["schedule"], "20 * * * *");
    assert_eq!(job["spec"]["concurrencyPolicy"], "Forbid");
    let pod = &job["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "localhost/gpuship-lake:0.1.0");
    assert_eq!(
        container["command"],
        json!(["/usr/local/bin/gpuship-lake", "compact"])
    );
    assert_eq!(container["args"], json!(["--data", "$(GPUSHIP_LAKE)"]));
    assert_eq!(container["env"][0]["name"], "GPUSHIP_LAKE");
    assert_eq!(container["resources"]["limits"]["memory"], "2Gi");
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
}
