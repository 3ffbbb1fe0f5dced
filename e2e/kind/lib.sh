# Shared settings of the kind scripts (sourced, not run).
# shellcheck shell=bash
# shellcheck source=../cluster/lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../cluster/lib.sh"
kind_dir=$repo/e2e/kind
kind_cache=$cache/kind/$KIND_VERSION
kind_cluster=${KIND_CLUSTER:-taskfleet}
# KIND_IMAGES=published (the default): kind's node image and the Dockerfiles' FROM images
# come from their registries, as on any machine with internet access.
# KIND_IMAGES=local: every image is built here (make kind-node-image), nothing is pulled.
KIND_IMAGES=${KIND_IMAGES:-published}
case $KIND_IMAGES in published|local) ;; *) die "KIND_IMAGES must be 'published' or 'local', not '$KIND_IMAGES'" ;; esac
kind_node_image=$KIND_NODE_IMAGE_PUBLISHED
[ "$KIND_IMAGES" = local ] && kind_node_image=$KIND_NODE_IMAGE_LOCAL
# kind and docker: the pinned kind build first, then whatever is on PATH.
[ -x "$kind_cache/bin/kind" ] && export PATH=$kind_cache/bin:$PATH

# Docker for kind: an engine already running is used as it is; on a machine without one,
# Debian's docker.io is installed and its dockerd started directly (no systemd here).
ensure_docker() {
  if docker info >/dev/null 2>&1; then return 0; fi
  command -v dockerd >/dev/null || ensure_packages docker.io
  [ "$(id -u)" = 0 ] || die "no Docker engine running, and starting one needs root"
  mkdir -p "$cache/kind"
  local args=()
  # Root without every capability (these machines lack CAP_SYS_RESOURCE): a privileged
  # container, which a kind node is, starts only through runc-bounded (see its docstring).
  local last bounding
  last=$(cat /proc/sys/kernel/cap_last_cap)
  bounding=$(( 16#$(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status) ))
  if [ "$bounding" -ne $(( (1 << (last + 1)) - 1 )) ]; then
    args+=(--add-runtime "taskfleet-runc=$kind_dir/runc-bounded" --default-runtime taskfleet-runc)
  fi
  log "starting dockerd ${args[*]} (log: $cache/kind/dockerd.log)"
  # not holding the caller's lock: a daemon that inherited it would hold it forever
  if [ -n "${lock_fd:-}" ]; then
    nohup dockerd "${args[@]}" </dev/null >"$cache/kind/dockerd.log" 2>&1 {lock_fd}>&- &
  else
    nohup dockerd "${args[@]}" </dev/null >"$cache/kind/dockerd.log" 2>&1 &
  fi
  local i
  for i in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  die "dockerd did not start: $(tail -5 "$cache/kind/dockerd.log")"
}

# kind itself, from its Go module at the pinned version (cached).
ensure_kind() {
  if [ -x "$kind_cache/bin/kind" ]; then return 0; fi
  if [ "$KIND_IMAGES" = published ] && command -v kind >/dev/null; then return 0; fi
  command -v go >/dev/null || export PATH=/usr/local/go/bin:$cache/go/bin:$PATH
  log "building kind $KIND_VERSION from its Go module"
  mkdir -p "$kind_cache/bin"
  GOBIN="$kind_cache/bin" GOFLAGS=-buildvcs=false go install "sigs.k8s.io/kind@$KIND_VERSION"
  export PATH=$kind_cache/bin:$PATH
}
