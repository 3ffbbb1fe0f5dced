#!/usr/bin/env bash
# The e2e suite on kind: the same tests as on the local cluster, against a multi-node kind
# cluster (e2e/kind/up.sh; KIND_IMAGES=local builds every image here). Extra arguments go to
# pytest, as with e2e/run-local.sh.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
"$kind_dir/up.sh"
export KUBECONFIG=$cache/kind/kubeconfig
cd "$repo"
kubectl apply -k manifests/ >/dev/null
# kind load keeps the image's name: a running operator pod would test the old code.
kubectl -n taskfleet-system rollout restart deployment/taskfleet-operator >/dev/null
kubectl -n taskfleet-system rollout status deployment/taskfleet-operator --timeout=300s
if [ $# -eq 0 ] || [ ! -e "$1" ]; then set -- e2e "$@"; fi
exec "${PYTHON:-$repo/.venv/bin/python}" -m pytest "$@"
