#!/usr/bin/env bash
# A kind cluster "taskfleet" with the project's images loaded (needs Docker and kind).
set -euo pipefail
cd "$(dirname "$0")/../.."
. e2e/cluster/versions.env
kind get clusters 2>/dev/null | grep -qx taskfleet || kind create cluster --name taskfleet --wait 120s
docker build -t "$WORKER_IMAGE" -f worker-image/Dockerfile .
docker build -t "$REDIS_IMAGE" -f e2e/cluster/images/redis.Containerfile e2e/cluster/images
images=("$WORKER_IMAGE" "$REDIS_IMAGE")
if [ -f operator/Dockerfile ]; then
  docker build -t "$OPERATOR_IMAGE" -f operator/Dockerfile . && images+=("$OPERATOR_IMAGE")
fi
kind load docker-image --name taskfleet "${images[@]}"
