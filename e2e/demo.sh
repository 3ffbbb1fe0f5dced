#!/usr/bin/env bash
# The taskfleet demo: a cluster, Redis and the operator from manifests/, the sample
# TaskQueue, a few hundred tasks processed while the fleet scales up and back down (by
# itself when the sample has spec.autoscale, as sleeper.yaml does: a line per scaling
# decision; else by kubectl scale), and a summary that accounts for every task.
#
#   e2e/demo.sh local    the local single-node cluster (make cluster-up images-local)
#   e2e/demo.sh kind     a kind cluster (make kind-up; Docker; KIND_IMAGES=local pulls nothing)
#
# Knobs: DEMO_SAMPLE (manifests/samples/sleeper.yaml), DEMO_TASKS (300),
# DEMO_TASK_SECONDS (2), DEMO_TIMEOUT (900 s); for a sample without autoscale, the
# kubectl scale steps DEMO_SCALE_UP (4) and DEMO_SCALE_DOWN (2).
set -euo pipefail

mode=${1:-local}
repo=$(cd "$(dirname "$0")/.." && pwd)
tasks=${DEMO_TASKS:-300}
task_seconds=${DEMO_TASK_SECONDS:-2}
scale_up=${DEMO_SCALE_UP:-4}
scale_down=${DEMO_SCALE_DOWN:-2}
timeout=${DEMO_TIMEOUT:-900}
sample=${DEMO_SAMPLE:-manifests/samples/sleeper.yaml}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

case $mode in
  local)
    make -C "$repo" --no-print-directory cluster-up images-local
    # shellcheck source=cluster/lib.sh
    . "$repo/e2e/cluster/lib.sh"   # refresh_stale_pods, the pinned kubectl
    export KUBECONFIG=${KUBECONFIG:-$state/kubeconfig}
    context=taskfleet-local
    ;;
  kind)
    make -C "$repo" --no-print-directory kind-up   # builds the pinned kind if it is missing
    # shellcheck source=cluster/lib.sh
    . "$repo/e2e/cluster/lib.sh"   # the pinned kubectl, the cache
    export KUBECONFIG=$cache/kind/kubeconfig   # where kind-up writes the cluster's
    context=kind-taskfleet
    loaded=$(date +%s)
    # kind-up just loaded the images under the names they had: a pod started before keeps
    # the old code. The operator is restarted (and waited for); workers started before the
    # load are deleted, and their Deployment starts new ones. IMAGE NAMESPACE SELECTOR.
    refresh_stale_pods() {
      local pod started
      if [ "$1" = operator ]; then
        k -n "$2" rollout restart deployment/taskfleet-operator >/dev/null
        k -n "$2" rollout status deployment/taskfleet-operator --timeout=300s
        return
      fi
      while read -r pod started; do
        if [ -z "$pod" ] || [ -z "$started" ]; then continue; fi
        if [ "$(date -d "$started" +%s)" -lt "$loaded" ]; then
          k -n "$2" delete pod "$pod" --wait=false >/dev/null
        fi
      done < <(k -n "$2" get pods -l "$3" \
                 -o jsonpath='{range .items[*]}{.metadata.name} {.status.startTime}{"\n"}{end}')
    }
    ;;
  *) die "usage: demo.sh local|kind" ;;
esac

k() { kubectl --context "$context" "$@"; }


# "kind/namespace/name" of every object an apply touched (one object or a List).
applied() {
  k apply "$@" -o json | python3 -c '
import json, sys
doc = json.load(sys.stdin)
for o in doc.get("items", [doc]) if doc.get("kind") == "List" else [doc]:
    m = o["metadata"]
    print("/".join((o["kind"], m.get("namespace", ""), m["name"])))'
}

wait_rollouts() { # waits for every Deployment/StatefulSet in the "kind/ns/name" lines on stdin
  local kind ns name
  while IFS=/ read -r kind ns name; do
    case $kind in
      Deployment|StatefulSet) k -n "$ns" rollout status "$kind/$name" --timeout=300s ;;
    esac
  done
}

started=$SECONDS
say "deploying Redis and the operator (kubectl apply -k manifests/)"
objects=$(applied -k "$repo/manifests")
# Not `kubectl wait --for=condition=Established`: it fails at once on a CRD whose
# conditions are not set yet, instead of waiting.
deadline=$((SECONDS + 60))
until [ "$(k get crd/taskqueues.taskfleet.dev \
  -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ]; do
  [ $SECONDS -lt $deadline ] || die "crd/taskqueues.taskfleet.dev is not Established after 60 s"
  sleep 0.5
done
refresh_stale_pods operator taskfleet-system app.kubernetes.io/name=taskfleet-operator
wait_rollouts <<<"$objects"

say "applying the sample TaskQueue ($sample)"
# The Secret with the sample Redis's URL (its password included) that the samples name in
# redis.secretRef; never printed.
applied -k "$repo/manifests/samples/redis-auth" >/dev/null
samples=$(applied -f "$repo/$sample")
tq=$(grep -m1 '^TaskQueue/' <<<"$samples") || die "$sample holds no TaskQueue"
IFS=/ read -r _ ns name <<<"$tq"
kq() { k -n "$ns" "$@"; }

deadline=$((SECONDS + 120))
until kq get deployment "$name" >/dev/null 2>&1; do
  [ $SECONDS -lt $deadline ] || die "the operator made no Deployment for TaskQueue $ns/$name"
  sleep 1
done
refresh_stale_pods worker "$ns" "taskfleet.dev/queue=$name"
kq rollout status "deployment/$name" --timeout=300s
# The queue's name in Redis, as the operator passes it to the workers.
queue=$(kq get deployment "$name" -o jsonpath='{.spec.template.spec.containers[0].args}' |
  python3 -c 'import json,sys; a=json.load(sys.stdin); print(a[a.index("--queue")+1])')
selector="taskfleet.dev/queue=$name"

say "deploying the dashboard (kubectl apply -k e2e/manifests/dashboard)"
# manifests/ with the dashboard component and the Secret of the sample Redis's URL it
# reads (never printed); read-only, it shows every queue of that Redis, this one included.
dashboard_objects=$(applied -k "$repo/e2e/manifests/dashboard")
# its image is the worker's (the [dashboard] extra)
refresh_stale_pods worker taskfleet-system app.kubernetes.io/name=taskfleet-dashboard
wait_rollouts <<<"$dashboard_objects"

# A ready worker pod: it has the library and the queue's Redis URL in its environment.
ready_pod() {
  kq get pods -l "$selector" -o json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    ready = any(c["type"] == "Ready" and c["status"] == "True"
                for c in p.get("status", {}).get("conditions", []))
    if ready and not p["metadata"].get("deletionTimestamp"):
        print(p["metadata"]["name"])
        break'
}
# The CLI inside a worker pod.
tf() {
  local pod
  pod=$(ready_pod)
  [ -n "$pod" ] || return 1
  kq exec "$pod" -c worker -- taskfleet "$@"
}
# Task ids on stdin -> "DONE DEAD MISSING UNFINISHED": where each of them is now, read in
# the pod (one exec, not one per task). Missing means no trace of it: lost.
account() {
  local pod
  pod=$(ready_pod)
  [ -n "$pod" ] || return 1
  kq exec -i "$pod" -c worker -- /opt/taskfleet/bin/python -c '
import os, sys
from taskfleet import Queue
counts = {"done": 0, "dead": 0, "missing": 0, "unfinished": 0}
with Queue(sys.argv[1], os.environ["TASKFLEET_REDIS_URL"]) as queue:
    for task_id in sys.stdin.read().split():
        task = queue.get(task_id)
        state = "missing" if task is None else str(getattr(task.state, "value", task.state))
        counts[state if state in counts else "unfinished"] += 1
print(counts["done"], counts["dead"], counts["missing"], counts["unfinished"])' "$queue"
}
stat_of() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d.get(sys.argv[2], 0))' "$1" "$2"; }

autoscale=$(kq get taskqueue "$name" -o jsonpath='{.spec.autoscale}')
min_replicas=$(kq get taskqueue "$name" -o jsonpath='{.spec.autoscale.minReplicas}')
deployed() { kq get deployment "$name" -o jsonpath='{.spec.replicas}'; }
if [ -n "$autoscale" ]; then initial_replicas=$(deployed); else
  initial_replicas=$(kq get taskqueue "$name" -o jsonpath='{.spec.replicas}'); fi
# The autoscaler's decisions as they land: one line per change of the Deployment's replicas.
follow_autoscaler() {
  local now reason
  now=$(deployed) || return 0
  if [ -n "$now" ] && [ "$now" != "$last_replicas" ]; then
    reason=$(kq get taskqueue "$name" -o jsonpath='{.status.scalingReason}')
    say "autoscaler: $last_replicas -> $now pods ($reason)"
    replicas_seen="$replicas_seen -> $now"; last_replicas=$now
  fi
}
before=$(tf stats "$queue" --json)
say "enqueueing $tasks tasks of ${task_seconds}s on queue $queue"
# The ids `taskfleet enqueue` prints: the summary accounts for these tasks, one by one.
ids=$(tf enqueue "$queue" --count "$tasks" --payload "{\"seconds\": $task_seconds}")
enqueued=$(grep -c . <<<"$ids") || true
[ "$enqueued" -eq "$tasks" ] || die "enqueued $enqueued of $tasks tasks"
work_started=$SECONDS

done0=$(stat_of "$before" done); dead0=$(stat_of "$before" dead)
requeued0=$(stat_of "$before" requeued); released0=$(stat_of "$before" released)
scaled_up=0; scaled_down=0; replicas_seen=$initial_replicas; last_replicas=$initial_replicas
while :; do
  now=$(tf stats "$queue" --json 2>/dev/null) || { sleep 1; continue; }
  done_n=$(( $(stat_of "$now" done) - done0 )); dead_n=$(( $(stat_of "$now" dead) - dead0 ))
  open=$(( $(stat_of "$now" pending) + $(stat_of "$now" delayed) + $(stat_of "$now" running) ))
  printf '\n[%3ds] done %d/%d  dead %d  pending %s  running %s  workers %s\n' \
    $((SECONDS - work_started)) "$done_n" "$tasks" "$dead_n" "$(stat_of "$now" pending)" \
    "$(stat_of "$now" running)" "$(stat_of "$now" workers)"
  kq get taskqueue "$name"
  kq get pods -l "$selector" --no-headers 2>/dev/null | awk '{print "  pod " $1 "  " $2 "  " $3}'
  if [ -n "$autoscale" ]; then
    follow_autoscaler
  elif [ $scaled_up = 0 ] && [ $((done_n * 4)) -ge "$tasks" ]; then
    say "kubectl scale tq/$name --replicas=$scale_up"
    kq scale "tq/$name" --replicas="$scale_up"
    scaled_up=1; replicas_seen="$replicas_seen -> $scale_up"
  elif [ $scaled_up = 1 ] && [ $scaled_down = 0 ] && [ $((done_n * 3)) -ge $((tasks * 2)) ]; then
    say "kubectl scale tq/$name --replicas=$scale_down (idle pods go first; busy ones drain)"
    kq scale "tq/$name" --replicas="$scale_down"
    scaled_down=1; replicas_seen="$replicas_seen -> $scale_down"
  fi
  if [ "$open" -eq 0 ] && [ $((done_n + dead_n)) -ge "$tasks" ]; then break; fi
  [ $((SECONDS - work_started)) -lt "$timeout" ] || die "not finished after ${timeout}s"
  sleep 1  # plus the time the reads take: a fresh view every second or two
done

if [ -n "$autoscale" ]; then
  say "work done: the autoscaler brings the fleet back to minReplicas ($min_replicas) after its window"
  back_by=$((SECONDS + 300))
  while [ "$(deployed)" != "${min_replicas:-1}" ] && [ $SECONDS -lt $back_by ]; do
    follow_autoscaler; sleep 1
  done
  follow_autoscaler
fi

after=$(tf stats "$queue" --json)
# By the demo's own ids, not counter deltas: tasks left over from an earlier run would
# otherwise make up for one of ours that vanished.
read -r own_done own_dead own_missing own_open < <(account <<<"$ids") ||
  die "could not read the state of the demo's tasks"
lost=$((own_missing + own_open))
say "summary"
printf '  tasks enqueued   %d (%ss each)\n' "$tasks" "$task_seconds"
printf '  done             %d\n' "$own_done"
printf '  dead             %d\n' "$own_dead"
printf '  lost             %d (%d without a trace, %d not finished)\n' \
  "$lost" "$own_missing" "$own_open"
printf '  requeued         %d (tasks taken back from pods that vanished)\n' \
  $(( $(stat_of "$after" requeued) - requeued0 ))
printf '  released         %d (tasks handed back by draining pods)\n' \
  $(( $(stat_of "$after" released) - released0 ))
printf '  replicas         %s\n' "$replicas_seen"
printf '  processing time  %ds (whole demo %ds)\n' $((SECONDS - work_started)) $((SECONDS - started))
[ "$lost" -eq 0 ] || die "$lost tasks unaccounted for"
printf '\n  The fleet keeps running: kubectl --context %s -n %s get tq,pods; remove it with\n' \
  "$context" "$ns"
printf '  kubectl --context %s delete -f %s\n' "$context" "$sample"
# Where the fleet's metrics are (docs/metrics.md): the operator's, every queue's included.
printf '\n  Metrics: the operator serves every queue on :9101/metrics, each worker pod on :9100:\n'
printf '    kubectl --context %s -n taskfleet-system port-forward deploy/taskfleet-operator 9101 &\n' \
  "$context"
printf '    curl -s localhost:9101/metrics | grep ^taskfleet_queue\n'
printf '  Prometheus: scrape annotations on every pod; manifests/monitoring/ has a PodMonitor,\n'
printf '  alert rules and a Grafana dashboard.\n'
# The web dashboard (docs/dashboard.md), read-only: the queue live in a browser.
printf '\n  Dashboard: the queue %s live in your browser:\n' "$queue"
printf '    kubectl --context %s -n taskfleet-system port-forward svc/taskfleet-dashboard 8080:80\n' \
  "$context"
printf '    then open http://127.0.0.1:8080/queues/%s\n' "$queue"
