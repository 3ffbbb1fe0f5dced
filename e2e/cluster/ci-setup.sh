#!/usr/bin/env bash
# Everything the CI run needs on a fresh Debian bookworm machine (as root): Debian packages,
# the pinned Kubernetes binaries (built from their Go modules), the base rootfs and images,
# and the local cluster. Idempotent and cache-aware: a warm machine only checks.
# Prints the time each step took; the last line is the KUBECONFIG export.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || die "ci-setup.sh runs as root"

step() { # NAME COMMAND...: run a step and report how long it took
  local name=$1 start=$SECONDS; shift
  "$@"
  log "ci-setup: $name took $((SECONDS - start))s"
}

step packages ensure_packages redis-server etcd-server containerd runc \
  containernetworking-plugins buildah debootstrap iptables conntrack socat ebtables ethtool \
  iproute2 gcc libc6-dev psmisc procps openssl python3-venv util-linux curl ca-certificates \
  prometheus tmux chromium chromium-driver docker.io
step k8s-binaries "$here/build-k8s.sh"
step k8s-oldest-apiserver "$here/build-k8s.sh" --oldest
step helm "$here/build-helm.sh"
step cluster-up "$here/up.sh"
step images "$here/build-images.sh"
log "ci-setup: total ${SECONDS}s"
echo "export KUBECONFIG=$state/kubeconfig"
