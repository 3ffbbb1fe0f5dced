"""kubectl as the suite's only way into the cluster, so the suite runs against any cluster.

Everything goes through the kubectl binary with the caller's KUBECONFIG and context (the
suite's conftest refuses foreign contexts); no client library state can drift from what a
user typing the same commands would see.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.polling import wait_for

__all__ = [
    "CLUSTER_ERRORS",
    "CLUSTER_INTERVAL_S",
    "KUBECTL",
    "VERSIONS",
    "Kube",
    "KubectlError",
    "LogStream",
    "NodeShell",
    "PodWatch",
    "log_events",
]

KUBECTL = os.environ.get("KUBECTL", "kubectl")
#: containerd's socket on the local cluster's node (e2e/cluster/lib.sh); kind uses the default.
LOCAL_CONTAINERD = "/run/taskfleet/containerd/containerd.sock"


def _read_versions() -> dict[str, str]:
    """The pinned image names of the local cluster (e2e/cluster/versions.env), if present."""
    path = Path(__file__).resolve().parent.parent / "cluster" / "versions.env"
    if not path.exists():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs if not k.lstrip().startswith("#")}


VERSIONS = _read_versions()


class KubectlError(RuntimeError):
    """kubectl exited non-zero; the message carries its stderr (what the user would read)."""

    def __init__(self, argv: list[str], returncode: int, stdout: str, stderr: str):
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(f"{shlex.join(argv)} exited {returncode}: {stderr.strip()[-2000:]}")


#: A poll of the cluster costs a kubectl process or a round trip through a port-forward.
CLUSTER_INTERVAL_S = 0.5
#: What a probe of the cluster raises while what it reads is not there yet (kubectl
#: failing, a tunnel being restarted, an object or a field not written yet): not yet.
CLUSTER_ERRORS = (KubectlError, OSError, ValueError, KeyError)


class Kube:
    """kubectl bound to one namespace (or none, for cluster-scoped calls)."""

    def __init__(self, namespace: str | None = None):
        self.namespace = namespace

    def in_namespace(self, namespace: str) -> Kube:
        return Kube(namespace)

    def argv(self, *args: str, namespaced: bool = True) -> list[str]:
        argv = [KUBECTL]
        if namespaced and self.namespace:
            argv += ["-n", self.namespace]
        return [*argv, *args]

    def run(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60,
        namespaced: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        argv = self.argv(*args, namespaced=namespaced)
        proc = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise KubectlError(argv, proc.returncode, proc.stdout, proc.stderr)
        return proc

    def json(self, *args: str, namespaced: bool = True) -> Any:
        return json.loads(self.run(*args, "-o", "json", namespaced=namespaced).stdout)

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        proc = self.run("get", kind, name, "-o", "json", "--ignore-not-found", check=True)
        if not proc.stdout.strip():
            return None
        obj: dict[str, Any] = json.loads(proc.stdout)
        return obj

    def items(self, kind: str, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", kind]
        if selector:
            args += ["-l", selector]
        items: list[dict[str, Any]] = self.json(*args)["items"]
        return items

    def apply(self, *docs: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        """``kubectl apply -f -`` of the given objects (server-side validation applies)."""
        text = yaml.safe_dump_all(docs, sort_keys=False)
        return self.run("apply", "-f", "-", input=text, check=check)

    def apply_yaml(self, text: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", input=text, check=check)

    def patch_merge(self, kind: str, name: str, patch: dict[str, Any]) -> None:
        self.run("patch", kind, name, "--type=merge", "-p", json.dumps(patch))

    def delete(self, kind: str, name: str, *extra: str, wait: bool = False) -> None:
        self.run("delete", kind, name, "--ignore-not-found", f"--wait={str(wait).lower()}", *extra)

    def events(self, involved_name: str | None = None) -> list[dict[str, Any]]:
        items = self.items("events")
        if involved_name is None:
            return items
        return [e for e in items if e.get("involvedObject", {}).get("name") == involved_name]

    def restricted_namespace(self, name: str, **labels: str) -> Kube:
        """Create namespace ``name`` enforcing restricted pod security; a Kube in it."""
        labels = {**labels, "pod-security.kubernetes.io/enforce": "restricted"}
        self.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": labels},
            }
        )
        return self.in_namespace(name)

    def logs(self, target: str, *extra: str) -> str:
        proc = self.run("logs", target, "--tail=200", *extra, check=False, timeout=30)
        return proc.stdout + proc.stderr

    def pod_logs(self, pod: dict[str, Any]) -> str:
        """A pod's last log lines, and, if a container of it restarted, how the one before
        ended (exit code, reason) and its last words: a failure's diagnostics."""
        name = pod["metadata"]["name"]
        parts = [f"--- logs {name}\n{self.logs(name, '--all-containers')}"]
        statuses = pod.get("status", {}).get("containerStatuses") or []
        if any(s.get("restartCount", 0) for s in statuses):
            for status in statuses:
                ended = (status.get("lastState") or {}).get("terminated")
                if ended:
                    parts.append(f"--- {name}/{status['name']} ended before: {ended}")
            previous = self.logs(name, "--all-containers", "--previous")
            parts.append(f"--- previous logs {name}\n{previous}")
        return "\n".join(parts)

    def report(self, *commands: tuple[str, ...]) -> str:
        """What each kubectl command prints, headed by the command: a failure's diagnostics."""
        parts = []
        for args in commands:
            proc = self.run(*args, check=False)
            parts.append(f"--- kubectl {' '.join(args)}\n{proc.stdout}{proc.stderr}")
        return "\n".join(parts)

    def exec(
        self, pod: str, *command: str, container: str | None = None, timeout: float = 60
    ) -> str:
        args = ["exec", pod]
        if container:
            args += ["-c", container]
        return self.run(*args, "--", *command, timeout=timeout).stdout

    def pods(self, selector: str) -> list[dict[str, Any]]:
        return self.items("pods", selector)

    def running_pods(self, selector: str) -> list[dict[str, Any]]:
        """Pods that are Running, Ready and not terminating."""
        return [p for p in self.pods(selector) if is_ready(p)]


def is_ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    if pod.get("status", {}).get("phase") != "Running":
        return False
    conditions = pod["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def node_ready(kube: Kube, node: str) -> bool:
    """The node's Ready condition is True (its kubelet posts status and its lease)."""
    found = kube.get("node", node)
    assert found is not None, f"node {node} is gone"
    conditions = found["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


class FrozenNodes:
    """kind node containers frozen with ``docker pause``, and thawed back to Ready.

    A thawed node is not usable at once: its kubelet must renew its lease and post status
    again before the node lifecycle controller turns it from Unknown back to Ready (and a
    node frozen for less than the controller's grace still shows its old Ready=True until
    then). ``thaw`` waits for a lease renewed after the unpause and Ready=True, so the next
    test starts on a whole cluster.
    """

    def __init__(self) -> None:
        self.frozen: list[str] = []

    def freeze(self, node: str) -> None:
        subprocess.run(["docker", "pause", node], check=True, capture_output=True, timeout=60)
        self.frozen.append(node)

    def thaw(self, *nodes: str, timeout: float = 180) -> None:
        """Unpause ``nodes`` (default: every one still frozen), each whatever became of the
        others, then wait for each to be back; one failure at the end names them all."""
        nodes = nodes or tuple(self.frozen)
        problems: list[str] = []
        since = datetime.now(UTC)
        for node in nodes:
            done = subprocess.run(
                ["docker", "unpause", node], check=False, capture_output=True, text=True, timeout=60
            )
            if done.returncode != 0 and "not paused" not in done.stderr:
                problems.append(f"docker unpause {node}: {done.stderr.strip()}")
            if node in self.frozen:
                self.frozen.remove(node)
        kube = Kube()
        for node in nodes:

            def back(node: str = node) -> bool:
                return lease_renewed_since(kube, node, since) and node_ready(kube, node)

            try:
                wait_for(
                    back,
                    timeout=timeout,
                    interval=1,
                    what=f"node {node} to renew its lease and be Ready after the unpause",
                    ignoring=CLUSTER_ERRORS,
                )
            except pytest.fail.Exception as failed:
                problems.append(str(failed))
        if problems:
            pytest.fail("; ".join(problems))


def lease_renewed_since(kube: Kube, node: str, since: datetime) -> bool:
    """The node's kubelet renewed its lease (kube-node-lease, every 10 s) after ``since``."""
    lease = kube.in_namespace("kube-node-lease").get("lease", node)
    renewed = (lease or {}).get("spec", {}).get("renewTime")
    return bool(renewed) and datetime.fromisoformat(renewed.replace("Z", "+00:00")) > since


def names(objs: Iterable[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


class NodeShell:
    """Commands on the node that runs a pod: for what only the node can do (SIGKILL a PID 1).

    A container's PID 1 ignores SIGKILL sent from inside its own PID namespace, so an abrupt
    death has to come from the host. Locally the node is this machine; on kind it is a
    container reached with ``docker exec``. ``TASKFLEET_E2E_NODE_EXEC`` overrides the prefix
    (e.g. ``"docker exec taskfleet-control-plane"``); empty means "run here".
    """

    def __init__(self, prefix: list[str]):
        self.prefix = prefix

    @classmethod
    def for_node(cls, node_name: str) -> NodeShell:
        override = os.environ.get("TASKFLEET_E2E_NODE_EXEC")
        if override is not None:
            return cls(shlex.split(override))
        context = subprocess.run(
            [KUBECTL, "config", "current-context"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if context.startswith("kind-"):
            return cls(["docker", "exec", node_name])
        return cls([])

    def run(self, *argv: str, timeout: float = 30) -> str:
        proc = subprocess.run(
            [*self.prefix, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{shlex.join([*self.prefix, *argv])}: {proc.stderr.strip()}")
        return proc.stdout

    def _ctr(self) -> list[str]:
        address = os.environ.get("TASKFLEET_E2E_CTR_ADDRESS")
        if address is None and not self.prefix and Path(LOCAL_CONTAINERD).exists():
            address = LOCAL_CONTAINERD
        return ["ctr", "-a", address, "-n", "k8s.io"] if address else ["ctr", "-n", "k8s.io"]

    def kill_container(self, container_id: str, signal: str = "SIGKILL") -> None:
        """Signal a container's init process from the node (containerd's k8s.io namespace)."""
        cid = container_id.split("://", 1)[-1]
        self.run(*self._ctr(), "task", "kill", "--signal", signal, cid)

    def freeze_container(self, container_id: str) -> None:
        """Freeze every process of a container (its cgroup's freezer): it runs no more, handles
        no signal, and the kubelet does not see it die, so it does not restart it. A fatal
        signal still ends it (cgroup v2), as the kubelet's when its pod is deleted."""
        cid = container_id.split("://", 1)[-1]
        self.run(*self._ctr(), "task", "pause", cid)

    def signal_kubelet(self, signal: str) -> None:
        """Signal the node's kubelet: STOP cuts the node off (its containers run on, nothing
        acts on the API's word), CONT brings it back. Locally the kubelet's pid file says
        which process; on kind the node container runs one kubelet."""
        if self.prefix:
            self.run("pkill", f"-{signal}", "-x", "kubelet")
            return
        cache = Path(os.environ.get("TASKFLEET_CACHE") or Path.home() / ".cache" / "taskfleet")
        pid = (cache / "cluster" / "pids" / "kubelet.pid").read_text().strip()
        self.run("kill", f"-{signal}", pid)

    @contextmanager
    def kubelet_stopped(self) -> Iterator[None]:
        """The node cut off for the block's length; its kubelet continued whatever happens."""
        self.signal_kubelet("STOP")
        try:
            yield
        finally:
            self.signal_kubelet("CONT")


class PodWatch:
    """Every version of a pod the API shows while it lives: ``kubectl get -w -o json``.

    The pod object vanishes once deleted, taking its containers' exit codes with it; the
    kubelet writes them just before, and the watch keeps that last word. With a
    ``selector`` it follows every matching pod, in the order the API changed them.
    """

    def __init__(self, kube: Kube, pod: str | None = None, *, selector: str | None = None):
        if (pod is None) == (selector is None):
            raise ValueError("PodWatch needs a pod name or a selector, not both")
        target = [pod] if pod is not None else ["-l", str(selector)]
        self.versions: list[dict[str, Any]] = []
        self._process = subprocess.Popen(
            kube.argv("get", "pod", *target, "--watch", "-o", "json"),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        decoder = json.JSONDecoder()
        buffer = ""
        for line in self._process.stdout:
            buffer += line
            while buffer.strip():
                try:
                    obj, end = decoder.raw_decode(buffer.lstrip())
                except ValueError:
                    break
                self.versions.append(obj)
                buffer = buffer.lstrip()[end:]

    def terminated(self) -> dict[str, Any] | None:
        """The worker container's last ``terminated`` state seen, if any."""
        for version in reversed(self.versions):
            for status in version.get("status", {}).get("containerStatuses", []):
                state = status.get("state", {}).get("terminated")
                if state:
                    result: dict[str, Any] = state
                    return result
        return None

    def annotations_before_deletion(self, key: str) -> dict[str, str | None]:
        """pod -> its ``key`` annotation as last seen before any pod got a deletionTimestamp.

        What the ReplicaSet controller saw when it picked pods to remove; a pod without
        the annotation maps to None.
        """
        seen: dict[str, str | None] = {}
        for version in list(self.versions):
            meta = version.get("metadata", {})
            if meta.get("deletionTimestamp"):
                break
            seen[meta["name"]] = (meta.get("annotations") or {}).get(key)
        return seen

    def deleted(self) -> list[str]:
        """Pods seen with a deletionTimestamp, in the order they got one."""
        order: list[str] = []
        for version in list(self.versions):
            meta = version.get("metadata", {})
            if meta.get("deletionTimestamp") and meta["name"] not in order:
                order.append(meta["name"])
        return order

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=10)
        self._thread.join(timeout=5)
        if self._process.stdout is not None:
            self._process.stdout.close()


_KV = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def log_events(lines: Iterable[str]) -> list[dict[str, str]]:
    """The worker's structured log lines (key=value or JSON) as dicts; other lines skipped."""
    events: list[dict[str, str]] = []
    for line in lines:
        text = line.strip()
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except ValueError:
                continue
            if isinstance(obj, dict) and "event" in obj:
                events.append({str(k): str(v) for k, v in obj.items()})
            continue
        fields = {k: v[1:-1] if v.startswith('"') else v for k, v in _KV.findall(text)}
        if "event" in fields:
            events.append(fields)
    return events


class LogStream:
    """``kubectl logs -f`` of one container, kept line by line from the moment it starts.

    A deleted pod's logs go with it; a stream opened while it runs keeps every line up to
    the container's exit. ``stop`` waits for the stream to end on its own first (it does
    when the container exits), so the last lines are not cut off.
    """

    def __init__(self, kube: Kube, pod: str, container: str | None = None):
        extra = ["-c", container] if container else []
        self.lines: list[str] = []
        self._process = subprocess.Popen(
            kube.argv("logs", "-f", pod, *extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self, timeout: float = 10) -> list[str]:
        """The lines read; waits up to ``timeout`` for the stream to end by itself."""
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._process.terminate()
            self._process.wait(timeout=10)
        self._thread.join(timeout=5)
        if self._process.stdout is not None:
            self._process.stdout.close()
        return list(self.lines)
