"""The operator at scale on the local cluster, as figures: N TaskQueues (replicas 0, one
Redis) created in one apply, then the operator's idle CPU and memory, how fast a new
TaskQueue gets its Deployment while the N exist, and how fast a force-deleted worker
pod's tasks come back.

    make bench-operator                     # N = 50, 200, 1000
    BENCH_OPERATOR_QUEUES=200 make bench-operator

What is measured:
- Deployment after apply: from `kubectl apply` of the N TaskQueues returning to each
  Deployment first seen (listed every 0.2 s): p50 and max;
- idle CPU: the operator process's user + system CPU over BENCH_OPERATOR_IDLE_S (60 s,
  one idle housekeeping pass)
  once every Deployment exists and the Deployment controller has written every one's
  status (each such write wakes its queue), then 20 s of quiet; as % of one core;
  RSS at the end (the process is found on the node by its command line);
- a new TaskQueue while the N exist: create -> its Deployment read back (every 20 ms),
  for BENCH_OPERATOR_PROBES (20) TaskQueues created one at a time: p50, p99, max;
- pod gone: a TaskQueue with one worker holding 4 long tasks; `kubectl delete pod
  --force --grace-period=0` -> every task out of that pod (pending again), read every
  20 ms through a port-forward.
- cycles (BENCH_OPERATOR_CYCLES, 5; 0 = none) of BENCH_OPERATOR_CYCLE_QUEUES (1,000)
  TaskQueues created in one apply and deleted: per cycle the Deployments' p50 / p99 / max
  after the apply, then each operator replica's RSS (leader and standby, told apart by
  the ClusterKopfPeering's priorities) with the N in place and once they are all gone.
Figures, never pass/fail; everything it made is deleted at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config

from e2e.lib.fixtures import deploy_redis
from e2e.lib.fleet import Fleet, taskqueue_manifest
from e2e.lib.kube import CLUSTER_ERRORS, Kube
from e2e.lib.portforward import PortForward
from tests.polling import wait_for

SIZES = [
    int(n) for n in os.environ.get("BENCH_OPERATOR_QUEUES", "50,200,1000").split(",") if n.strip()
]
IDLE_S = float(os.environ.get("BENCH_OPERATOR_IDLE_S", "60"))
# A py-spy profile of the idle operator, taken after the idle CPU figure (not during).
PROFILE = os.environ.get("BENCH_OPERATOR_PROFILE", "")
PROBES = int(os.environ.get("BENCH_OPERATOR_PROBES", "20"))
CYCLES = int(os.environ.get("BENCH_OPERATOR_CYCLES", "5"))
CYCLE_QUEUES = int(os.environ.get("BENCH_OPERATOR_CYCLE_QUEUES", "1000"))
PEERING = os.environ.get("BENCH_OPERATOR_PEERING", "taskfleet")
RESULTS = Path(__file__).resolve().parent / "results"
TICK = os.sysconf("SC_CLK_TCK")


def operator_pids() -> dict[str, int]:
    """The operator's processes on this node by pod name (they run in pods of the local
    cluster as uid 10001, their POD_ID the pod's name; processes of tests run as others)."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if entry.stat().st_uid != 10001:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"taskfleet_operator" in argv and b"-m" in argv:
            pod = next((e[7:].decode() for e in environ if e.startswith(b"POD_ID=")), entry.name)
            found[pod] = int(entry.name)
    if not found:
        raise RuntimeError("no operator process on this node")
    return found


def replicas_by_role() -> dict[str, int]:
    """{"leader": pid, "standby": pid, ...}: the ClusterKopfPeering's live peer with the
    highest priority leads; one replica alone is the leader."""
    pids = operator_pids()
    if len(pids) == 1:
        return {"leader": next(iter(pids.values()))}
    peering = Kube().json("get", "clusterkopfpeering", PEERING, namespaced=False)
    peers = peering.get("status") or {}
    ranked = sorted(pids, key=lambda pod: -int((peers.get(pod) or {}).get("priority", -(2**62))))
    roles = {"leader": pids[ranked[0]]}
    for i, pod in enumerate(ranked[1:]):
        roles["standby" if i == 0 else f"standby-{i}"] = pids[pod]
    return roles


def operator_pid() -> int:
    """The leading operator's process on this node."""
    return replicas_by_role()["leader"]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def queue_spec(**extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": 0,
        "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "256Mi"}},
    }
    spec.update(extra)
    return spec


def deployments_seen(
    apps: client.AppsV1Api, namespace: str, names: set[str], since: float
) -> list[float]:
    seen: dict[str, float] = {}
    deadline = time.monotonic() + 600
    while len(seen) < len(names):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(names) - len(seen)} Deployments still missing after 600 s")
        listed = apps.list_namespaced_deployment(namespace, _preload_content=False)
        now = time.monotonic()
        for item in json.loads(listed.data)["items"]:
            name = item["metadata"]["name"]
            if name in names and name not in seen:
                seen[name] = now - since
        time.sleep(0.2)
    return list(seen.values())


def deployments_settled(apps: client.AppsV1Api, namespace: str) -> float:
    """Wait until the Deployment controller has caught up with every Deployment (its
    status written for the current generation): until then each status write is an event
    that wakes its queue's sweep, and the operator is not idle. Returns the seconds waited."""
    start = time.monotonic()

    def settled() -> bool:
        listed = apps.list_namespaced_deployment(namespace, _preload_content=False)
        items = json.loads(listed.data)["items"]
        return all(
            d.get("status", {}).get("observedGeneration") == d["metadata"]["generation"]
            for d in items
        )

    wait_for(settled, timeout=900, interval=2, what="every Deployment's status current")
    return time.monotonic() - start


def new_queue_latency(kube: Kube, apps: client.AppsV1Api, namespace: str) -> list[float]:
    custom = client.CustomObjectsApi()
    latencies = []
    for i in range(PROBES):
        name = f"probe-{i}"
        body = taskqueue_manifest(name, namespace, **queue_spec())
        start = time.monotonic()
        custom.create_namespaced_custom_object(
            "taskfleet.dev", "v1alpha1", namespace, "taskqueues", body
        )
        while True:
            try:
                apps.read_namespaced_deployment(name, namespace, _preload_content=False)
                break
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
            if time.monotonic() - start > 120:
                raise TimeoutError(f"no Deployment for {name} after 120 s")
            time.sleep(0.02)
        latencies.append(time.monotonic() - start)
        time.sleep(0.5)
    return latencies


def pod_gone_requeue(kube: Kube, forward: PortForward) -> float:
    assert kube.namespace is not None
    kube.apply(
        taskqueue_manifest(
            "victim",
            kube.namespace,
            **queue_spec(
                replicas=1, concurrency=4, heartbeat={"intervalSeconds": 2, "ttlSeconds": 60}
            ),
        )
    )
    fleet = Fleet(kube, "victim", forward)
    (pod,) = fleet.wait_ready(1, timeout=180)
    ids = fleet.queue.enqueue_sleepers(4, seconds=120)
    wait_for(
        lambda: len(fleet.queue.held_by(pod)) == 4,
        timeout=60,
        interval=0.1,
        what="the worker holding its 4 tasks",
        ignoring=CLUSTER_ERRORS,
    )
    start = time.monotonic()
    kube.run("delete", "pod", pod, "--force", "--grace-period=0", check=False)
    wait_for(
        lambda: (
            not fleet.queue.held_by(pod)
            and all(fleet.queue.task(t).get("state") in ("pending", "running") for t in ids)
        ),
        timeout=120,
        interval=0.02,
        what="the force-deleted pod's tasks back",
        ignoring=CLUSTER_ERRORS,
    )
    took = time.monotonic() - start
    kube.patch_merge("taskqueue", "victim", {"spec": {"replicas": 0}})
    return took


def measure(size: int) -> dict[str, Any]:
    namespace = f"bench-operator-{size}-{secrets.token_hex(2)}"
    kube = Kube().restricted_namespace(namespace)
    forward = deploy_redis(kube)
    apps = client.AppsV1Api()
    pid = operator_pid()
    try:
        names = {f"q{i:04d}" for i in range(size)}
        docs = [taskqueue_manifest(n, namespace, **queue_spec()) for n in sorted(names)]
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
        subprocess.run(
            ["kubectl", "-n", namespace, "apply", "-f", "-"],
            input=text,
            text=True,
            check=True,
            capture_output=True,
        )
        applied = time.monotonic()
        created = deployments_seen(apps, namespace, names, applied)
        settle_s = deployments_settled(apps, namespace)
        time.sleep(20)  # the last sweeps and status writes settle
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(IDLE_S)
        idle_cpu = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0) * 100
        rss = rss_mb(pid)
        if PROFILE:  # BENCH_OPERATOR_PROFILE=out.txt: where the idle operator's CPU goes
            subprocess.run(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(pid),
                    "--duration",
                    "30",
                    "--format",
                    "raw",
                    "--output",
                    f"{PROFILE}.{size}",
                    "--nonblocking",
                ],
                check=False,
            )
        probes = new_queue_latency(kube, apps, namespace)
        requeue_s = pod_gone_requeue(kube, forward)
        return {
            "queues": size,
            "deployment_after_apply_p50_s": statistics.median(created),
            "deployment_after_apply_max_s": max(created),
            "deployments_settled_after_s": settle_s,
            "idle_cpu_percent": idle_cpu,
            "rss_mb": rss,
            "new_queue_p50_s": statistics.median(probes),
            "new_queue_p99_s": percentile(probes, 0.99),
            "new_queue_max_s": max(probes),
            "pod_gone_requeue_s": requeue_s,
        }
    finally:
        forward.stop()
        # kubectl's own --wait reads each of N objects back: slow at 1,000; count instead.
        kube.run("delete", "taskqueues", "--all", "--wait=false", check=False, timeout=300)
        wait_for(
            lambda: not kube.items("taskqueues"),
            timeout=600,
            interval=2,
            what="every TaskQueue of the benchmark deleted",
            ignoring=CLUSTER_ERRORS,
        )
        Kube().run("delete", "namespace", namespace, "--wait=false", check=False)


def cycles(size: int, count: int) -> list[dict[str, Any]]:
    """``count`` create/delete cycles of ``size`` TaskQueues: Deployment latencies after
    each apply and every replica's RSS, full and empty."""
    namespace = f"bench-cycles-{secrets.token_hex(2)}"
    kube = Kube().restricted_namespace(namespace)
    forward = deploy_redis(kube)
    apps = client.AppsV1Api()
    rows: list[dict[str, Any]] = []
    try:
        roles = replicas_by_role()
        for cycle in range(1, count + 1):
            names = {f"q{i:04d}" for i in range(size)}
            docs = [taskqueue_manifest(n, namespace, **queue_spec()) for n in sorted(names)]
            text = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
            subprocess.run(
                ["kubectl", "-n", namespace, "apply", "-f", "-"],
                input=text,
                text=True,
                check=True,
                capture_output=True,
            )
            applied = time.monotonic()
            created = deployments_seen(apps, namespace, names, applied)
            time.sleep(20)  # the first sweeps and status writes
            full = {role: round(rss_mb(pid), 1) for role, pid in roles.items()}
            kube.run("delete", "taskqueues", "--all", "--wait=false", check=False, timeout=300)
            wait_for(
                lambda: (
                    not kube.items("taskqueues")
                    and not kube.items("deployments", selector="taskfleet.dev/queue")
                ),
                timeout=900,
                interval=2,
                what="every TaskQueue and Deployment of the cycle gone",
                ignoring=CLUSTER_ERRORS,
            )
            time.sleep(20)
            empty = {role: round(rss_mb(pid), 1) for role, pid in roles.items()}
            rows.append(
                {
                    "cycle": cycle,
                    "queues": size,
                    "deployment_after_apply_p50_s": statistics.median(created),
                    "deployment_after_apply_p99_s": percentile(created, 0.99),
                    "deployment_after_apply_max_s": max(created),
                    "rss_full_mb": full,
                    "rss_empty_mb": empty,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        return rows
    finally:
        forward.stop()
        kube.run("delete", "taskqueues", "--all", "--wait=false", check=False, timeout=300)
        Kube().run("delete", "namespace", namespace, "--wait=false", check=False)


def print_cycles(rows: list[dict[str, Any]]) -> None:
    roles = list(rows[0]["rss_full_mb"])
    print(
        "\n| cycle | Deployment after apply p50 / p99 / max | "
        + " | ".join(f"{role} RSS full / empty" for role in roles)
        + " |"
    )
    print("|--:|--:|" + "--:|" * len(roles))
    for r in rows:
        cells = [
            str(r["cycle"]),
            "{:.2f} / {:.2f} / {:.2f} s".format(
                r["deployment_after_apply_p50_s"],
                r["deployment_after_apply_p99_s"],
                r["deployment_after_apply_max_s"],
            ),
            *(
                "{:.0f} / {:.0f} MB".format(r["rss_full_mb"][role], r["rss_empty_mb"][role])
                for role in roles
            ),
        ]
        print("| " + " | ".join(cells) + " |")
    first, last = rows[0]["rss_full_mb"], rows[-1]["rss_full_mb"]
    for role in roles:
        print(
            f"{role}: RSS with the queues, cycle 1 -> {len(rows)}: "
            f"{(last[role] / first[role] - 1) * 100:+.1f} %"
        )


def main() -> int:
    config.load_kube_config()
    rows: list[dict[str, Any]] = []
    for size in SIZES:
        print(f"[{datetime.now(UTC):%H:%M:%S}] {size} TaskQueues ...", flush=True)
        rows.append(measure(size))
        print(json.dumps(rows[-1]), flush=True)
    print(
        "\n| TaskQueues | operator CPU, all idle | Deployment after apply p50 / max "
        "| new TaskQueue's Deployment p50 / p99 / max | force-deleted pod's tasks back | RSS |"
    )
    print("|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        cells = [
            f"{r['queues']}",
            f"{r['idle_cpu_percent']:.1f} %",
            "{:.1f} s / {:.1f} s".format(
                r["deployment_after_apply_p50_s"], r["deployment_after_apply_max_s"]
            ),
            "{:.2f} / {:.2f} / {:.2f} s".format(
                r["new_queue_p50_s"], r["new_queue_p99_s"], r["new_queue_max_s"]
            ),
            f"{r['pod_gone_requeue_s']:.2f} s",
            f"{r['rss_mb']:.0f} MB",
        ]
        print("| " + " | ".join(cells) + " |")
    cycle_rows: list[dict[str, Any]] = []
    if CYCLES:
        print(f"[{datetime.now(UTC):%H:%M:%S}] {CYCLES} cycles of {CYCLE_QUEUES} ...", flush=True)
        cycle_rows = cycles(CYCLE_QUEUES, CYCLES)
        print_cycles(cycle_rows)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"operator-{datetime.now(UTC):%Y-%m-%dT%H%MZ}.json"
    out.write_text(json.dumps({"sizes": rows, "cycles": cycle_rows}, indent=2))
    print(f"\nwritten {out.relative_to(RESULTS.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
