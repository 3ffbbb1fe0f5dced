#!/usr/bin/env bash
# Build the images the local cluster runs, with buildah and without any registry, and
# import them into the cluster's containerd (when it runs).
#
#   build-images.sh           every image: cluster ones, then the project's
#   build-images.sh cluster   pause + CoreDNS only (what up.sh needs before pods run)
#   build-images.sh project   base, Redis, worker, operator, the Node worker, and the examples
#                             of docs/images.md
#   build-images.sh redis     base and Redis only (the release stage's queues: e2e/release/run.sh)
#   build-images.sh release VERSION DIR [REGISTRY]
#                             a release's worker, operator and Node worker (release/release.py):
#                             built from this tree on the same bases, tagged
#                             REGISTRY/taskfleet-NAME:VERSION
#                             (REGISTRY: localhost), written to DIR as OCI archives
#                             taskfleet-NAME-VERSION.oci.tar (reference name VERSION) with the
#                             manifest's digest in taskfleet-NAME-VERSION.digest; never imported
#
# Cache-aware: an image is rebuilt only when a hash of its inputs changes, and imported
# only when containerd lacks that build. The debootstrap rootfs is built once and kept.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
what=${1:-all}
usage="usage: build-images.sh [all|cluster|project|redis|release VERSION DIR [REGISTRY]]"
case $what in
  all|cluster|project|redis) ;;
  release)
    [ $# -ge 3 ] || die "$usage"
    release_version=$2 release_dir=$3 release_registry=${4:-localhost}
    [ -d "$release_dir" ] || die "no directory $release_dir for the release's images"
    ;;
  *) die "$usage" ;;
esac
[ "$(id -u)" = 0 ] || die "build-images.sh runs as root (buildah, containerd)"
hold_lock images
ensure_packages buildah debootstrap gcc libc6-dev containerd
mkdir -p "$images"

# Hash of files (paths relative to a directory), skipping caches and virtualenvs.
inputs_hash() {
  local dir=$1; shift
  (cd "$dir" && find "$@" -type f ! -path '*/__pycache__/*' ! -path '*/.venv/*' \
      ! -path '*.egg-info/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16
}

# build NAME REF CONTAINERFILE CONTEXT HASH [buildah bud args...]
build() {
  local name=$1 ref=$2 file=$3 ctx=$4 sum=$5; shift 5
  local archive=$images/$name.tar stamp=$images/$name.sum
  sum=$(printf '%s %s\n' "$sum" "$*" | cat - "$file" | sha256sum | cut -c1-16)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ] || [ ! -f "$archive" ] ||
     ! buildah inspect --type image "$ref" >/dev/null 2>&1; then
    log "building $ref"
    local old; old=$(buildah inspect --type image --format '{{.FromImageID}}' "$ref" 2>/dev/null || true)
    buildah bud --quiet --network host --pull=false -f "$file" -t "$ref" "$@" "$ctx" >/dev/null
    # The previous build of this tag is now unnamed: drop it so rebuilds do not fill the disk.
    if [ -n "$old" ]; then buildah rmi "$old" >/dev/null 2>&1 || true; fi
    rm -f "$archive"
    buildah push --quiet "$ref" "docker-archive:$archive:$ref"
    echo "$sum" >"$stamp"
  else
    log "$ref up to date"
  fi
  if [ "$name" = base ] || [ "$name" = node-base ]; then
    return 0  # only other images build FROM them; pods never run them
  elif [ -S "$ctrd_sock" ]; then
    local present; present=$(ctr_ images ls -q)  # not piped into grep -q: pipefail + SIGPIPE
    if [ "$(cat "$state/imported/$name" 2>/dev/null)" != "$sum" ] ||
       ! grep -qx "$ref" <<<"$present"; then
      log "importing $ref into containerd"
      ctr_ images import --no-unpack=false "$archive" >/dev/null
      mkdir -p "$state/imported" && echo "$sum" >"$state/imported/$name"
    fi
  else
    log "containerd not running: $ref not imported (make cluster-up imports it)"
  fi
}

cluster_images() {
# pause: static C, so the image is one file.
pause_dir=$images/pause-ctx
mkdir -p "$pause_dir"
if [ ! -x "$pause_dir/pause" ] || [ "$here/images/pause.c" -nt "$pause_dir/pause" ]; then
  gcc -Os -static -Wall -Werror -o "$pause_dir/pause" "$here/images/pause.c"
  strip "$pause_dir/pause"
fi
build pause "$PAUSE_IMAGE" "$here/images/pause.Containerfile" "$pause_dir" \
  "$(inputs_hash "$here/images" pause.c)"

# CoreDNS: the binary build-k8s.sh built.
[ -x "$k8s_bin/coredns" ] || "$here/build-k8s.sh" coredns
coredns_dir=$images/coredns-ctx
mkdir -p "$coredns_dir"
cp -u "$k8s_bin/coredns" "$coredns_dir/coredns"
build coredns "localhost/coredns:$COREDNS_VERSION" "$here/images/coredns.Containerfile" \
  "$coredns_dir" "$(inputs_hash "$coredns_dir" coredns)"
}
case $what in project|release|redis) ;; *) cluster_images ;; esac
[ "$what" = cluster ] && exit 0

# Base: debootstrap'd bookworm with python3, the local stand-in for python:3.11-slim.
rootfs_tar=$images/rootfs-$DEBIAN_SUITE.tar
if [ ! -f "$rootfs_tar" ]; then
  tmp=$images/rootfs.tmp
  rm -rf "$tmp"
  log "debootstrap $DEBIAN_SUITE (once; cached in $rootfs_tar)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$DEBIAN_SUITE" "$tmp" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$images/debootstrap.log"
  chroot "$tmp" apt-get clean
  rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/*.bin "$tmp"/var/log/*.log
  tar -C "$tmp" --numeric-owner -cf "$rootfs_tar.tmp" . && mv "$rootfs_tar.tmp" "$rootfs_tar"
  rm -rf "$tmp"
fi
base_dir=$images/base-ctx
mkdir -p "$base_dir"
ln -f "$rootfs_tar" "$base_dir/rootfs.tar"
rm -rf "$base_dir/ca" && mkdir -p "$base_dir/ca"
find /usr/local/share/ca-certificates -name '*.crt' -exec cp {} "$base_dir/ca/" \; 2>/dev/null || true
build base "$BASE_IMAGE_LOCAL" "$here/images/base.Containerfile" "$base_dir" \
  "$(stat -c '%s %Y' "$rootfs_tar") $(inputs_hash "$base_dir" ca)"

base_arg=(--build-arg "BASE_IMAGE=$BASE_IMAGE_LOCAL")
base_sum=$(cat "$images/base.sum")

# A release's images: built every time (a release is rare and must be of this tree), kept
# out of the cache's archives and stamps so the local cluster's own builds stay as they are.
release_image() { # NAME DOCKERFILE [buildah bud args: the base image's]
  local name=$1 file=$2; shift 2
  local ref=$release_registry/taskfleet-$name:$release_version
  local archive=$release_dir/taskfleet-$name-$release_version.oci.tar
  log "building $ref"
  buildah bud --quiet --network host --pull=false -f "$file" -t "$ref" "$@" "$repo" >/dev/null
  rm -f "$archive"
  buildah push --quiet --digestfile "$release_dir/taskfleet-$name-$release_version.digest" \
    "$ref" "oci-archive:$archive:$release_version"
}

# The Node.js worker's base (clients/node/Dockerfile) is a local stand-in for
# node:20-bookworm-slim: the bookworm base with the HOST's Node.js binary and npm copied in
# (Debian's nodejs 18 is too old for the package; the host is bookworm, so the binary's
# libraries are the base's). The image's own build runs `npm ci` from
# clients/node/package-lock.json (the npm registry).
node_base() {
  command -v node >/dev/null && command -v npm >/dev/null ||
    die "the Node worker image copies the host's Node.js (>= 20.19) and npm: install them"
  local node_base_dir=$images/node-base-ctx node_bin npm_dir
  node_bin=$(readlink -f "$(command -v node)")
  npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
  mkdir -p "$node_base_dir"
  cp -u "$node_bin" "$node_base_dir/node"
  rm -rf "$node_base_dir/npm" && cp -r "$npm_dir" "$node_base_dir/npm"
  build node-base "$NODE_BASE_IMAGE_LOCAL" "$here/images/node-base.Containerfile" "$node_base_dir" \
    "$base_sum $("$node_bin" --version) $(npm --version)" "${base_arg[@]}"
}
if [ "$what" = release ]; then
  release_image worker "$repo/worker-image/Dockerfile" "${base_arg[@]}"
  release_image operator "$repo/operator/Dockerfile" "${base_arg[@]}"
  node_base
  release_image worker-node "$repo/clients/node/Dockerfile" --build-arg "BASE_IMAGE=$NODE_BASE_IMAGE_LOCAL"
  log "release images ready in $release_dir"
  exit 0
fi
build redis "$REDIS_IMAGE" "$here/images/redis.Containerfile" "$here/images" "$base_sum" "${base_arg[@]}"
if [ "$what" = redis ]; then log "redis image ready"; exit 0; fi

project_inputs=(pyproject.toml README.md LICENSE MANIFEST.in worker-image operator)

# Three chains that share nothing but the base: each waits on the network (PyPI, npm) for
# part of its build, so they run side by side; within a chain, an image FROM another
# follows it. A failure in any chain fails the script (wait below).
python_worker_images() {
build worker "$WORKER_IMAGE" "$repo/worker-image/Dockerfile" "$repo" \
  "$base_sum $(inputs_hash "$repo" "${project_inputs[@]}")" "${base_arg[@]}"
# The two recipes of docs/images.md, as a user builds them: an application image FROM the
# worker image, and an image on another base with taskfleet installed from a wheel.
build example-app "$EXAMPLE_APP_IMAGE" "$repo/examples/app-image/Dockerfile" \
  "$repo/examples/app-image" "$(cat "$images/worker.sum") $(inputs_hash "$repo/examples" app-image)" \
  --build-arg "TASKFLEET_IMAGE=$WORKER_IMAGE"
own_base_ctx=$images/own-base-ctx
own_base_sum="$base_sum $(inputs_hash "$repo" "${project_inputs[@]}" examples/own-base-image)"
if [ "$(cat "$own_base_ctx/inputs.sum" 2>/dev/null)" != "$own_base_sum" ]; then
  own_base_context "$own_base_ctx"
  echo "$own_base_sum" >"$own_base_ctx/inputs.sum"
fi
build example-own-base "$EXAMPLE_OWN_BASE_IMAGE" "$own_base_ctx/Dockerfile" "$own_base_ctx" \
  "$own_base_sum" "${base_arg[@]}"
}

operator_image() {
if [ -f "$repo/operator/Dockerfile" ]; then
  build operator "$OPERATOR_IMAGE" "$repo/operator/Dockerfile" "$repo" \
    "$base_sum $(inputs_hash "$repo" "${project_inputs[@]}")" "${base_arg[@]}"
fi
}

node_images() {
# The Node.js worker (clients/node/Dockerfile) on its base (node_base, above).
node_base
node_inputs=(clients/node/package.json clients/node/package-lock.json clients/node/tsconfig.json
  clients/node/README.md clients/node/scripts clients/node/src clients/node/test
  worker-image/taskfleet/protocol/bundle)
build worker-node "$WORKER_NODE_IMAGE" "$repo/clients/node/Dockerfile" "$repo" \
  "$(cat "$images/node-base.sum") $(inputs_hash "$repo" "${node_inputs[@]}")" \
  --build-arg "BASE_IMAGE=$NODE_BASE_IMAGE_LOCAL"
# Its recipe of docs/images.md: handlers in an image FROM it (e2e/test_node_fleet.py).
build example-node-app "$EXAMPLE_NODE_APP_IMAGE" "$repo/examples/node-app-image/Dockerfile" \
  "$repo/examples/node-app-image" \
  "$(cat "$images/worker-node.sum") $(inputs_hash "$repo/examples" node-app-image)" \
  --build-arg "TASKFLEET_NODE_IMAGE=$WORKER_NODE_IMAGE"
# examples/nestjs: the NestJS application, simulated provider and handlers FROM the Node
# worker image, with the NestJS module compiled from clients/nestjs (the build context
# named nestjs); dependencies from the lock files (e2e/test_nestjs_example.py).
nestjs_inputs=(package.json package-lock.json tsconfig.json tsconfig.build.json .dockerignore src)
build example-nestjs "$EXAMPLE_NESTJS_IMAGE" "$repo/examples/nestjs/Dockerfile" "$repo/examples/nestjs" \
  "$(cat "$images/worker-node.sum") $(inputs_hash "$repo/examples/nestjs" "${nestjs_inputs[@]}") $(inputs_hash "$repo/clients/nestjs" package.json package-lock.json tsconfig.json src)" \
  --build-arg "TASKFLEET_NODE_IMAGE=$WORKER_NODE_IMAGE" --build-context "nestjs=$repo/clients/nestjs"
}

chains=()
python_worker_images & chains+=($!)
operator_image & chains+=($!)
node_images & chains+=($!)
failed=0
for pid in "${chains[@]}"; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] || die "an image build failed (its error is above)"
log "images ready"
