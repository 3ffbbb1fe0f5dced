#!/usr/bin/env bash
# Build the pinned helm from its published Go module into the cache outside the repo, as
# build-k8s.sh does for Kubernetes (only the Go module proxy is needed, not get.helm.sh).
# A binary already present is kept, so a second run builds nothing.
#
#   e2e/cluster/build-helm.sh          prints the binary's path on its last line
#
# Output: ${TASKFLEET_CACHE:-$HOME/.cache/taskfleet}/helm/<HELM_VERSION>/bin/helm: the one
# place scripts (e2e/cluster/lib.sh helm_bin) and tests (tests/helm.py) look for it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${TASKFLEET_CACHE:-$HOME/.cache/taskfleet}
out=$cache/helm/$HELM_VERSION/bin
mkdir -p "$out"
exec {lock_fd}>"$cache/.helm-build.lock"
flock -w 3600 "$lock_fd" || { echo "build-helm: another build holds the lock" >&2; exit 1; }

if [ -x "$out/helm" ]; then
  echo "build-helm: helm $HELM_VERSION present, skipped" >&2
  echo "$out/helm"
  exit 0
fi

# The same Go toolchain build-k8s.sh uses (it fetches one from the module proxy if needed).
go_ok() { command -v go >/dev/null && go version | grep -Eq 'go1\.(2[4-9]|[3-9][0-9])'; }
go_ok || export PATH=/usr/local/go/bin:$cache/go/bin:$PATH
go_ok || { echo "build-helm: no Go toolchain >= 1.24 (e2e/cluster/build-k8s.sh fetches one)" >&2; exit 1; }

# The stamps helm's own Makefile sets: the version `helm version` reports, and the Kubernetes
# version `helm template`/`helm lint` assume without a cluster (that of helm's client-go).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mod_dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "helm.sh/helm/v3@$HELM_VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
[ -d "$mod_dir" ] || { echo "build-helm: cannot fetch helm.sh/helm/v3@$HELM_VERSION" >&2; exit 1; }
client_go=$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$mod_dir/go.mod" | head -1)
[ -n "$client_go" ] || { echo "build-helm: no k8s.io/client-go in helm's go.mod" >&2; exit 1; }
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$client_go"
done

start=$(date +%s)
echo "build-helm: building helm $HELM_VERSION" >&2
(cd "$tmp" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$tmp" \
  go install -trimpath -ldflags="$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") >&2
mv "$tmp/helm" "$out/helm.tmp"
mv "$out/helm.tmp" "$out/helm"
echo "build-helm: helm built in $(( $(date +%s) - start ))s" >&2
echo "$out/helm"
