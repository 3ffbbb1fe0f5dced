"""The operator's memory over create/delete cycles and a burst's Deployment latency, as
figures, without a cluster: a real etcd + kube-apiserver (the test tier's), a real
kube-controller-manager (the Deployment controller and the garbage collector, so a deleted
TaskQueue's Deployment goes as it does in a cluster), one redis-server, and two operator
processes (``python -m taskfleet_operator``, HA: one ClusterKopfPeering, the Deployment's
default intervals, the ServiceAccount and RBAC of manifests/rbac).

    make bench-operator-memory                      # 1,000 TaskQueues, 10 cycles
    BENCH_MEMORY_QUEUES=200 BENCH_MEMORY_CYCLES=3 make bench-operator-memory
    BENCH_MEMORY_COUNTS=1 make bench-operator-memory  # + the commonest object types
    BENCH_MEMORY_TRACE=8 make bench-operator-memory   # + tracemalloc snapshots (8 frames)
    BENCH_MEMORY_IDLE_S=120 make bench-operator-memory  # + each replica's CPU over 120 s
                                                        # after the full sample
    BENCH_MEMORY_REQUESTS=1 make bench-operator-memory  # + the leader's API requests and
                                                       # watch events per TaskQueue
    BENCH_MEMORY_CREATE_ONLY=1 make bench-operator-memory  # the creates alone, no operator
    BENCH_MEMORY_PROBES=20 make bench-operator-memory  # + 20 single TaskQueues created one
                                                       # at a time with the N in place
    BENCH_MEMORY_KEEP_LAST=1 make bench-operator-memory  # the last cycle's TaskQueues are
                                                         # not deleted (no "empty" sample)

Each cycle: N TaskQueues (replicas 0) in one `kubectl create`; each Deployment first seen
(its ADDED event on a watch opened before the create) after the create returned: p50,
p99, max (negative: before it returned), and how many came before it returned; every
TaskQueue handled (status.observedGeneration) and BENCH_MEMORY_SETTLE_S (20 s) of quiet, then each
replica's RSS ("full"); every TaskQueue deleted, its finalizer gone and its Deployment
collected, the same quiet, RSS again ("empty"). Figures, never pass/fail. The end: each
replica's MB per TaskQueue above its start (the leader's goal: 0.08), the last cycle
against the second (goal: within 5 %), and a chart of every cycle
(bench/results/charts/operator-memory.svg, ``bench.charts``).

With BENCH_MEMORY_PROBES=K, after the full sample (and the idle window), K more TaskQueues
are created one at a time, each waited for: from its create request to its Deployment's
ADDED event (a watch on that name alone), p50 / p99 / max. That is what a team creating
one queue waits with the N in place, where the burst's figures are the lag behind the
burst.

Each cycle's create follows the previous cycle's settle time, with the garbage collector
possibly still deleting its ReplicaSets. BENCH_MEMORY_QUIET=1 waits before each create for
a quiet cluster instead: the previous cycle's ReplicaSets collected and the machine's CPU
under BENCH_MEMORY_QUIET_BUSY (0.15 of every core) for 5 s (at most 300 s; the wait and
the busy share at create are reported), so each burst starts from where the first did.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from bench import operator_requests
from bench.operator_outage import kubectl, operator_kubeconfig
from bench.operator_scale import TICK, cpu_seconds, percentile, rss_mb
from tests.fixtures_kube import KubeApiserver, kubectl_path
from tests.fixtures_operator import GROUP, PLURAL, REPO, VERSION, wait_established
from tests.fixtures_redis import RedisServer, free_port
from tests.polling import wait_for

QUEUES = int(os.environ.get("BENCH_MEMORY_QUEUES", "1000"))
CYCLES = int(os.environ.get("BENCH_MEMORY_CYCLES", "10"))
SETTLE_S = float(os.environ.get("BENCH_MEMORY_SETTLE_S", "20"))
#: A window after the full sample over which each replica's idle CPU is measured (0: none).
IDLE_S = float(os.environ.get("BENCH_MEMORY_IDLE_S", "0"))
COUNTS = os.environ.get("BENCH_MEMORY_COUNTS", "") not in ("", "0")
#: tracemalloc's frames per allocation in each operator (0: off): a snapshot at each sample.
TRACE = int(os.environ.get("BENCH_MEMORY_TRACE", "0") or 0)
REQUESTS = os.environ.get("BENCH_MEMORY_REQUESTS", "") not in ("", "0")
QUIET = os.environ.get("BENCH_MEMORY_QUIET", "") not in ("", "0")
QUIET_BUSY = float(os.environ.get("BENCH_MEMORY_QUIET_BUSY", "0.15"))
QUIET_WINDOW_S = 5.0
#: Single TaskQueues created one at a time after the full sample (0: none).
PROBES = int(os.environ.get("BENCH_MEMORY_PROBES", "0") or 0)
#: Leave the last cycle's TaskQueues in place (10,000 take long to delete).
KEEP_LAST = os.environ.get("BENCH_MEMORY_KEEP_LAST", "") not in ("", "0")
#: How long a burst may take to be created, handled or deleted (10,000 take longer).
WAIT_S = max(900.0, QUEUES * 0.3)
#: Another checkout whose operator to run (its operator/ and worker-image/ first on the path).
SOURCE = os.environ.get("BENCH_MEMORY_SRC", "")
RESULTS = Path(__file__).resolve().parent / "results"
NAMESPACE = "bench-memory"
PEERING = "bench-memory"

# With BENCH_MEMORY_COUNTS, each operator writes its live objects by type on SIGUSR1.
_COUNTING = """
import collections, gc, os, signal, sys

def _count(signum, frame):
    gc.collect()
    counts = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
    path = os.environ["BENCH_MEMORY_COUNTS_FILE"]
    with open(path, "a") as out:
        out.write("--- " + str(sum(counts.values())) + " objects\\n")
        for name, n in counts.most_common(40):
            out.write(f"{n:9d} {name}\\n")
        # Whole objects of the API still held (parsed watch events), by kind, and what
        # holds a few of them (two levels of referrers, by type).
        bodies = [
            o for o in gc.get_objects()
            if type(o) is dict and "kind" in o and "metadata" in o and "apiVersion" in o
        ]
        kinds = collections.Counter(str(o.get("kind")) for o in bodies)
        out.write(f"bodies held: {dict(kinds)}\\n")
        for body in sorted(bodies, key=lambda o: o.get("kind") != "TaskQueue")[:3]:
            for holder in gc.get_referrers(body)[:4]:
                if holder is bodies:
                    continue
                up = [type(h).__qualname__ for h in gc.get_referrers(holder)[:6]]
                out.write(f"  {body.get('kind')} held by {type(holder).__qualname__} <- {up}\\n")

signal.signal(signal.SIGUSR1, _count)
"""

# With BENCH_MEMORY_TRACE, each operator traces its allocations from the start and dumps a
# tracemalloc snapshot on SIGUSR1 (`bench.operator_memory_trace` compares two).
_TRACING = """
import gc, os, signal, tracemalloc

tracemalloc.start(int(os.environ["BENCH_MEMORY_TRACE"]))
_tf_dumps = [0]

def _trace(signum, frame):
    gc.collect()
    _tf_dumps[0] += 1
    base = os.environ["BENCH_MEMORY_TRACE_FILE"]
    snapshot = tracemalloc.take_snapshot()
    snapshot.dump(f"{base}.{_tf_dumps[0]}.tmp")
    os.rename(f"{base}.{_tf_dumps[0]}.tmp", f"{base}.{_tf_dumps[0]}")

signal.signal(signal.SIGUSR1, _trace)
"""


def create_all(server: KubeApiserver, items: list[dict[str, Any]]) -> None:
    """Create ``items`` with one ``kubectl create`` (one POST each; apply reads each first)."""
    subprocess.run(
        [kubectl_path(), "create", "-f", "-"],
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        env=server.env(),
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )


def controller_manager(server: KubeApiserver, log: Path) -> subprocess.Popen[bytes]:
    """The Deployment and ReplicaSet controllers and the garbage collector."""
    pki = server.directory / "pki"
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                str(server.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={server.kubeconfig}",
                "--controllers=deployment,replicaset,garbagecollector",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def start_operator(
    server: KubeApiserver, kubeconfig: Path, workdir: Path, name: str
) -> subprocess.Popen[bytes]:
    env = {
        **server.env(),
        "KUBECONFIG": str(kubeconfig),
        "TASKFLEET_WATCH_NAMESPACES": NAMESPACE,
        "TASKFLEET_METRICS_PORT": str(free_port()),
        "TASKFLEET_PEERING": PEERING,
        "POD_ID": name,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    paths = [f"{SOURCE}/operator", f"{SOURCE}/worker-image"] if SOURCE else []
    if COUNTS or REQUESTS or TRACE:
        site = workdir / "counting"
        site.mkdir(exist_ok=True)
        text = (_TRACING if TRACE else _COUNTING if COUNTS else "") + (
            operator_requests.SITE if REQUESTS else ""
        )
        (site / "sitecustomize.py").write_text(text)
        paths.append(str(site))
    if paths:
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
        env["BENCH_MEMORY_COUNTS_FILE"] = str(workdir / f"{name}.counts")
        env["BENCH_MEMORY_REQUESTS_FILE"] = str(workdir / f"{name}.requests")
        env["BENCH_MEMORY_TRACE_FILE"] = str(workdir / f"{name}.trace")
        env["BENCH_MEMORY_TRACE"] = str(TRACE)
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    with (workdir / f"{name}.log").open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "taskfleet_operator", "--liveness", liveness],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=SOURCE or REPO,
        )


def taskqueue(name: str, url: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TaskQueue",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "image": "localhost/taskfleet-worker:dev",
            "handler": "taskfleet.samples:echo",
            "replicas": 0,
            "redis": {"url": url},
            "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}},
        },
    }


def _items(api: Any, kind: str) -> list[dict[str, Any]]:
    if kind == "replicasets":
        listed: Any = client.AppsV1Api(api).list_namespaced_replica_set(
            NAMESPACE, _preload_content=False
        )
    elif kind == "deployments":
        listed = client.AppsV1Api(api).list_namespaced_deployment(NAMESPACE, _preload_content=False)
    else:
        listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, _preload_content=False
        )
    items: list[dict[str, Any]] = json.loads(listed.data)["items"]
    return items


class DeploymentsSeen:
    """When each Deployment first appears: the arrival of its ADDED event on a watch opened
    before the create (monotonic clock). A watch costs the apiserver one event per
    Deployment; a listing every 0.1 s sent every Deployment ten times a second and loaded
    the apiserver the burst measures, and its figures had the listing's own duration
    (1-2 s under load) as their floor."""

    def __init__(self, server: KubeApiserver, names: set[str], *, only: str = "") -> None:
        self.names = names
        #: A field selector (``metadata.name=...``): one Deployment's events, not every one's.
        self._selector = only
        self.seen: dict[str, float] = {}
        self._api = server.api_client()
        self._apps = client.AppsV1Api(self._api)
        self._done = threading.Event()
        self._version = self._relist()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _relist(self) -> str:
        listed = json.loads(
            self._apps.list_namespaced_deployment(
                NAMESPACE, field_selector=self._selector, _preload_content=False
            ).data
        )
        now = time.monotonic()
        for item in listed["items"]:
            self.seen.setdefault(item["metadata"]["name"], now)
        version: str = listed["metadata"]["resourceVersion"]
        return version

    def _watch(self) -> None:
        while not self._done.is_set() and not self.names <= set(self.seen):
            response = self._apps.list_namespaced_deployment(
                NAMESPACE,
                watch=True,
                field_selector=self._selector,
                resource_version=self._version,
                timeout_seconds=30,
                _preload_content=False,
            )
            try:
                for line in iter_resp_lines(response):
                    event = json.loads(line)
                    if event["type"] == "ERROR":  # expired: list, and watch from there
                        self._version = self._relist()
                        break
                    meta = event["object"]["metadata"]
                    self.seen.setdefault(meta["name"], time.monotonic())
                    self._version = meta["resourceVersion"]
                    if self.names <= set(self.seen):
                        break
            finally:
                response.release_conn()

    def after(self, since: float, timeout: float = 900) -> list[float]:
        """Each Deployment's first sighting, seconds after `since` (negative: before)."""
        wait_for(
            lambda: self.names <= set(self.seen),
            timeout=timeout,
            interval=0.1,
            what="every Deployment created",
        )
        return [self.seen[name] - since for name in self.names]

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=60)
        self._api.close()


def delete_all(server: KubeApiserver) -> None:
    """Every TaskQueue deleted (the request retried: a loaded apiserver times out)."""
    argv = [kubectl_path(), "-n", NAMESPACE, "delete", "taskqueues", "--all", "--wait=false"]
    for _ in range(5):
        done = subprocess.run(
            argv, check=False, env=server.env(), capture_output=True, timeout=1800
        )
        if done.returncode == 0:
            return
        time.sleep(5)
    raise RuntimeError(f"kubectl delete failed: {done.stderr.decode(errors='replace')}")


def probe_new_queues(server: KubeApiserver, api: Any, url: str, count: int) -> list[float]:
    """Seconds from each single TaskQueue's create request to its Deployment's ADDED event,
    ``count`` of them one after another (each watched alone: a watch of every Deployment
    would relist the N already in place for each)."""
    custom = client.CustomObjectsApi(api)
    latencies: list[float] = []
    for i in range(count):
        name = f"probe{i:03d}"
        watched = DeploymentsSeen(server, {name}, only=f"metadata.name={name}")
        try:
            sent = time.monotonic()
            custom.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, taskqueue(name, url)
            )
            latencies.extend(watched.after(sent, timeout=120))
        finally:
            watched.close()
    return latencies


def _machine_busy(window_s: float) -> float:
    """The share of every core's time spent busy (not idle nor waiting on I/O) over
    ``window_s``, from /proc/stat."""

    def times() -> tuple[int, int]:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]

    total0, idle0 = times()
    time.sleep(window_s)
    total1, idle1 = times()
    return 1 - (idle1 - idle0) / max(1, total1 - total0)


def wait_quiet(api: Any) -> tuple[float, float]:
    """Wait for the previous cycle's ReplicaSets to be collected and the machine to be
    quiet (see the module's doc); (seconds waited, busy share over the last window)."""
    start = time.monotonic()
    wait_for(
        lambda: not _items(api, "replicasets"),
        timeout=300,
        interval=2,
        what="every ReplicaSet collected",
    )
    busy = _machine_busy(QUIET_WINDOW_S)
    while busy > QUIET_BUSY and time.monotonic() - start < 300:
        busy = _machine_busy(QUIET_WINDOW_S)
    return time.monotonic() - start, busy


def main_thread_cpu_seconds(pid: int) -> float:
    """The CPU of a process's main thread (kopf's event loop): user + system."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu(operators: dict[str, subprocess.Popen[bytes]]) -> dict[str, tuple[float, float]]:
    """Each operator's (process, main thread) CPU seconds so far."""
    return {
        name: (cpu_seconds(p.pid), main_thread_cpu_seconds(p.pid)) for name, p in operators.items()
    }


def spent(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], index: int
) -> dict[str, float]:
    return {name: round(after[name][index] - before[name][index], 1) for name in before}


def sample(
    operators: dict[str, subprocess.Popen[bytes]], workdir: Path, label: str
) -> dict[str, float]:
    rss = {name: round(rss_mb(p.pid), 1) for name, p in operators.items()}
    if TRACE:
        for name, process in operators.items():
            with (workdir / f"{name}.traces").open("a") as out:
                out.write(f"{label}\t{rss[name]}\n")
            dumps = len(list(workdir.glob(f"{name}.trace.*[0-9]")))
            process.send_signal(signal.SIGUSR1)
            wait_for(
                lambda name=name, dumps=dumps: (
                    len(list(workdir.glob(f"{name}.trace.*[0-9]"))) > dumps
                ),
                timeout=300,
                interval=0.5,
                what=f"the {name}'s tracemalloc snapshot",
            )
    elif COUNTS:
        for name, process in operators.items():
            with (workdir / f"{name}.counts").open("a") as out:
                out.write(f"=== {label}\n")
            process.send_signal(signal.SIGUSR1)
        time.sleep(3)
    return rss


def requests_so_far(leader: subprocess.Popen[bytes], workdir: Path) -> dict[str, int]:
    """The leader's requests and watch events so far ({} without BENCH_MEMORY_REQUESTS)."""
    if not REQUESTS:
        return {}
    path = workdir / "leader.requests"
    path.unlink(missing_ok=True)
    leader.send_signal(signal.SIGUSR2)
    wait_for(path.exists, timeout=30, interval=0.1, what="the leader's request counts")
    return operator_requests.read(path)


def measure(workdir: Path) -> dict[str, Any]:
    server = KubeApiserver(workdir / "kube")
    server.start()
    manager = controller_manager(server, workdir / "controller-manager.log")
    redis_server = RedisServer(workdir / "redis")
    redis_server.start()
    operators: dict[str, subprocess.Popen[bytes]] = {}
    try:
        kubeconfig = operator_kubeconfig(server, workdir)
        kubectl(server, "apply", "-f", str(REPO / "manifests" / "operator" / "peering.yaml"))
        wait_established(server, "clusterkopfpeerings.kopf.dev")
        kubectl(server, "create", "namespace", NAMESPACE)
        operators["leader"] = start_operator(server, kubeconfig, workdir, "leader")
        time.sleep(15)  # the older replica leads
        operators["standby"] = start_operator(server, kubeconfig, workdir, "standby")
        time.sleep(15)
        rows: list[dict[str, Any]] = []
        with server.api_client() as api:
            custom = client.CustomObjectsApi(api)
            start_rss = sample(operators, workdir, "start")
            print(f"start: RSS {start_rss}", flush=True)
            for cycle in range(1, CYCLES + 1):
                names = {f"q{i:04d}" for i in range(QUEUES)}
                items = [taskqueue(n, redis_server.url) for n in sorted(names)]
                # create, not apply: one POST per object (apply reads each first), and a
                # loaded apiserver takes minutes over 1,000 of them.
                counted_start = requests_so_far(operators["leader"], workdir)
                quiet_wait_s, busy = wait_quiet(api) if QUIET else (0.0, -1.0)
                watched = DeploymentsSeen(server, names)
                load_1m = os.getloadavg()[0]
                cpu_start, create_start = cpu(operators), time.monotonic()
                create_all(server, items)
                applied = time.monotonic()
                try:
                    created = watched.after(applied, timeout=WAIT_S)
                finally:
                    watched.close()

                def handled() -> bool:
                    # In pages: one listing of 10,000 TaskQueues outlasted the apiserver's
                    # timeout under load. A failed listing is asked again.
                    count, token = 0, None
                    while True:
                        try:
                            listed: Any = custom.list_namespaced_custom_object(
                                GROUP,
                                VERSION,
                                NAMESPACE,
                                PLURAL,
                                limit=500,
                                _continue=token,
                                _preload_content=False,
                            )
                        except client.ApiException:
                            return False
                        page = json.loads(listed.data)
                        count += sum(
                            1
                            for i in page["items"]
                            if i.get("status", {}).get("observedGeneration")
                        )
                        token = page["metadata"].get("continue")
                        if not token:
                            return count >= QUEUES

                wait_for(
                    handled,
                    timeout=WAIT_S,
                    interval=1 if QUEUES <= 2000 else 5,
                    what="every TaskQueue handled",
                )
                cpu_handled, handled_s = cpu(operators), time.monotonic() - create_start
                counted_handled = requests_so_far(operators["leader"], workdir)
                time.sleep(SETTLE_S)
                cpu_settled = cpu(operators)
                counted_settled = requests_so_far(operators["leader"], workdir)
                full = sample(operators, workdir, f"cycle {cycle} full")
                print(
                    f"cycle {cycle} full: RSS {full}, Deployment p99 "
                    f"{percentile(created, 0.99):.2f} s, handled in {handled_s:.0f} s",
                    flush=True,
                )
                idle: dict[str, float] = {}
                if IDLE_S > 0:
                    cpu_idle = cpu(operators)
                    time.sleep(IDLE_S)
                    idle = {
                        name: round(seconds / IDLE_S * 100, 2)
                        for name, seconds in spent(cpu_idle, cpu(operators), 0).items()
                    }
                    print(f"cycle {cycle}: idle CPU over {IDLE_S:.0f} s: {idle} %", flush=True)
                probes: dict[str, float] = {}
                if PROBES > 0:
                    one = probe_new_queues(server, api, redis_server.url, PROBES)
                    probes = {
                        "count": len(one),
                        "p50_s": round(statistics.median(one), 3),
                        "p99_s": round(percentile(one, 0.99), 3),
                        "max_s": round(max(one), 3),
                    }
                    print(f"cycle {cycle}: a new TaskQueue's Deployment: {probes}", flush=True)
                empty: dict[str, float] | None = None
                if not (KEEP_LAST and cycle == CYCLES):
                    delete_all(server)
                    wait_for(
                        lambda: not _items(api, "taskqueues") and not _items(api, "deployments"),
                        timeout=WAIT_S,
                        interval=2,
                        what="every TaskQueue and Deployment gone",
                    )
                    time.sleep(SETTLE_S)
                    empty = sample(operators, workdir, f"cycle {cycle} empty")
                row = {
                    "cycle": cycle,
                    "deployment_p50_s": round(statistics.median(created), 2),
                    "deployment_p99_s": round(percentile(created, 0.99), 2),
                    "deployment_max_s": round(max(created), 2),
                    "deployments_before_create_returned": sum(1 for c in created if c <= 0),
                    "create_s": round(applied - create_start, 1),
                    "handled_s": round(handled_s, 1),
                    # CPU seconds from the create to every TaskQueue handled, and to the
                    # end of the quiet after it (what the burst's first sweeps cost too):
                    # the whole process and its main thread (kopf's event loop).
                    "cpu_handled_s": spent(cpu_start, cpu_handled, 0),
                    "main_cpu_handled_s": spent(cpu_start, cpu_handled, 1),
                    "cpu_settled_s": spent(cpu_start, cpu_settled, 0),
                    "main_cpu_settled_s": spent(cpu_start, cpu_settled, 1),
                    "rss_full_mb": full,
                    "rss_empty_mb": empty,
                    "idle_cpu_pct": idle,
                    "new_queue_deployment": probes,
                    "load_1m_at_create": round(load_1m, 2),
                    "quiet_wait_s": round(quiet_wait_s, 1),
                    "busy_before_create": round(busy, 3),
                }
                if REQUESTS:  # the leader's, per created TaskQueue
                    row["requests_per_queue_handled"] = operator_requests.per_queue(
                        counted_start, counted_handled, QUEUES
                    )
                    row["requests_per_queue_settled"] = operator_requests.per_queue(
                        counted_start, counted_settled, QUEUES
                    )
                rows.append(row)
                print(json.dumps(row), flush=True)
        return {
            "queues": QUEUES,
            "start_rss_mb": start_rss,
            "cycles": rows,
            "load_average_1m": os.getloadavg()[0],
        }
    finally:
        for process in operators.values():
            process.terminate()
        for process in operators.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        manager.terminate()
        manager.wait(timeout=30)
        redis_server.stop()
        server.stop()


def create_alone(workdir: Path) -> int:
    """The apiserver's own time for the burst's `kubectl create`, with no operator running
    (BENCH_MEMORY_CREATE_ONLY=1): what bounds the create's duration whatever the operator
    does. Same apiserver, controller-manager and manifests; each cycle's TaskQueues are
    deleted (no finalizer: at once) before the next."""
    server = KubeApiserver(workdir / "kube")
    server.start()
    manager = controller_manager(server, workdir / "controller-manager.log")
    try:
        operator_kubeconfig(server, workdir)
        kubectl(server, "create", "namespace", NAMESPACE)
        for cycle in range(1, CYCLES + 1):
            items = [taskqueue(f"q{i:04d}", "redis://127.0.0.1:1/0") for i in range(QUEUES)]
            load, start = os.getloadavg()[0], time.monotonic()
            create_all(server, items)
            took = time.monotonic() - start
            print(
                f"cycle {cycle}: {QUEUES} creates, no operator: {took:.1f} s "
                f"({took / QUEUES * 1000:.1f} ms each), load {load:.2f}",
                flush=True,
            )
            delete_all(server)
            time.sleep(SETTLE_S)
        return 0
    finally:
        manager.terminate()
        manager.wait(timeout=30)
        server.stop()


def main() -> int:
    if os.environ.get("BENCH_MEMORY_CREATE_ONLY", "") not in ("", "0"):
        with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
            return create_alone(Path(tmp))
    started = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    print(f"[{datetime.now(UTC):%H:%M:%S}] {QUEUES} TaskQueues x {CYCLES} cycles ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        try:
            result = measure(Path(tmp))
        finally:
            keep = Path(tempfile.gettempdir()) / "bench-operator-memory"
            keep.mkdir(exist_ok=True)
            for path in Path(tmp).glob("*.log"):
                (keep / path.name).write_bytes(path.read_bytes())
            for pattern in ("*.counts", "*.traces", "*.trace.*[0-9]"):
                for path in Path(tmp).glob(pattern):
                    (keep / path.name).write_bytes(path.read_bytes())
    print(
        "\n| cycle | Deployment after apply p50 / p99 / max | leader RSS full / empty "
        "| standby RSS full / empty | create / handled | leader CPU to handled / settled "
        "(main thread) | quiet wait / busy at create |"
    )
    print("|--:|--:|--:|--:|--:|--:|--:|")
    for r in result["cycles"]:
        full, empty = r["rss_full_mb"], r["rss_empty_mb"] or {}
        print(
            f"| {r['cycle']} | {r['deployment_p50_s']:.2f} / {r['deployment_p99_s']:.2f} / "
            f"{r['deployment_max_s']:.2f} s | {full['leader']:.0f} / {_mb(empty, 'leader')} MB | "
            f"{full['standby']:.0f} / {_mb(empty, 'standby')} MB | "
            f"{r['create_s']:.1f} / {r['handled_s']:.1f} s | "
            f"{r['cpu_handled_s']['leader']:.1f} ({r['main_cpu_handled_s']['leader']:.1f}) / "
            f"{r['cpu_settled_s']['leader']:.1f} ({r['main_cpu_settled_s']['leader']:.1f}) s | "
            f"{r['quiet_wait_s']:.0f} s / {r['busy_before_create']:.2f} |"
        )
    for line in summary(result):
        print(line)
    result["started"] = started
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"operator-memory-{datetime.now(UTC):%Y-%m-%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"written {out.relative_to(RESULTS.parent.parent)}")
    from bench import charts  # matplotlib: only once the figures are in

    for written in charts.operator_memory(result, RESULTS):
        print(f"chart {written.relative_to(RESULTS.parent.parent)}")
    return 0


def _mb(sampled: dict[str, float], role: str) -> str:
    """A sampled RSS, or "-" where none was taken (the last cycle kept, BENCH_MEMORY_KEEP_LAST)."""
    return f"{sampled[role]:.0f}" if role in sampled else "-"


def summary(result: dict[str, Any]) -> list[str]:
    """Each replica's MB per TaskQueue above its start (its last full sample), and the
    last cycle's full RSS against the second's (the first pays one-off costs)."""
    from bench.charts import OPERATOR_MB_PER_QUEUE_GOAL

    cycles, queues, start = result["cycles"], result["queues"], result["start_rss_mb"]
    lines: list[str] = []
    if not cycles or not queues:
        return lines
    for role in ("leader", "standby"):
        full = cycles[-1]["rss_full_mb"][role]
        per = (full - start[role]) / queues
        line = (
            f"{role}: {full:.0f} MB with {queues:,} TaskQueues, {start[role]:.0f} MB at start: "
            f"{per:.3f} MB per TaskQueue"
        )
        if role == "leader":  # the goal is the leader's: a standby holds no queue's state
            met = per <= OPERATOR_MB_PER_QUEUE_GOAL
            line += f" (goal <= {OPERATOR_MB_PER_QUEUE_GOAL}: {'met' if met else 'missed'})"
        lines.append(line)
    probes = cycles[-1].get("new_queue_deployment") or {}
    if probes:
        lines.append(
            f"a new TaskQueue with {queues:,} in place, its Deployment after its create "
            f"({probes['count']} one at a time): p50 {probes['p50_s']:.2f} s, "
            f"p99 {probes['p99_s']:.2f} s, max {probes['max_s']:.2f} s"
        )
    if len(cycles) >= 3:
        second, last = cycles[1]["rss_full_mb"]["leader"], cycles[-1]["rss_full_mb"]["leader"]
        drift = 100 * (last - second) / second
        verdict = "met" if abs(drift) <= 5 else "missed"
        lines.append(
            f"leader, cycle {len(cycles)} against cycle 2: {last:.0f} vs {second:.0f} MB, "
            f"{drift:+.1f} % (goal within 5 %: {verdict})"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
