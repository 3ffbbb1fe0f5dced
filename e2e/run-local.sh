#!/usr/bin/env bash
# The e2e suite on the local cluster: bring the cluster up (idempotent), build and import the
# images, deploy the operator from manifests/ (when present), then run pytest on e2e/.
# Extra arguments go to pytest: options (`-k scale`) apply to all of e2e/, a path as the first
# argument (`e2e/run-local.sh e2e/test_cluster.py`) narrows the run to it.
set -euo pipefail
# shellcheck source=cluster/lib.sh
. "$(dirname "$0")/cluster/lib.sh"
"$here/prepare.sh"
export KUBECONFIG=$state/kubeconfig
cd "$repo"
if [ $# -eq 0 ] || [ ! -e "$1" ]; then set -- e2e "$@"; fi
exec "${PYTHON:-$repo/.venv/bin/python}" -m pytest "$@"
