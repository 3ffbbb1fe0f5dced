#!/usr/bin/env bash
# The adapter of redis-py's private attributes (tests/protocol/test_redisadapter.py), the packed
# script calls, and a small set of queue tests (enqueue, claim, complete, the worker's
# drain, a cluster slot followed) with the oldest and the newest redis-py that
# pyproject.toml allows (docs/compatibility.md): the lower bound pinned exactly, and the
# newest release under the upper bound as PyPI has it on the day.
#
# Each runs from a throwaway directory that holds only that redis-py (and what it
# requires), put ahead of .venv's site-packages with PYTHONPATH, which the tests' worker
# processes inherit too; everything else comes from .venv. The tests check that the
# redis-py imported is the one installed (TASKFLEET_EXPECT_REDIS_PY). REDIS_PY_ENDS=oldest
# (or newest) runs one end.
#
# An end that resolves to the very release .venv holds (the newest, in a fresh .venv, as
# CI's is) is skipped unless REDIS_PY_ENDS names it: the fast tier (`make test`) has run
# these tests, and every other, on that same redis-py already.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r lower spec < <(.venv/bin/python - <<'EOF'
import tomllib
from packaging.requirements import Requirement

deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
[req] = [r for r in map(Requirement, deps) if r.name == "redis"]
[lower] = [s.version for s in req.specifier if s.operator == ">="]
print(lower, f"redis{req.specifier}")
EOF
)
tests=(
  tests/protocol/test_redisadapter.py tests/protocol/test_redis_privates.py tests/protocol/test_protocol_wire.py
  tests/producer/test_queue_lifecycle.py tests/cluster/test_connect_follow_slot.py
  tests/worker/test_worker_drain.py::test_sigterm_lets_in_flight_tasks_finish_and_claims_nothing_more
  tests/worker/test_worker_drain.py::test_drain_command_waits_until_the_worker_holds_no_task
  tests/worker/test_worker_drain.py::test_tasks_of_a_claim_in_flight_when_the_drain_starts_are_released_not_run
)
venv_version=$(.venv/bin/python -c 'import redis; print(redis.__version__)')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for end in ${REDIS_PY_ENDS:-oldest newest}; do
  if [ "$end" = oldest ]; then want="redis==$lower"; else want="$spec"; fi
  target=$work/$end
  .venv/bin/python -m pip install -q --disable-pip-version-check --target "$target" "$want"
  version=$(PYTHONPATH=$target .venv/bin/python -c 'import redis; print(redis.__version__)')
  echo "redis-py-range: $end: $want -> redis $version"
  if [ -z "${REDIS_PY_ENDS:-}" ] && [ "$version" = "$venv_version" ]; then
    echo "redis-py-range: $end: skipped, .venv has redis $version too (make test runs these on it)"
    continue
  fi
  PYTHONPATH=$target TASKFLEET_EXPECT_REDIS_PY=$version \
    .venv/bin/pytest "${tests[@]}" -q -p no:cacheprovider
done
