#!/usr/bin/env bash
# Routes from this host to each kind node's podCIDR through the node's address on the kind
# network, so that processes here reach pod IPs as they do on the local cluster (the e2e
# Prometheus scrapes pods by IP). Needs root on Linux; fails, changing nothing, otherwise.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] && [ "$(uname -s)" = Linux ] || exit 1
mapfile -t nodes < <(kubectl get nodes \
  -o jsonpath='{range .items[*]}{.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
for entry in "${nodes[@]}"; do
  read -r cidr ip <<<"$entry"
  ip route replace "$cidr" via "$ip"
done
