#!/usr/bin/env bash
# Delete the kind cluster and the routes e2e/kind/host-routes.sh added (idempotent).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
command -v kind >/dev/null || exit 0
if kind get clusters 2>/dev/null | grep -qx "$kind_cluster"; then
  if [ "$(id -u)" = 0 ]; then
    for ip in $(docker ps -q --filter "label=io.x-k8s.kind.cluster=$kind_cluster" \
        | xargs -r docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}'); do
      ip route show | awk -v via="$ip" '$2 == "via" && $3 == via {print $1}' \
        | xargs -r -n1 ip route del 2>/dev/null || true
    done
  fi
  kind delete cluster --name "$kind_cluster"
fi
