#!/bin/sh
# Writes deploy/prometheus/gpuship-rules.yaml as a PrometheusRule into base/prometheusrule.yaml
# (or into the file named as the argument). Run it after changing the rules; the suite checks
# that the two agree (tests/kustomize.rs).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/base/prometheusrule.yaml}
{
    cat <<'HEAD'
# deploy/prometheus/gpuship-rules.yaml as a PrometheusRule, written by
# deploy/kubernetes/prometheusrule.sh: change the rules there and run the script. The overlays
# set the base of every runbook_url from the install's runbookBase (install.yaml).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: gpuship
  labels:
    app.kubernetes.io/name: gpuship
spec:
HEAD
    sed -n '/^groups:/,$p' "$here/../prometheus/gpuship-rules.yaml" | sed 's/^\(.\)/  \1/'
} >"$out.part"
mv "$out.part" "$out"
