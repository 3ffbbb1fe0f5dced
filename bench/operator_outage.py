"""The operator while one Redis refuses it, as figures: N TaskQueues (1,000) whose Secret
holds a password the Redis no longer takes (a rotated secret), one healthy TaskQueue on
another Redis, and in the same run the operator's CPU and the healthy queue's dead-pod
requeue latency.

    make bench-operator-outage                          # N = 1000, 60 s measured
    BENCH_OUTAGE_QUEUES=200 BENCH_OUTAGE_S=30 make bench-operator-outage
    BENCH_OUTAGE_SRC=/path/to/other/checkout make bench-operator-outage  # that code's operator

Process-level: a real etcd + kube-apiserver (the test tier's, `tests/fixtures_kube.py`),
real redis-servers, and the operator as a real process (``python -m taskfleet_operator``,
the Deployment's default intervals and timeouts, the ServiceAccount and RBAC of
manifests/rbac). No kubelet runs there: the healthy queue's worker pod is a Pod object
(Pending) whose worker acts in Redis through the Broker API under its name, and its
deletion is what the operator sees of a pod gone.

What is measured, once every refused TaskQueue shows RedisReachable=False/RedisAuthRefused
and no TaskQueue's creation has been handled for BENCH_OUTAGE_SETTLE_S (30 s: kopf
handles again what the apiserver throttled at first), over BENCH_OUTAGE_S (60 s):
- operator CPU: user + system CPU of the operator process, as % of one core;
- connections the refusing Redis received (its INFO total_connections_received);
- dead-pod requeue: every BENCH_OUTAGE_PROBE_EVERY_S (6 s), a Pod created, a worker of it
  holding 4 tasks, the Pod deleted -> all 4 pending again (read every 10 ms): p50 and max;
- RSS at the end.
Figures, never pass/fail.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from taskfleet.producer.queue import Queue

from bench.operator_scale import cpu_seconds, rss_mb
from tests.fixtures_cluster import Cluster
from tests.fixtures_kube import KubeApiserver, kubectl_path
from tests.fixtures_operator import CRD_FILE, GROUP, PLURAL, REPO, VERSION, wait_established
from tests.fixtures_redis import BlockingBroker, RedisServer, free_port
from tests.polling import wait_for

QUEUES = int(os.environ.get("BENCH_OUTAGE_QUEUES", "1000"))
MEASURE_S = float(os.environ.get("BENCH_OUTAGE_S", "60"))
SETTLE_S = float(os.environ.get("BENCH_OUTAGE_SETTLE_S", "30"))
PROBE_EVERY_S = float(os.environ.get("BENCH_OUTAGE_PROBE_EVERY_S", "6"))
#: Another checkout whose operator to run (its operator/ and worker-image/ first on the path).
SOURCE = os.environ.get("BENCH_OUTAGE_SRC", "")
RESULTS = Path(__file__).resolve().parent / "results"
NAMESPACE = "bench-outage"


def kubectl(server: KubeApiserver, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [kubectl_path(), *args],
        input=stdin,
        env=server.env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return result.stdout


def operator_kubeconfig(server: KubeApiserver, directory: Path) -> Path:
    """A kubeconfig for the operator's ServiceAccount, bound by manifests/rbac only."""
    kubectl(server, "apply", "--server-side", "-f", str(CRD_FILE))
    wait_established(server, f"{PLURAL}.{GROUP}")
    kubectl(server, "apply", "-f", str(REPO / "manifests" / "namespace.yaml"))
    kubectl(server, "apply", "-k", str(REPO / "manifests" / "rbac"))
    token = kubectl(
        server, "-n", "taskfleet-system", "create", "token", "taskfleet-operator", "--duration=2h"
    ).strip()
    config = json.loads(server.kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": {"token": token}}]
    path = directory / "operator-kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def taskqueue(name: str, redis: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TaskQueue",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "image": "localhost/taskfleet-worker:dev",
            "handler": "taskfleet.samples:echo",
            "replicas": 0,
            "redis": redis,
            **extra,
        },
    }


def start_operator(server: KubeApiserver, kubeconfig: Path, log: Path, metrics: int) -> Any:
    env = {
        **server.env(),
        "KUBECONFIG": str(kubeconfig),
        "TASKFLEET_WATCH_NAMESPACES": NAMESPACE,
        "TASKFLEET_METRICS_PORT": str(metrics),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    if SOURCE:
        paths = [f"{SOURCE}/operator", f"{SOURCE}/worker-image"]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "taskfleet_operator", "--liveness", liveness],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=SOURCE or REPO,
        )


def refused_count(custom: client.CustomObjectsApi) -> int:
    listed: Any = custom.list_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, _preload_content=False
    )
    count = 0
    for item in json.loads(listed.data)["items"]:
        for condition in item.get("status", {}).get("conditions", []):
            if condition["type"] == "RedisReachable" and condition["status"] == "False":
                count += 1
    return count


def connections_received(server: RedisServer) -> int:
    admin = server.admin()
    try:
        return int(admin.info("stats")["total_connections_received"])
    finally:
        admin.close()


def requeue_once(cluster: Cluster, queue: Queue, runner: asyncio.Runner, url: str, i: int) -> float:
    """A worker pod holding 4 tasks deleted -> its 4 tasks pending again (seconds)."""
    pod = f"healthy-{i}"
    cluster.create_pod(pod, "healthy")
    for n in range(4):
        queue.enqueue({"n": n})
    broker = BlockingBroker(runner, url, queue.name, pod, "1")
    try:
        broker.register(4)
        held = broker.claim(4).tasks
        assert len(held) == 4, held
        pending = queue.stats()["pending"]
        start = time.monotonic()
        cluster.core.delete_namespaced_pod(pod, NAMESPACE, grace_period_seconds=0)
        wait_for(
            lambda: queue.stats()["pending"] >= pending + 4,
            timeout=60,
            interval=0.01,
            what="the deleted pod's tasks back",
        )
        took = time.monotonic() - start
    finally:
        broker.close()
    queue.client.delete(queue.keys.pending)  # the next probe starts from none pending
    return took


def measure(workdir: Path) -> dict[str, Any]:
    server = KubeApiserver(workdir / "kube")
    server.start()
    refusing = RedisServer(workdir / "refusing", password="rotated-pw")
    healthy = RedisServer(workdir / "healthy")
    refusing.start()
    healthy.start()
    operator = None
    try:
        kubeconfig = operator_kubeconfig(server, workdir)
        kubectl(server, "create", "namespace", NAMESPACE)
        # No controller-manager makes it here; pods need their ServiceAccount.
        kubectl(server, "-n", NAMESPACE, "create", "serviceaccount", "default")
        stale = refusing.url_as(password="old-pw")  # what the Secret still holds
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "redis", "namespace": NAMESPACE},
            "data": {"url": base64.b64encode(stale.encode()).decode()},
        }
        refs = {"secretRef": {"name": "redis", "key": "url"}}
        items = [secret] + [taskqueue(f"refused-{i:04d}", refs) for i in range(QUEUES)]
        items.append(
            taskqueue(
                "healthy",
                {"url": healthy.url},
                heartbeat={"intervalSeconds": 2, "ttlSeconds": 600},
            )
        )
        kubectl(
            server,
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )
        log = workdir / "operator.log"
        operator = start_operator(server, kubeconfig, log, free_port())
        started = time.monotonic()
        with server.api_client() as api:
            custom = client.CustomObjectsApi(api)
            cluster = Cluster(api, NAMESPACE)
            wait_for(
                lambda: refused_count(custom) >= QUEUES,
                timeout=900,
                interval=2,
                what=lambda: f"every refused queue's status:\n{log.read_text()[-3000:]}",
            )
            reported_s = time.monotonic() - started

            # The start's work done: kopf retries what the apiserver throttled at first
            # (a creation handled again when its progress annotation was not written), so
            # wait until no creation has been handled for SETTLE_S: the steady outage.
            def handled() -> int:
                return log.read_text(errors="replace").count("Creation is processed")

            last, since = handled(), time.monotonic()
            while time.monotonic() - since < SETTLE_S:
                if time.monotonic() - started > 1200:
                    raise TimeoutError("the operator never settled")
                time.sleep(2)
                now = handled()
                if now != last:
                    last, since = now, time.monotonic()
            handled_s = time.monotonic() - started
            lines0 = log.read_text(errors="replace").count("\n")
            queue = Queue(f"{NAMESPACE}.healthy", healthy.url)
            runner = asyncio.Runner()
            latencies: list[float] = []
            conn0 = connections_received(refusing) + 1
            cpu0, t0 = cpu_seconds(operator.pid), time.monotonic()
            while time.monotonic() - t0 < MEASURE_S:
                latencies.append(requeue_once(cluster, queue, runner, healthy.url, len(latencies)))
                time.sleep(max(0.0, PROBE_EVERY_S - latencies[-1]))
            elapsed = time.monotonic() - t0
            cpu = (cpu_seconds(operator.pid) - cpu0) / elapsed * 100
            conns = connections_received(refusing) - conn0
            lines = log.read_text(errors="replace").count("\n") - lines0
            runner.close()
            queue.close()
            return {
                "mode": "process-level (real kube-apiserver + etcd, no kubelet)",
                "operator_source": SOURCE or "this checkout",
                "refused_queues": QUEUES,
                "all_refused_reported_after_s": round(reported_s, 1),
                "settled_after_s": round(handled_s, 1),
                "settle_s": SETTLE_S,
                "operator_log_lines_in_window": lines,
                "measured_s": round(elapsed, 1),
                "operator_cpu_percent": round(cpu, 1),
                "refusing_redis_connections": conns,
                "refusing_redis_connections_per_s": round(conns / elapsed, 2),
                "requeue_probes": len(latencies),
                "requeue_p50_s": round(statistics.median(latencies), 3),
                "requeue_max_s": round(max(latencies), 3),
                "rss_mb": round(rss_mb(operator.pid), 1),
                "load_average_1m": os.getloadavg()[0],
            }
    finally:
        if operator is not None:
            operator.terminate()
            try:
                operator.wait(timeout=30)
            except subprocess.TimeoutExpired:
                operator.kill()
                operator.wait()
        refusing.stop()
        healthy.stop()
        server.stop()


def main() -> int:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {QUEUES} refused TaskQueues + 1 healthy ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-outage-") as tmp:
        try:
            row = measure(Path(tmp))
        finally:  # the operator's log, for a look at what it did
            log = Path(tmp) / "operator.log"
            if log.exists():
                (Path(tempfile.gettempdir()) / "bench-operator-outage.log").write_bytes(
                    log.read_bytes()
                )
    print(json.dumps(row, indent=2))
    print(
        f"\noperator CPU {row['operator_cpu_percent']} % of a core (goal <= 10 %); healthy "
        f"queue's dead-pod requeue p50 {row['requeue_p50_s']} s, max {row['requeue_max_s']} s "
        f"(goal <= 1 s), {row['requeue_probes']} probes; the refusing Redis saw "
        f"{row['refusing_redis_connections']} connections in {row['measured_s']} s"
    )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"operator-outage-{datetime.now(UTC):%Y-%m-%dT%H%MZ}.json"
    out.write_text(json.dumps(row, indent=2))
    print(f"written {out.relative_to(RESULTS.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
