#!/usr/bin/env bash
# Tear the local cluster down (idempotent): pods and containers removed, daemons stopped,
# kubelet/containerd mounts unmounted, kube-proxy and CNI rules gone, etcd data deleted.
# Kept: binaries, images (containerd's image store, build caches), certificates and logs.
set -uo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || die "down.sh runs as root"
hold_lock cluster
export KUBECONFIG=$state/kubeconfig

stop() { # NAME: SIGTERM, then SIGKILL after 15 s
  local pid
  if pid=$(daemon_pid "$1"); then
    log "stopping $1"
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$state/pids/$1.pid"
}

tasks() { ctr_ tasks ls -q 2>/dev/null; }

# 1. Pods first, through the kubelet, so CNI releases their addresses and rules.
if daemon_pid kubelet >/dev/null && kubectl get --raw /readyz >/dev/null 2>&1; then
  log "deleting pods"
  kubectl cordon "$node_name" >/dev/null 2>&1
  kubectl delete pods --all --all-namespaces --force --grace-period=0 --wait=false >/dev/null 2>&1
  for _ in $(seq 120); do [ -z "$(tasks)" ] && break; sleep 0.5; done
fi
stop kube-proxy
stop kubelet

# 2. Whatever is left, straight through containerd.
if [ -S "$ctrd_sock" ]; then
  for t in $(tasks); do ctr_ tasks kill -s KILL "$t" >/dev/null 2>&1; done
  for _ in $(seq 50); do
    [ -z "$(ctr_ tasks ls 2>/dev/null | awk 'NR>1 && $3!="STOPPED"')" ] && break; sleep 0.2
  done
  for t in $(tasks); do ctr_ tasks delete -f "$t" >/dev/null 2>&1; done
  for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$c" >/dev/null 2>&1; done
fi
stop containerd

# 3. Mounts: container rootfs, shm, kubelet volumes, pod network namespaces.
# The kubelet also bind-mounts its root dir onto itself (to make it rshared): deepest first.
for root in "$kubelet_root" "$ctrd_run" "$ctrd_root" /run/netns; do
  awk -v r="$root" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/self/mounts | sort -r -u |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done
rm -f /run/netns/cni-* 2>/dev/null
rm -rf "${kubelet_root:?}/pods" "$cni_data_dir" "$ctrd_run"

# 4. Network: kube-proxy's chains (its own cleanup), the CNI bridge and its masquerade rules.
[ -x "$k8s_bin/kube-proxy" ] && "$k8s_bin/kube-proxy" --cleanup >/dev/null 2>&1
ip link delete tfbr0 2>/dev/null
iptables -t nat -S POSTROUTING 2>/dev/null | grep -F 'name: \"taskfleet\"' | while read -r rule; do
  eval "iptables -t nat ${rule/-A/-D}" 2>/dev/null
done
rules=$(iptables -t nat -S 2>/dev/null)
sed -n 's/^-N \(CNI-[0-9a-f]*\)$/\1/p' <<<"$rules" | while read -r chain; do
  # Only chains no rule references any more: other CNI users keep theirs.
  if ! grep -q -- "-j $chain\b" <<<"$rules"; then
    iptables -t nat -F "$chain" 2>/dev/null && iptables -t nat -X "$chain" 2>/dev/null
  fi
done

# The kubelet's own chains (canaries, and KUBE-FIREWALL guarding 127.0.0.0/8 from outside).
for cmd in iptables ip6tables; do
  for table in filter nat mangle; do
    for hook in INPUT OUTPUT; do
      while $cmd -t "$table" -D "$hook" -j KUBE-FIREWALL 2>/dev/null; do :; done
    done
    for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
      $cmd -t "$table" -F "$chain" 2>/dev/null && $cmd -t "$table" -X "$chain" 2>/dev/null
    done
  done
done

# 5. Control plane and its data.
stop kube-scheduler
stop kube-controller-manager
stop kube-apiserver
stop etcd
rm -rf "$state/etcd"
log "cluster $context is down (caches kept in $cache)"
