#!/usr/bin/env bash
# A level-1 release's library (release/previous.env's LEVEL1_COMMIT, named LEVEL1_VERSION) in
# a venv of its own, for tests that run its worker beside this tree's producers
# (tests/release/test_previous_worker.py). Only the
# `taskfleet` wheel is built, from that commit's own pyproject and sources (`git archive`,
# the version stamped as its `make release` stamps it), with no image build; the release
# stage's wheel is taken instead when e2e/release/build-previous.sh has built it. The venv
# gets the wheel's dependencies from the package index, as an application does.
# Cached once per commit in ${TASKFLEET_CACHE:-~/.cache/taskfleet}/previous-wheel/COMMIT/
# (the wheel, and venv/); prints the venv's directory on its last line.
#
#   release/previous-library.sh
#
# The commit must be in this clone's object store: a shallow checkout needs its history
# (`git fetch --unshallow`, or a checkout with fetch-depth 0).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=previous.env
. "$repo/release/previous.env"
cache=${TASKFLEET_CACHE:-$HOME/.cache/taskfleet}
python=${PYTHON:-python3}
commit=$LEVEL1_COMMIT version=$LEVEL1_VERSION

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { echo "previous-library: error: $*" >&2; exit 2; }

[[ $commit =~ ^[0-9a-f]{40}$ ]] || die "release/previous.env: LEVEL1_COMMIT must be a full commit id"
out=$cache/previous-wheel/$commit
wheel=taskfleet-$version-py3-none-any.whl
venv=$out/venv

ready() {
  [ -f "$venv/.ready" ] &&
    [ "$("$venv/bin/python" -c 'import taskfleet; print(taskfleet.__version__)' 2>/dev/null)" = "$version" ]
}
if ready; then
  echo "$venv"
  exit 0
fi

mkdir -p "$out"
exec {lock_fd}>"$out/.lock"
flock -w 900 "$lock_fd" || die "another build of the previous library holds $out/.lock"
if ready; then # built while this one waited for the lock
  echo "$venv"
  exit 0
fi
start=$SECONDS
tmp=$(mktemp -d "$out/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ ! -f "$out/$wheel" ]; then
  release=$cache/releases/$commit-$version
  if [ -f "$release/$wheel" ] && (cd "$release" && sha256sum --quiet -c SHA256SUMS >/dev/null 2>&1); then
    log "previous library $version: the release stage's wheel ($release)"
    cp "$release/$wheel" "$tmp/$wheel"
  else
    git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null ||
      die "commit $commit (release/previous.env) is not in this clone: fetch the history (git fetch --unshallow)"
    log "previous library $version: building its wheel from ${commit:0:12}"
    mkdir "$tmp/tree"
    # what its pyproject builds the `taskfleet` wheel from (the readme and license too)
    git -C "$repo" archive --format=tar "$commit" pyproject.toml README.md LICENSE worker-image/taskfleet |
      tar -x -C "$tmp/tree"
    # release.py's stamp_version: the released version in the copy, never in the commit
    sed -i -E "s/^__version__ = \"[^\"]*\"\$/__version__ = \"$version\"/" \
      "$tmp/tree/worker-image/taskfleet/_version.py"
    grep -qx "__version__ = \"$version\"" "$tmp/tree/worker-image/taskfleet/_version.py" ||
      die "${commit:0:12}'s worker-image/taskfleet/_version.py has no __version__ line to stamp"
    "$python" -m pip wheel -q --disable-pip-version-check --no-deps --wheel-dir "$tmp" "$tmp/tree" >&2
    [ -f "$tmp/$wheel" ] || die "building ${commit:0:12}'s library made no $wheel"
  fi
  mv "$tmp/$wheel" "$out/$wheel"
fi

# made in place (its scripts name its directory); ready once .ready is written, last
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$out/$wheel" >&2
echo "$version" >"$venv/.ready"
ready || die "the venv in $venv does not import taskfleet $version"
log "previous library $version ready in $((SECONDS - start))s: $venv"
echo "$venv"
