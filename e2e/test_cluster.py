"""The cluster itself does what the rest of the suite relies on.

Node readiness, Deployments and scaling, logs and exec, the termination sequence a worker
depends on (preStop hook, then SIGTERM to PID 1, SIGKILL only after the grace period) and
Service names through cluster DNS. The pods run the worker image with a small probe program
as PID 1 instead of ``taskfleet worker``, so these checks say nothing about the worker.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, VERSIONS, Kube, is_ready
from tests.polling import wait_for

WORKER_IMAGE = os.environ.get("TASKFLEET_WORKER_IMAGE") or VERSIONS.get(
    "WORKER_IMAGE", "localhost/taskfleet-worker:dev"
)
REDIS_IMAGE = os.environ.get("TASKFLEET_REDIS_IMAGE") or VERSIONS.get(
    "REDIS_IMAGE", "localhost/taskfleet-redis:7.0"
)
REDIS_MANIFEST = Path(__file__).resolve().parent / "manifests" / "redis.yaml"
READY_TIMEOUT = 120.0

# PID 1 of the probe pods: prints JSON events; on SIGTERM reports the preStop hook's marks
# (from a shared emptyDir) and exits ("drain") or carries on beating ("ignore").
PROBE = r"""
import json, os, signal, sys, time
mode = sys.argv[1]
def say(event, **fields):
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)
def marks():
    found = {}
    for name in ("prestop-start", "prestop-end"):
        try:
            with open("/marks/" + name) as f:
                found[name] = float(f.read())
        except OSError:
            pass
    return found
def on_term(signum, frame):
    say("sigterm", **marks())
    if mode == "drain":
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
say("started", pid=os.getpid(), uid=os.getuid())
while True:
    time.sleep(0.2)
    if mode == "ignore":
        say("beat")
"""
# The preStop hook: marks its start, takes a second, marks its end.
PRESTOP = (
    "import time\n"
    "def mark(name):\n"
    "    with open('/marks/' + name, 'w') as f: f.write(repr(time.time()))\n"
    "mark('prestop-start'); time.sleep(1); mark('prestop-end')\n"
)


def probe_pod_spec(mode: str, *, grace_seconds: int = 30, prestop: bool = False) -> dict[str, Any]:
    """A pod spec meeting the restricted pod security standard, running PROBE as PID 1."""
    container: dict[str, Any] = {
        "name": "probe",
        "image": WORKER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", PROBE, mode],
        "resources": {"requests": {"cpu": "10m", "memory": "24Mi"}, "limits": {"memory": "96Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "marks", "mountPath": "/marks"}],
    }
    if prestop:
        container["lifecycle"] = {"preStop": {"exec": {"command": ["python3", "-c", PRESTOP]}}}
    return {
        "terminationGracePeriodSeconds": grace_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [{"name": "marks", "emptyDir": {}}],
    }


def probe_pod(name: str, mode: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": probe_pod_spec(mode, **kwargs),
    }


class Stream:
    """A long-running kubectl (``logs -f``, ``get -w``) whose output lines are collected.

    Started before a pod is deleted, ``logs -f`` carries the last lines the container prints
    while terminating and ends when it is gone; a watch keeps the exit code the kubelet
    writes just before the pod object vanishes.
    """

    def __init__(self, kube: Kube, *args: str):
        self.lines: list[str] = []
        self._process = subprocess.Popen(
            kube.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.lines.append(line.rstrip("\n"))

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in _json_lines("\n".join(self.lines))]

    def close(self, timeout: float = 0) -> None:
        """Wait up to ``timeout`` for kubectl to end by itself, then stop it."""
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if self._process.poll() is None:
                self._process.terminate()
                self._process.wait()
            self._thread.join(timeout=5)
            if self._process.stdout is not None:
                self._process.stdout.close()

    def ended(self) -> bool:
        return self._process.poll() is not None


def _exit_code_watch(kube: Kube, pod: str) -> Stream:
    jsonpath = '{.status.containerStatuses[0].state.terminated.exitCode}{"\\n"}'
    return Stream(kube, "get", "pod", pod, "--watch", "-o", f"jsonpath={jsonpath}")


def _exit_code(watch: Stream) -> int | None:
    codes = [line for line in watch.lines if line.strip()]
    return int(codes[-1]) if codes else None


def _json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("{")]


def _pod_ready(kube: Kube, name: str) -> bool:
    return is_ready(kube.get("pod", name) or {"metadata": {}})


@pytest.fixture
def kube(request: pytest.FixtureRequest) -> Iterator[Kube]:
    """A fresh namespace enforcing restricted pod security, deleted after the test."""
    slug = request.node.name.removeprefix("test_").replace("_", "-")[:30].strip("-")
    name = f"cluster-{slug}-{secrets.token_hex(2)}"
    Kube().apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
            },
        }
    )
    wait_for(
        lambda: Kube(name).get("serviceaccount", "default"),
        timeout=30,
        interval=CLUSTER_INTERVAL_S,
        what="the namespace's default ServiceAccount",
        ignoring=CLUSTER_ERRORS,
    )
    yield Kube(name)
    Kube().run("delete", "namespace", name, "--wait=false", check=False)


def test_the_node_is_ready_and_schedulable() -> None:
    """Every node Ready and schedulable. On kind this runs after the tests that freeze a
    node: a thawed node's kubelet may still find its paused runtime slow and report
    NotReady ("container runtime is down") for one status post after it was Ready again,
    so each node is given a deadline to be Ready, not one look."""

    def not_ready() -> list[str]:
        nodes = Kube().json("get", "nodes", namespaced=False)["items"]
        assert nodes, "the cluster has no node"
        found = []
        for node in nodes:
            ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
            if not (ready and ready[0]["status"] == "True"):
                found.append(f"{node['metadata']['name']}: {ready[0] if ready else 'no Ready'}")
            assert not node["spec"].get("unschedulable"), node["metadata"]["name"]
        return found

    wait_for(
        lambda: not not_ready(),
        timeout=180,
        interval=CLUSTER_INTERVAL_S,
        what=lambda: f"every node Ready; not yet: {not_ready()}",
        ignoring=CLUSTER_ERRORS,
    )


def test_a_worker_image_deployment_becomes_available_and_follows_kubectl_scale(
    kube: Kube,
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "probe"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "probe"}},
            "template": {
                "metadata": {"labels": {"app": "probe"}},
                "spec": probe_pod_spec("drain", grace_seconds=10),
            },
        },
    }
    kube.apply(deployment)

    def ready_count() -> int:
        return len(kube.running_pods("app=probe"))

    def available() -> bool:
        status = (kube.get("deployment", "probe") or {}).get("status", {})
        conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
        return conditions.get("Available") == "True" and status.get("readyReplicas") == 1

    wait_for(
        available,
        timeout=READY_TIMEOUT,
        interval=CLUSTER_INTERVAL_S,
        what="the Deployment to be Available",
        ignoring=CLUSTER_ERRORS,
    )

    kube.run("scale", "deployment/probe", "--replicas=3")
    wait_for(
        lambda: ready_count() == 3,
        timeout=READY_TIMEOUT,
        interval=CLUSTER_INTERVAL_S,
        what="3 ready pods",
        ignoring=CLUSTER_ERRORS,
    )

    kube.run("scale", "deployment/probe", "--replicas=1")
    wait_for(
        lambda: len(kube.pods("app=probe")) == 1 and ready_count() == 1,
        timeout=READY_TIMEOUT,
        interval=CLUSTER_INTERVAL_S,
        what="the pod count to go back to 1",
        ignoring=CLUSTER_ERRORS,
    )


def test_kubectl_logs_and_exec_reach_the_container_whose_pid_1_is_the_program(
    kube: Kube,
) -> None:
    kube.apply(probe_pod("probe", "drain", grace_seconds=5))
    wait_for(
        lambda: _pod_ready(kube, "probe"),
        timeout=READY_TIMEOUT,
        interval=CLUSTER_INTERVAL_S,
        what="the pod to be ready",
        ignoring=CLUSTER_ERRORS,
    )

    started = wait_for(
        lambda: [json.loads(line) for line in _json_lines(kube.logs("probe"))],
        timeout=30,
        interval=CLUSTER_INTERVAL_S,
        what="the program's first log line",
        ignoring=CLUSTER_ERRORS,
    )
    assert started[0]["event"] == "started"
    assert started[0]["pid"] == 1
    assert started[0]["uid"] == 10001

    cmdline = kube.exec("probe", "cat", "/proc/1/cmdline").split("\0")
    assert cmdline[:2] == ["python3", "-c"]
    assert kube.exec("probe", "python3", "-c", "import os; print(os.getuid())").strip() == "10001"


def delete_and_follow(kube: Kube, pod: str) -> tuple[list[dict[str, Any]], int | None]:
    """Delete a running probe pod; return what its program printed and its exit code."""
    logs = Stream(kube, "logs", "-f", pod)
    watch = _exit_code_watch(kube, pod)
    try:
        wait_for(
            logs.events,
            timeout=30,
            interval=CLUSTER_INTERVAL_S,
            what="the program's first line in the log stream",
            ignoring=CLUSTER_ERRORS,
        )
        kube.delete("pod", pod)
        wait_for(
            logs.ended,
            timeout=90,
            interval=CLUSTER_INTERVAL_S,
            what="the container to end",
            ignoring=CLUSTER_ERRORS,
        )
        wait_for(
            lambda: _exit_code(watch) is not None,
            timeout=30,
            interval=CLUSTER_INTERVAL_S,
            what="its exit code",
            ignoring=CLUSTER_ERRORS,
        )
    finally:
        logs.close()
        watch.close()
    return logs.events(), _exit_code(watch)


def test_deleting_a_pod_runs_its_prestop_hook_to_the_end_and_then_sigterms_pid_1(
    kube: Kube,
) -> None:
    kube.apply(probe_pod("probe", "drain", grace_seconds=30, prestop=True))
    wait_for(
        lambda: _pod_ready(kube, "probe"),
        timeout=READY_TIMEOUT,
        interval=CLUSTER_INTERVAL_S,
        what="the pod to be ready",
        ignoring=CLUSTER_ERRORS,
    )

    events, exit_code = delete_and_follow(kube, "probe")

    assert [e["event"] for e in events] == ["started", "sigterm"], events
    sigterm = events[1]
    # The hook ran before the signal and the kubelet waited for it to finish.
    assert "prestop-start" in sigterm, "SIGTERM came before the preStop hook ran"
    assert "prestop-end" in sigterm, "SIGTERM came before the preStop hook finished"
    assert sigterm["prestop-start"] <= sigterm["prestop-end"] <= sigterm["t"]
    assert exit_code == 0  # it exited on SIGTERM by itself; nobody killed it


def test_a_pid_1_that_ignores_sigterm_is_killed_only_after_the_grace_period(
    kube: Kube,
) -> None:
    grace = 4
    kube.apply(probe_pod("probe", "ignore", grace_seconds=grace))
    wait_for(
        lambda: _pod_ready(kube, "probe"),
        timeout=READY_TIMEOUT,
        interval=CLUSTER_INTERVAL_S,
        what="the pod to be ready",
        ignoring=CLUSTER_ERRORS,
    )

    events, exit_code = delete_and_follow(kube, "probe")  # the program never ends by itself

    sigterms = [e for e in events if e["event"] == "sigterm"]
    assert len(sigterms) == 1, events
    beats = [e["t"] for e in events if e["event"] == "beat"]
    assert beats, f"PID 1 stopped at SIGTERM although it ignores it: {events}"
    last_beat = max(beats)
    # Still alive well into the grace period after SIGTERM (a bound, not a benchmark).
    assert last_beat - sigterms[0]["t"] >= grace - 1.5, (sigterms[0], last_beat)
    assert exit_code == 137  # 128 + SIGKILL


def test_a_pod_reaches_redis_through_its_service_name_via_cluster_dns(kube: Kube) -> None:
    kube.apply_yaml(
        REDIS_MANIFEST.read_text().replace("localhost/taskfleet-redis:7.0", REDIS_IMAGE)
    )
    wait_for(
        lambda: _pod_ready(kube, "redis"),
        timeout=READY_TIMEOUT,
        interval=CLUSTER_INTERVAL_S,
        what="Redis to be ready",
        ignoring=CLUSTER_ERRORS,
    )
    # Absolute (trailing dot): a name the cluster DNS does not know yet must fail, not be
    # tried in the node's search domains, where a wildcard record may answer (it did:
    # an HTTP server replied). CoreDNS may learn a new Service a moment late: the client
    # waits for the name, with a deadline, before it connects.
    host = f"redis.{kube.namespace}.svc.cluster.local."
    client = (
        "import json, socket, time, redis\n"
        "deadline = time.monotonic() + 60\n"
        "while True:\n"
        "    try:\n"
        f"        ip = socket.gethostbyname({host!r})\n"
        "        break\n"
        "    except OSError:\n"
        "        if time.monotonic() > deadline: raise\n"
        "        time.sleep(0.5)\n"
        f"r = redis.Redis(host={host!r}, port=6379, socket_timeout=5)\n"
        "r.set('greeting', 'hello')\n"
        "print(json.dumps({'ip': ip, 'value': r.get('greeting').decode()}))\n"
    )
    spec = probe_pod_spec("drain")
    spec["restartPolicy"] = "Never"
    spec["containers"][0]["command"] = ["python3", "-c", client]
    kube.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client"}, "spec": spec})

    def finished() -> str | None:
        phase = (kube.get("pod", "client") or {}).get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(
        finished,
        timeout=READY_TIMEOUT,
        interval=CLUSTER_INTERVAL_S,
        what="the client pod to finish",
        ignoring=CLUSTER_ERRORS,
    )
    output = kube.logs("client")
    assert phase == "Succeeded", output
    answer = json.loads(_json_lines(output)[-1])
    service = kube.get("service", "redis")
    assert service is not None
    assert answer == {"ip": service["spec"]["clusterIP"], "value": "hello"}


def test_the_local_cluster_daemons_do_not_hold_the_cluster_lock() -> None:
    """up.sh holds a lock while it works; a daemon that inherited it would hold it for the
    cluster's whole life, and every later `make cluster-up` would wait on it and fail."""
    from e2e.conftest import current_context

    if current_context() != "taskfleet-local":
        pytest.skip("the lock and the daemons exist only on the local cluster")
    cache = Path(os.environ.get("TASKFLEET_CACHE") or Path.home() / ".cache" / "taskfleet")
    lock = str((cache / ".cluster.lock").resolve())
    checked, holders = [], []
    for pidfile in sorted((cache / "cluster" / "pids").glob("*.pid")):
        fd_dir = Path("/proc") / pidfile.read_text().strip() / "fd"
        if not fd_dir.is_dir():
            continue
        checked.append(pidfile.stem)
        for fd in fd_dir.iterdir():
            try:
                if os.readlink(fd) == lock:
                    holders.append(pidfile.stem)
            except OSError:
                continue
    assert "kube-apiserver" in checked and "kubelet" in checked, checked
    assert holders == [], f"daemons holding {lock}: {holders}"
