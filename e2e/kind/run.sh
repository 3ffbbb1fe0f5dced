#!/usr/bin/env bash
# The e2e suite on kind: the same tests as on the local cluster (context kind-taskfleet).
set -euo pipefail
cd "$(dirname "$0")/../.."
e2e/kind/up.sh
kubectl config use-context kind-taskfleet >/dev/null
[ -f manifests/kustomization.yaml ] && kubectl apply -k manifests/ >/dev/null
exec "${PYTHON:-.venv/bin/python}" -m pytest e2e "$@"
