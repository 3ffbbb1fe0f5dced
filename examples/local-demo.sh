#!/usr/bin/env bash
# A local worker fleet, no Kubernetes: 3 workers against a redis-server, a few hundred
# sample tasks, live progress, one worker drained mid-run, then a summary.
#
#   examples/local-demo.sh [REDIS_URL]     (default: start a throwaway redis-server)
#
# Finishes by itself in well under a minute and cleans up after itself; exits non-zero
# if any task was lost or went dead.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${VENV:-.venv}/bin
TF="$BIN/taskfleet"
PY="$BIN/python"
WORK=$(mktemp -d -t taskfleet-demo.XXXXXX)
QUEUE="demo-$$"
RECORDS="taskfleet:demo:$QUEUE:executions"
WORKERS=3
PER_BATCH=100
TOTAL=$((PER_BATCH * 3))
REDIS_PID=""
WORKER_PIDS=()

cleanup() {
    for pid in "${WORKER_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    if [[ -n "${TASKFLEET_REDIS_URL:-}" && -z "$REDIS_PID" ]]; then
        # Someone else's Redis: remove what the demo wrote.
        "$PY" - "$QUEUE" "$RECORDS" <<'PY' || true
import os, sys
import redis
from taskfleet import Queue
Queue(sys.argv[1], redis_url=os.environ["TASKFLEET_REDIS_URL"]).purge()
redis.Redis.from_url(os.environ["TASKFLEET_REDIS_URL"]).delete(sys.argv[2])
PY
    fi
    if [[ -n "$REDIS_PID" ]]; then kill "$REDIS_PID" 2>/dev/null || true; wait "$REDIS_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

say() { printf '\n== %s\n' "$*"; }

if [[ -n "${1:-}" ]]; then
    export TASKFLEET_REDIS_URL="$1"
elif [[ -z "${TASKFLEET_REDIS_URL:-}" ]]; then
    PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    say "starting redis-server on 127.0.0.1:$PORT (in $WORK)"
    redis-server --port "$PORT" --bind 127.0.0.1 --dir "$WORK" --save "" --appendonly no \
        --logfile "$WORK/redis.log" &
    REDIS_PID=$!
    export TASKFLEET_REDIS_URL="redis://127.0.0.1:$PORT/0"
    for _ in $(seq 100); do
        "$PY" -c 'import os, redis; redis.Redis.from_url(os.environ["TASKFLEET_REDIS_URL"]).ping()' \
            2>/dev/null && break
        sleep 0.1
    done
fi

stat() {  # stat FIELD...: the queue's counters, one line
    "$TF" stats "$QUEUE" --json | "$PY" -c '
import json, sys
data = json.load(sys.stdin)
print(" ".join(f"{k}={data[k]}" for k in sys.argv[1:]))' "$@"
}
count() { "$TF" stats "$QUEUE" --json | "$PY" -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }

say "starting $WORKERS workers (concurrency 4 each) on queue $QUEUE"
"$TF" configure "$QUEUE" --lease-ttl 5 >/dev/null  # the queue's config, which workers read
for i in $(seq 1 "$WORKERS"); do
    TASKFLEET_RUNTIME_DIR="$WORK/runtime-$i" "$TF" worker --queue "$QUEUE" \
        --handler taskfleet.samples:sleep_and_record --concurrency 4 --pod "demo-$i" \
        --heartbeat-interval 1 --lease-ttl 5 --drain-timeout 10 --log-level warning \
        >"$WORK/worker-$i.log" 2>&1 &
    WORKER_PIDS+=($!)
done

say "enqueueing $TOTAL tasks of 0.1-0.4 s"
for seconds in 0.1 0.25 0.4; do
    "$TF" enqueue "$QUEUE" --count "$PER_BATCH" \
        --payload "{\"seconds\": $seconds, \"record_key\": \"$RECORDS\"}" >/dev/null
done

say "progress"
drained=no
deadline=$((SECONDS + 45))
while (( SECONDS < deadline )); do
    stat pending running done dead workers
    done_now=$(count done)
    if [[ $drained == no && $done_now -ge $((TOTAL / 3)) ]]; then
        echo "-- SIGTERM to worker demo-1: it stops claiming, finishes what it holds, exits 0"
        kill -TERM "${WORKER_PIDS[0]}"
        drained=yes
    fi
    (( done_now >= TOTAL )) && break
    sleep 1
done

say "SIGTERM to every worker"
codes=()
for pid in "${WORKER_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${WORKER_PIDS[@]}"; do
    code=0; wait "$pid" || code=$?; codes+=("$code")
done
WORKER_PIDS=()
echo "worker exit codes: ${codes[*]}"

say "summary"
stat enqueued done dead pending running released requeued stale
"$PY" - "$RECORDS" "$TOTAL" <<'PY'
import collections, json, os, sys
import redis
records = [json.loads(r) for r in redis.Redis.from_url(os.environ["TASKFLEET_REDIS_URL"]).lrange(sys.argv[1], 0, -1)]
by_pod = collections.Counter(r["pod"] for r in records)
runs = collections.Counter(r["id"] for r in records)
print(f"executions: {len(records)} of {sys.argv[2]} tasks; by pod: {dict(sorted(by_pod.items()))}")
print(f"tasks run more than once: {sum(1 for n in runs.values() if n > 1)}")
PY
done_final=$(count done); dead_final=$(count dead)
if [[ $done_final -eq $TOTAL && $dead_final -eq 0 ]]; then
    echo "all $TOTAL tasks done, none lost, none dead"
else
    echo "NOT all done: done=$done_final dead=$dead_final of $TOTAL" >&2
    exit 1
fi
