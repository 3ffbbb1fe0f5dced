#!/usr/bin/env bash
# The local cluster ready for the suite or a benchmark: up (idempotent), the images built
# and imported, the operator deployed from manifests/ and running the image just built.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
"$here/up.sh" >/dev/null
"$here/build-images.sh"
export KUBECONFIG=$state/kubeconfig
cd "$repo"
if [ -f manifests/kustomization.yaml ]; then
  kubectl apply -k manifests/ >/dev/null
  # An operator pod from before the last image build would test yesterday's code.
  refresh_stale_pods operator taskfleet-system app.kubernetes.io/name=taskfleet-operator
  kubectl -n taskfleet-system rollout status deployment/taskfleet-operator --timeout=300s >/dev/null
fi
