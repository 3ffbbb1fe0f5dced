#!/usr/bin/env bash
# The e2e suite on kind: the same tests as on the local cluster, against a multi-node kind
# cluster (e2e/kind/up.sh; KIND_IMAGES=local builds every image here). Extra arguments go to
# pytest, as with e2e/run-local.sh.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
"$kind_dir/up.sh"
export KUBECONFIG=$cache/kind/kubeconfig
cd "$repo"
# kind load keeps the image's name: an operator pod of an earlier run would test the old
# code, so an existing Deployment is restarted (one this apply creates starts on the new).
existed=$(kubectl -n taskfleet-system get deployment/taskfleet-operator -o name 2>/dev/null || true)
kubectl apply -k manifests/ >/dev/null
if [ -n "$existed" ]; then
  kubectl -n taskfleet-system rollout restart deployment/taskfleet-operator >/dev/null
fi
kubectl -n taskfleet-system rollout status deployment/taskfleet-operator --timeout=300s
if [ $# -eq 0 ] || [ ! -e "$1" ]; then set -- e2e "$@"; fi
exec "${PYTHON:-$repo/.venv/bin/python}" -m pytest "$@"
