#!/usr/bin/env bash
# The release stage (make e2e-release): the release under test built by `make release` into
# dist/, the previous one (release/previous.env) by its own commit's `make release` (cached
# per commit), the local cluster up with nothing of this tree deployed in it, then the
# scenarios of e2e/release/ install, upgrade and uninstall from those artefacts alone.
#
#   VERSION=0.3.0 e2e/release/run.sh [pytest arguments]
#
# VERSION (default 0.3.0) must differ from the previous release's; ALLOW_DIRTY=1 passes on
# to make release. TASKFLEET_RELEASE_DIST=DIR tests a release already built there instead
# (make release-check's dist/, say) and builds none. Extra arguments go to pytest, as with
# e2e/run-local.sh (a path first narrows the run to it). Root, like make release and the
# local cluster.
set -euo pipefail
# shellcheck source=../cluster/lib.sh
. "$(dirname "$0")/../cluster/lib.sh"
# shellcheck source=../../release/previous.env
. "$repo/release/previous.env"
version=${VERSION:-0.3.0}
[ "$version" != "$PREVIOUS_VERSION" ] ||
  die "VERSION $version is the previous release's (release/previous.env): name the new one"
start=$SECONDS
# The cluster first: it builds the pinned kubectl that make release renders install.yaml with.
"$here/up.sh" >/dev/null
# The queues' Redis is the tests' own, as a production Redis is no part of a release.
"$here/build-images.sh" redis
if [ -n "${TASKFLEET_RELEASE_DIST:-}" ]; then
  log "e2e-release: the release in $TASKFLEET_RELEASE_DIST, as built"
else
  make -C "$repo" --no-print-directory release VERSION="$version" ${ALLOW_DIRTY:+ALLOW_DIRTY=1} >&2
  TASKFLEET_RELEASE_DIST=$repo/dist
fi
previous=$("$repo/e2e/release/build-previous.sh" | tail -1)
log "e2e-release: cluster and both releases ready in $((SECONDS - start))s"
export KUBECONFIG=$state/kubeconfig TASKFLEET_RELEASE_DIST
export TASKFLEET_PREVIOUS_DIST=$previous
cd "$repo"
if [ $# -eq 0 ] || [ ! -e "$1" ]; then set -- e2e/release "$@"; fi
status=0
"${PYTHON:-$repo/.venv/bin/python}" -m pytest "$@" || status=$?
log "e2e-release: $((SECONDS - start))s in all"
exit $status
