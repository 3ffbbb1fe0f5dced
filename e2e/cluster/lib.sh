# Shared settings of the local cluster scripts (sourced, not run).
# shellcheck shell=bash
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${TASKFLEET_CACHE:-$HOME/.cache/taskfleet}
state=$cache/cluster                       # logs, pids, certs, kubeconfigs, etcd data
k8s_bin=${TASKFLEET_K8S_BIN:-$cache/k8s/$K8S_VERSION/bin}
# The pinned kubectl first (client and server within the supported skew), once built.
[ -x "$k8s_bin/kubectl" ] && export PATH=$k8s_bin:$PATH
# The pinned helm (e2e/cluster/build-helm.sh): scripts call "$helm_bin", never a helm on PATH.
helm_bin=${TASKFLEET_HELM:-$cache/helm/$HELM_VERSION/bin/helm}
images=$cache/images                       # base rootfs and image archives
ctrd_root=/var/lib/taskfleet/containerd    # containerd's snapshots must be on a real fs
ctrd_run=/run/taskfleet/containerd
ctrd_sock=$ctrd_run/containerd.sock
kubelet_root=/var/lib/kubelet
cni_conf_dir=$state/cni/net.d
cni_data_dir=/var/lib/taskfleet/cni
node_name=taskfleet-node
pod_cidr=10.244.0.0/24
service_cidr=10.96.0.0/16
apiserver_service_ip=10.96.0.1
dns_ip=10.96.0.10
etcd_port=12379
etcd_peer_port=12380
apiserver_port=6443
context=taskfleet-local

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The Debian packages the local cluster needs; installs only what is missing.
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ctr_() { ctr -a "$ctrd_sock" -n k8s.io "$@"; }

# The build context of examples/own-base-image in DIR: the example and a wheel of this
# checkout next to it, as a user makes one until taskfleet is on PyPI. pip from a venv of
# its own (the system Python has none); setuptools comes from the package index.
own_base_context() {
  local dir=$1
  rm -rf "$dir" && mkdir -p "$dir"
  cp -r "$repo/examples/own-base-image/." "$dir/"
  rm -f "$dir"/*.whl
  [ -x "$cache/wheel-venv/bin/pip" ] || python3 -m venv "$cache/wheel-venv"
  "$cache/wheel-venv/bin/pip" wheel --quiet --no-deps -w "$dir" "$repo"
}

# The node's address: the source address of the default route (eth0 here).
node_ip() {
  ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1
}

# Serialise scripts that change the same state (two `make cluster-up` at once, say): the
# lock is held until the script exits. NAME: cluster or images.
hold_lock() {
  local file=$cache/.$1.lock
  mkdir -p "$cache"
  exec {lock_fd}>"$file"
  flock -w 900 "$lock_fd" || die "another run holds $file for 15 minutes; giving up"
}

# PID of a daemon the scripts started, if it still runs: the pid file must name a live
# process whose command line is that daemon's (after a reboot the pid may be another's).
daemon_pid() {
  local pid
  pid=$(cat "$state/pids/$1.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  grep -q -- "$1" <<<"$(tr '\0' ' ' <"/proc/$pid/cmdline")" || return 1
  echo "$pid"
}

# Images keep their tag when rebuilt, so a pod started before the last build runs old code:
# delete such pods (their controller starts fresh ones); the archives' times say when each
# image was last built. IMAGE (worker, operator, ...) NAMESPACE SELECTOR; uses $KUBECONFIG.
refresh_stale_pods() {
  local archive=$images/$1.tar ns=$2 selector=$3 built pod started
  [ -f "$archive" ] || return 0
  built=$(stat -c %Y "$archive")
  while read -r pod started; do
    if [ -z "$pod" ] || [ -z "$started" ]; then continue; fi
    if [ "$(date -d "$started" +%s)" -lt "$built" ]; then
      log "restarting $ns/$pod: its image was rebuilt after it started"
      kubectl -n "$ns" delete pod "$pod" --wait=false >/dev/null
    fi
  done < <(kubectl -n "$ns" get pods -l "$selector" \
             -o jsonpath='{range .items[*]}{.metadata.name} {.status.startTime}{"\n"}{end}')
}
