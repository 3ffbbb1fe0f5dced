#!/usr/bin/env bash
# Copy into the chart the files whose source of truth lives elsewhere in the repository
# (a packaged chart cannot reach outside its directory): the CRDs and the monitoring and
# admission-policy files. `make chart-files` runs it (and `make crds` after regenerating);
# tests/release/test_chart.py fails when a copy drifts from its source.
#
#   charts/sync-files.sh          copy
#   charts/sync-files.sh --check  exit 1, naming each stale copy
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
chart=$repo/charts/taskfleet
# source (in the repo) -> copy (in the chart)
pairs=(
  "crds/taskqueues.taskfleet.dev.yaml:crds/taskqueues.taskfleet.dev.yaml"
  "crds/providerquotas.taskfleet.dev.yaml:crds/providerquotas.taskfleet.dev.yaml"
  "manifests/operator/peering.yaml:crds/clusterkopfpeerings.kopf.dev.yaml"
  "manifests/rbac/admission_policy.yaml:files/admission_policy.yaml"
  "manifests/monitoring/rules/taskfleet.rules.yml:files/taskfleet.rules.yml"
  "manifests/monitoring/grafana/taskfleet.json:files/taskfleet.json"
)
stale=0
for pair in "${pairs[@]}"; do
  src=$repo/${pair%%:*} dst=$chart/${pair#*:}
  if [ "${1:-}" = --check ]; then
    cmp -s "$src" "$dst" || { echo "charts/taskfleet/${pair#*:} differs from ${pair%%:*}: run make chart-files" >&2; stale=1; }
  else
    mkdir -p "$(dirname "$dst")" && cp "$src" "$dst"
  fi
done
exit $stale
