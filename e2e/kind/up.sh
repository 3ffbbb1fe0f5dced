#!/usr/bin/env bash
# A kind cluster for the e2e suite and the demo: one control plane and KIND_WORKERS workers
# (default 2), the project's images loaded, kubeconfig in $cache/kind/kubeconfig.
#
#   KIND_IMAGES=published (default)  kind's node image and the Dockerfiles' base images come
#                                    from their registries, as on any machine online.
#   KIND_IMAGES=local                nothing is pulled: the node image is built here
#                                    (e2e/kind/node-image.sh), the project's images with
#                                    buildah (e2e/cluster/build-images.sh), and the pod
#                                    network wired by e2e/kind/network.sh.
#   KIND_LOAD="worker redis ..."     with KIND_IMAGES=local, the image archives loaded into
#                                    the nodes (default: all; the kind stage of make check
#                                    loads only those its subset of the suite runs).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
workers=${KIND_WORKERS:-2}
[[ $workers =~ ^[0-9]+$ ]] || die "KIND_WORKERS must be a number, not '$workers'"
local_archives="worker redis operator example-app example-own-base worker-node example-node-app example-nestjs"
load=${KIND_LOAD:-$local_archives}
for name in $load; do
  case " $local_archives " in
    *" $name "*) ;;
    *) log "KIND_LOAD: no image archive '$name'; name some of: $local_archives"; exit 2 ;;
  esac
done
kubeconfig=$cache/kind/kubeconfig
mkdir -p "$cache/kind"
ensure_docker
ensure_kind
if [ "$KIND_IMAGES" = local ]; then
  "$kind_dir/node-image.sh"
  "$repo/e2e/cluster/build-images.sh" project
fi

# A cluster made from an older build of the node image is made again.
if kind get clusters 2>/dev/null | grep -qx "$kind_cluster"; then
  running=$(docker inspect -f '{{.Image}}' "$kind_cluster-control-plane" 2>/dev/null || true)
  wanted=$(docker image inspect -f '{{.Id}}' "$kind_node_image" 2>/dev/null || true)
  if [ -n "$wanted" ] && [ "$running" != "$wanted" ]; then
    log "kind cluster $kind_cluster runs another node image than $kind_node_image: recreating"
    "$kind_dir/down.sh"
  fi
fi
if ! kind get clusters 2>/dev/null | grep -qx "$kind_cluster"; then
  config=$cache/kind/cluster.yaml
  {
    echo "kind: Cluster"
    echo "apiVersion: kind.x-k8s.io/v1alpha4"
    echo "nodes:"
    echo "- role: control-plane"
    for _ in $(seq 1 "$workers"); do echo "- role: worker"; done
    echo "networking:"
    echo "  podSubnet: 10.245.0.0/16  # not the local cluster's 10.244.0.0/24: both may run here"
    if [ "$KIND_IMAGES" = local ]; then
      echo "  disableDefaultCNI: true  # e2e/kind/network.sh does kindnetd's part"
    fi
  } >"$config"
  log "creating kind cluster $kind_cluster (1 control plane, $workers workers, $kind_node_image)"
  start=$(date +%s)
  wait=120s
  [ "$KIND_IMAGES" = local ] && wait=0s  # nodes are Ready only once network.sh has run
  kind create cluster --name "$kind_cluster" --image "$kind_node_image" --config "$config" \
    --kubeconfig "$kubeconfig" --wait "$wait"
  log "kind cluster created in $(( $(date +%s) - start ))s"
fi
# The suite's own copy, and the usual one ($KUBECONFIG or ~/.kube/config), as kind does:
# `kubectl --context kind-taskfleet` works afterwards.
kind export kubeconfig --name "$kind_cluster" --kubeconfig "$kubeconfig" >/dev/null 2>&1
kind export kubeconfig --name "$kind_cluster" >/dev/null 2>&1 || true
export KUBECONFIG=$kubeconfig
if [ "$KIND_IMAGES" = local ]; then "$kind_dir/network.sh"; fi
kubectl wait --for=condition=Ready nodes --all --timeout=180s >/dev/null
"$kind_dir/host-routes.sh" || log "pod IPs not reachable from this host (Prometheus e2e needs them)"

# The project's images, loaded into every node.
if [ "$KIND_IMAGES" = local ]; then
  for name in $load; do
    kind load image-archive --name "$kind_cluster" "$images/$name.tar" >/dev/null
  done
else
  docker build -t "$WORKER_IMAGE" -f worker-image/Dockerfile "$repo"
  docker build -t "$REDIS_IMAGE" -f e2e/cluster/images/redis.Containerfile "$repo/e2e/cluster/images"
  docker build -t "$OPERATOR_IMAGE" -f operator/Dockerfile "$repo"
  # The examples of docs/images.md (e2e/test_app_image.py), built as a user builds them.
  docker build -t "$EXAMPLE_APP_IMAGE" --build-arg "TASKFLEET_IMAGE=$WORKER_IMAGE" "$repo/examples/app-image"
  own_base_context "$cache/kind/own-base-ctx"
  docker build -t "$EXAMPLE_OWN_BASE_IMAGE" "$cache/kind/own-base-ctx"
  # The Node worker (its official node:20 base) and JS handlers FROM it (e2e/test_node_fleet.py).
  docker build -t "$WORKER_NODE_IMAGE" -f clients/node/Dockerfile "$repo"
  docker build -t "$EXAMPLE_NODE_APP_IMAGE" --build-arg "TASKFLEET_NODE_IMAGE=$WORKER_NODE_IMAGE" \
    "$repo/examples/node-app-image"
  docker build -t "$EXAMPLE_NESTJS_IMAGE" --build-arg "TASKFLEET_NODE_IMAGE=$WORKER_NODE_IMAGE" \
    --build-context "nestjs=$repo/clients/nestjs" "$repo/examples/nestjs"
  kind load docker-image --name "$kind_cluster" "$WORKER_IMAGE" "$REDIS_IMAGE" "$OPERATOR_IMAGE" \
    "$EXAMPLE_APP_IMAGE" "$EXAMPLE_OWN_BASE_IMAGE" "$WORKER_NODE_IMAGE" "$EXAMPLE_NODE_APP_IMAGE" \
    "$EXAMPLE_NESTJS_IMAGE"
fi
log "kind cluster $kind_cluster ready: export KUBECONFIG=$kubeconfig"
