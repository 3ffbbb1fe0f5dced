#!/usr/bin/env bash
# The previous release's artefacts (release/previous.env), built by that commit's own
# `make release` from a throwaway clone of it, once per commit: later runs find them in
# ${TASKFLEET_CACHE:-~/.cache/taskfleet}/releases/COMMIT-VERSION/ (checked against their
# SHA256SUMS). Prints that directory on its last line. Root (buildah), like `make release`.
#
#   e2e/release/build-previous.sh
#
# The commit must be in this clone's object store: a shallow CI checkout needs its history
# (`git fetch --unshallow`, or a checkout with fetch-depth 0).
set -euo pipefail
# shellcheck source=../cluster/lib.sh
. "$(dirname "$0")/../cluster/lib.sh"
# shellcheck source=../../release/previous.env
. "$repo/release/previous.env"
[ "$(id -u)" = 0 ] || die "build-previous.sh runs as root (make release builds images with buildah)"
commit=$PREVIOUS_COMMIT version=$PREVIOUS_VERSION
[[ $commit =~ ^[0-9a-f]{40}$ ]] || die "release/previous.env: PREVIOUS_COMMIT must be a full commit id"
out=$cache/releases/$commit-$version

if [ -f "$out/SHA256SUMS" ] && (cd "$out" && sha256sum --quiet -c SHA256SUMS >/dev/null 2>&1); then
  log "previous release $version (${commit:0:12}) cached in $out"
  echo "$out"
  exit 0
fi
git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null ||
  die "commit $commit (release/previous.env) is not in this clone: fetch the history (git fetch --unshallow)"

mkdir -p "$cache/releases"
exec {lock_fd}>"$cache/releases/.lock"
flock -w 3600 "$lock_fd" || die "another build of a previous release holds the lock"
tmp=$(mktemp -d "$cache/releases/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# A clone that borrows this repository's objects (--shared): any commit they hold checks
# out, reachable from a branch or not. The previous tree builds itself, with its own
# Makefile, release.py, build-images.sh and the build tools its pyproject pins (in a venv
# of its own, inside the clone).
git clone --quiet --shared --no-checkout "$repo" "$tmp/tree"
git -C "$tmp/tree" checkout --quiet --detach "$commit"
log "building the previous release $version from ${commit:0:12} with its own make release"
start=$SECONDS
make -C "$tmp/tree" --no-print-directory release VERSION="$version" REGISTRY=localhost >&2
rm -rf "$out.tmp" && mv "$tmp/tree/dist" "$out.tmp"
(cd "$out.tmp" && sha256sum --quiet -c SHA256SUMS) || die "the previous release's SHA256SUMS do not match its files"
rm -rf "$out" && mv "$out.tmp" "$out"
log "previous release $version built in $((SECONDS - start))s: $out"
echo "$out"
