#!/usr/bin/env bash
# Build kind's node image here, from nothing a registry serves: the same steps as
# `kind build node-image` (a container from the base image, kubeadm/kubelet/kubectl copied
# in, every image kubeadm and the node need imported into its containerd, committed), with
#   - the base image built from kind's own images/base files (taken from the pinned kind
#     module) on the project's debootstrap base, containerd/runc/CNI from Debian;
#   - kube-apiserver, -controller-manager, -scheduler, -proxy, kubelet, kubeadm, kubectl and
#     CoreDNS built from their Go modules by e2e/cluster/build-k8s.sh (the local cluster's
#     build), etcd from its Go module too, pause from the few lines of C the local
#     cluster uses.
# `kind build node-image` itself cannot be used offline: it pulls etcd, CoreDNS, pause and
# kindnetd from registries. kindnetd (kind's CNI daemon) is not published as a Go module,
# so clusters on this image start with disableDefaultCNI and e2e/kind/network.sh wires the
# pod network the way kindnetd does (ptp + host-local per node, routes between nodes).
#
# Output: the Docker image $KIND_NODE_IMAGE_LOCAL. Cached: rebuilt only when an input changes.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || die "node-image.sh runs as root (buildah, docker)"
hold_lock kind-node-image
ensure_packages buildah debootstrap
ensure_docker
ensure_kind
"$repo/e2e/cluster/build-k8s.sh" kube-apiserver kube-controller-manager kube-scheduler kube-proxy \
  kubelet kubeadm kubectl coredns etcd >/dev/null
"$repo/e2e/cluster/build-images.sh" cluster  # base, pause, CoreDNS images (cached)

work=$kind_cache/node-image
mkdir -p "$work"
kind_src=$(cd "$repo/e2e/cluster/k8s-build" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
[ -d "$kind_src/images/base/files" ] || die "cannot fetch kind $KIND_VERSION's sources"
inputs=$( { cat "$0" "$kind_dir/lib.sh" "$kind_dir"/images/*.Containerfile "$repo/e2e/cluster/versions.env";
  sha256sum "$k8s_bin"/{kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy,kubelet,kubeadm,kubectl,coredns,etcd};
  (cd "$kind_src/images/base/files" && find . -type f -print0 | sort -z | xargs -0 sha256sum);
  for i in "$BASE_IMAGE_LOCAL" "$PAUSE_IMAGE"; do buildah inspect --type image --format '{{.FromImageID}}' "$i"; done; } | sha256sum | cut -c1-16)
if [ "$(cat "$work/stamp" 2>/dev/null)" = "$inputs" ] && docker image inspect "$KIND_NODE_IMAGE_LOCAL" >/dev/null 2>&1; then
  log "$KIND_NODE_IMAGE_LOCAL up to date"
  exit 0
fi
start=$(date +%s)

# 1. the base image, in buildah, then handed to Docker
rm -rf "$work/base-ctx" && mkdir -p "$work/base-ctx"
cp -r "$kind_src/images/base/files" "$work/base-ctx/files" && chmod -R u+w "$work/base-ctx"
rm -rf "$work/base-ctx/files/LICENSES"
base_ref=localhost/taskfleet-kind-base:$KIND_VERSION
log "building $base_ref"
buildah bud --quiet --network host --pull=false --build-arg "BASE=$BASE_IMAGE_LOCAL" \
  -f "$kind_dir/images/node-base.Containerfile" -t "$base_ref" "$work/base-ctx" >/dev/null
rm -f "$work/base.tar"
buildah push --quiet "$base_ref" "docker-archive:$work/base.tar:$base_ref"
docker load -q -i "$work/base.tar" >/dev/null

# 2. the images kubeadm and the node run, under the names kubeadm asks for
kubeadm_images=$("$k8s_bin/kubeadm" config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null)
pause_ref=$(grep '/pause:' <<<"$kubeadm_images")
etcd_ref=$(grep '/etcd:' <<<"$kubeadm_images")
coredns_ref=$(grep '/coredns:' <<<"$kubeadm_images")
sandbox_ref=$(sed -n 's/^[[:space:]]*sandbox_image = "\(.*\)"$/\1/p' "$kind_src/images/base/files/etc/containerd/config.toml")
archives=()
component() {  # name ref packages binaries...
  local name=$1 ref=$2 packages=$3; shift 3
  local ctx=$work/ctx-$name
  rm -rf "$ctx" && mkdir -p "$ctx/bin"
  cp "$@" "$ctx/bin/"
  log "building $ref"
  buildah bud --quiet --network host --pull=false --build-arg "BASE=$BASE_IMAGE_LOCAL" \
    --build-arg "PACKAGES=$packages" -f "$kind_dir/images/component.Containerfile" -t "$ref" "$ctx" >/dev/null
  rm -f "$work/$name.tar"
  buildah push --quiet "$ref" "docker-archive:$work/$name.tar:$ref"
  archives+=("$work/$name.tar")
}
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  component "$c" "registry.k8s.io/$c:$K8S_VERSION" "" "$k8s_bin/$c"
done
component kube-proxy "registry.k8s.io/kube-proxy:$K8S_VERSION" "iptables conntrack ipset" "$k8s_bin/kube-proxy"
component etcd "$etcd_ref" "" "$k8s_bin/etcd"
for spec in "coredns localhost/coredns:$COREDNS_VERSION $coredns_ref" "pause $PAUSE_IMAGE $pause_ref" \
            "sandbox $PAUSE_IMAGE $sandbox_ref"; do
  read -r name from ref <<<"$spec"
  buildah tag "$from" "$ref"
  rm -f "$work/$name.tar"
  buildah push --quiet "$ref" "docker-archive:$work/$name.tar:$ref"
  archives+=("$work/$name.tar")
done

# 3. the node: kind's build steps, in a container of the base image
build=taskfleet-kind-build
docker rm -f -v "$build" >/dev/null 2>&1 || true
docker run -d --entrypoint=sleep --name="$build" --security-opt seccomp=unconfined "$base_ref" infinity >/dev/null
trap 'docker rm -f -v "$build" >/dev/null 2>&1 || true' EXIT
for b in kubeadm kubelet kubectl; do
  docker cp "$k8s_bin/$b" "$build:/usr/bin/$b"
  docker exec "$build" chown root:root "/usr/bin/$b"
  docker exec "$build" chmod 0755 "/usr/bin/$b"
done
docker exec "$build" sh -c "mkdir -p /kind/manifests && printf '%s' '$K8S_VERSION' > /kind/version"
docker exec -i "$build" sh -c 'cat > /kind/manifests/default-storage.yaml' <<'YAML'
# host-path based default storage class (no dynamic provisioner in the offline node image)
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/host-path
YAML
docker exec "$build" bash -c 'nohup containerd >/dev/null 2>&1 &'
docker exec "$build" bash -c 'for i in $(seq 1 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done; exit 1' \
  || die "containerd did not start in the build container"
for a in "${archives[@]}"; do
  docker exec -i "$build" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
    --all-platforms --no-unpack --digests - <"$a" >/dev/null
done
log "images in the node: $(docker exec "$build" ctr --namespace=k8s.io images list -q | grep -v -e '^sha256:' -e '^import-' | tr '\n' ' ')"
docker exec "$build" pkill -x containerd || true
# (a zombie under `sleep` as PID 1 stays listed: wait for its socket to stop answering)
docker exec "$build" bash -c 'for i in $(seq 1 50); do ctr version >/dev/null 2>&1 || exit 0; sleep 0.2; done; exit 1' || die "containerd did not stop in the build container"
docker commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
  --change 'ENV HTTP_PROXY="" HTTPS_PROXY="" NO_PROXY=""' "$build" "$KIND_NODE_IMAGE_LOCAL" >/dev/null
echo "$inputs" >"$work/stamp"
log "$KIND_NODE_IMAGE_LOCAL built in $(( $(date +%s) - start ))s"
