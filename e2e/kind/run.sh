#!/usr/bin/env bash
# The e2e suite on kind: the same tests as on the local cluster (context kind-taskfleet).
set -euo pipefail
cd "$(dirname "$0")/../.."
e2e/kind/up.sh
kubectl config use-context kind-taskfleet >/dev/null
if [ -f manifests/kustomization.yaml ]; then
  kubectl apply -k manifests/ >/dev/null
  # kind load keeps the image's name: a running operator pod would test the old code.
  kubectl -n taskfleet-system rollout restart deployment/taskfleet-operator >/dev/null
  kubectl -n taskfleet-system rollout status deployment/taskfleet-operator --timeout=300s
fi
exec "${PYTHON:-.venv/bin/python}" -m pytest e2e "$@"
