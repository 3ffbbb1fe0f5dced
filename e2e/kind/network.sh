#!/usr/bin/env bash
# The pod network of a kind cluster on the offline node image (KIND_IMAGES=local), wired the
# way kind's own CNI daemon, kindnetd, wires it: on each node a CNI config (ptp + host-local
# over the node's podCIDR, portmap) and a route to every other node's podCIDR through that
# node's address on the kind network. kindnetd is not published as a Go module, so the
# offline image cannot carry it; the nodes' set is fixed for the cluster's life, so a
# one-shot setup does what its loop would (run again after a node container restarts).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

mapfile -t nodes < <(kubectl get nodes \
  -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
[ ${#nodes[@]} -gt 0 ] || die "no nodes in the kind cluster $kind_cluster"
for entry in "${nodes[@]}"; do
  read -r name cidr ip <<<"$entry"
  [ -n "$cidr" ] && [ -n "$ip" ] || die "node $name has no podCIDR or address yet"
  mtu=$(docker exec "$name" cat /sys/class/net/eth0/mtu)
  docker exec -i "$name" sh -c 'mkdir -p /etc/cni/net.d && cat > /etc/cni/net.d/10-kindnet.conflist.tmp && mv /etc/cni/net.d/10-kindnet.conflist.tmp /etc/cni/net.d/10-kindnet.conflist' <<JSON
{
  "cniVersion": "0.3.1",
  "name": "kindnet",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "mtu": $mtu,
      "ipam": {
        "type": "host-local",
        "dataDir": "/run/cni-ipam-state",
        "routes": [{"dst": "0.0.0.0/0"}],
        "ranges": [[{"subnet": "$cidr"}]]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  for other in "${nodes[@]}"; do
    read -r oname ocidr oip <<<"$other"
    [ "$oname" = "$name" ] && continue
    docker exec "$name" ip route replace "$ocidr" via "$oip"
  done
done
log "pod network wired on ${#nodes[@]} nodes"
