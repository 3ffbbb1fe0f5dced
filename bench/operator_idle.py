"""The operator's idle CPU, as figures, without a cluster: a real etcd + kube-apiserver,
a kube-controller-manager, one redis-server, and operator pairs (leader + standby, one
ClusterKopfPeering per pair) of one or more checkouts side by side, each pair with its
own namespace of N idle TaskQueues (replicas 0).

    make bench-operator-idle                                 # this checkout, 1,000
    BENCH_IDLE_VARIANTS="before=/tmp/old,after=." make bench-operator-idle
    BENCH_IDLE_QUEUES=200 BENCH_IDLE_WINDOWS=2 make bench-operator-idle
    BENCH_IDLE_PROFILE=after make bench-operator-idle        # + a py-spy profile first
                                       # (of the leader, holding the GIL: its Python work)

Every TaskQueue handled (status.observedGeneration), BENCH_IDLE_SETTLE_S (45 s) of quiet,
then BENCH_IDLE_WINDOWS (4) windows of BENCH_IDLE_WINDOW_S (90 s): each process's own CPU
seconds (user + system, /proc) over each window, as % of one core, and the RSS at the
end. Pairs of checkouts run in the same windows, so a loaded machine loads both alike.
A standby whose leader's keep-alives come late (a load average far above the cores)
resumes for a while: its figure is then not a standby's. Figures, never pass/fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.operator_memory import controller_manager, create_all
from bench.operator_outage import kubectl, operator_kubeconfig
from bench.operator_scale import cpu_seconds, rss_mb
from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import GROUP, PLURAL, REPO, VERSION, wait_established
from tests.fixtures_redis import RedisServer, free_port
from tests.polling import wait_for

QUEUES = int(os.environ.get("BENCH_IDLE_QUEUES", "1000"))
WINDOW_S = float(os.environ.get("BENCH_IDLE_WINDOW_S", "90"))
WINDOWS = int(os.environ.get("BENCH_IDLE_WINDOWS", "4"))
SETTLE_S = float(os.environ.get("BENCH_IDLE_SETTLE_S", "45"))
PROFILE = os.environ.get("BENCH_IDLE_PROFILE", "")  # a variant whose leader py-spy records
#: Where the profile goes (raw, one stack and its count a line): it outlives the run.
PROFILE_OUT = Path(
    os.environ.get(
        "BENCH_IDLE_PROFILE_OUT", str(Path(tempfile.gettempdir()) / "taskfleet-idle-profile.txt")
    )
)
VARIANTS = dict(
    item.split("=", 1) for item in os.environ.get("BENCH_IDLE_VARIANTS", f"this={REPO}").split(",")
)


def start(
    server: KubeApiserver, kubeconfig: Path, workdir: Path, variant: str, role: str
) -> subprocess.Popen[bytes]:
    source = str(Path(VARIANTS[variant]).resolve())
    env = {
        **server.env(),
        "KUBECONFIG": str(kubeconfig),
        "TASKFLEET_WATCH_NAMESPACES": f"idle-{variant}",
        "TASKFLEET_METRICS_PORT": str(free_port()),
        "TASKFLEET_PEERING": f"idle-{variant}",
        "POD_ID": f"{variant}-{role}",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([f"{source}/operator", f"{source}/worker-image", source]),
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    with (workdir / f"{variant}-{role}.log").open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "taskfleet_operator", "--liveness", liveness],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=source,
        )


def taskqueue(name: str, namespace: str, url: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TaskQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "localhost/taskfleet-worker:dev",
            "handler": "taskfleet.samples:echo",
            "replicas": 0,
            "redis": {"url": url},
            "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}},
        },
    }


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
        for role in ("leader", "standby"):  # the older replica leads
            for variant in VARIANTS:
                if role == "leader":
                    kubectl(server, "create", "namespace", f"idle-{variant}")
                operators[f"{variant}-{role}"] = start(server, kubeconfig, workdir, variant, role)
            time.sleep(15)
        with server.api_client() as api:
            custom = client.CustomObjectsApi(api)
            for variant in VARIANTS:
                create_all(
                    server,
                    [
                        taskqueue(f"q{i:05d}", f"idle-{variant}", redis_server.url)
                        for i in range(QUEUES)
                    ],
                )

            def handled() -> bool:
                listed: Any = custom.list_cluster_custom_object(
                    GROUP, VERSION, PLURAL, _preload_content=False
                )
                found = json.loads(listed.data)["items"]
                done = sum(1 for i in found if i.get("status", {}).get("observedGeneration"))
                return done >= QUEUES * len(VARIANTS)

            wait_for(handled, timeout=1800, interval=2, what="every TaskQueue handled")
        time.sleep(SETTLE_S)
        if PROFILE:
            pid = operators[f"{PROFILE}-leader"].pid
            spy = str(Path(sys.executable).parent / "py-spy")
            duration = str(int(WINDOW_S))
            argv = [spy, "record", "-p", str(pid), "-r", "100", "-d", duration, "-f", "raw"]
            # --gil: only the thread running Python (a thread waiting on a socket, or the
            # event loop in epoll, is no work of the operator's).
            argv += ["-o", str(PROFILE_OUT), "--nonblocking", "--gil"]
            subprocess.run(argv, check=False)
            print(f"profile of {PROFILE}'s leader: {PROFILE_OUT}", flush=True)
        windows: list[dict[str, float]] = []
        for _ in range(WINDOWS):
            before = {name: cpu_seconds(p.pid) for name, p in operators.items()}
            start_s = time.monotonic()
            time.sleep(WINDOW_S)
            elapsed = time.monotonic() - start_s
            row = {
                name: round(100 * (cpu_seconds(p.pid) - before[name]) / elapsed, 2)
                for name, p in operators.items()
            }
            row["load_1m"] = round(os.getloadavg()[0], 2)
            windows.append(row)
            print(json.dumps(row), flush=True)
        return {
            "queues": QUEUES,
            "variants": VARIANTS,
            "window_s": WINDOW_S,
            "cpu_percent_of_a_core": windows,
            "rss_mb": {name: round(rss_mb(p.pid), 1) for name, p in operators.items()},
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


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as directory:
        result = measure(Path(directory))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
