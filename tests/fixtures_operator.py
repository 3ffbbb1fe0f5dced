"""The TaskQueue CRD installed in the test apiserver, and the operator as a real process.

One operator process serves the session (it watches all namespaces, each test has its
own), with short sweep intervals from the same environment variables its Deployment
uses. Its log is printed when a test fails, so a failure says what the operator saw.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_kube import KubeApiserver, kubectl_path
from tests.fixtures_redis import free_port
from tests.polling import close_error, wait_for

REPO = Path(__file__).resolve().parents[1]
CRD_FILE = REPO / "crds" / "taskqueues.taskfleet.dev.yaml"
QUOTA_CRD_FILE = REPO / "crds" / "providerquotas.taskfleet.dev.yaml"
GROUP, VERSION, PLURAL = "taskfleet.dev", "v1alpha1", "taskqueues"
START_DEADLINE_S = 60.0
#: What waiting on the operator through the apiserver takes: a round trip, then a reconcile.
APISERVER_TIMEOUT_S = 15.0
APISERVER_INTERVAL_S = 0.1


def kubectl(
    server: KubeApiserver, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run kubectl against the test apiserver (and nothing else: KUBECONFIG is the fixture's)."""
    result = subprocess.run(
        [kubectl_path(), *args],
        input=stdin,
        env=server.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check and result.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
    return result


@pytest.fixture(scope="session")
def taskqueue_crd(kube_apiserver: KubeApiserver) -> str:
    """The generated CRD applied with kubectl and Established."""
    kubectl(kube_apiserver, "apply", "--server-side", "-f", str(CRD_FILE))
    wait_established(kube_apiserver, f"{PLURAL}.{GROUP}")
    return f"{PLURAL}.{GROUP}"


@pytest.fixture(scope="session")
def providerquota_crd(kube_apiserver: KubeApiserver) -> str:
    """The generated ProviderQuota CRD applied with kubectl and Established."""
    kubectl(kube_apiserver, "apply", "--server-side", "-f", str(QUOTA_CRD_FILE))
    wait_established(kube_apiserver, f"providerquotas.{GROUP}")
    return f"providerquotas.{GROUP}"


def wait_established(server: KubeApiserver, *crds: str, timeout: float = 60) -> None:
    """Wait until each CRD's Established condition is True.

    Not ``kubectl wait --for=condition=Established``: it fails at once, instead of waiting,
    when it reads a just-created CRD whose ``status.conditions`` is still unset."""
    query = '{.status.conditions[?(@.type=="Established")].status}'
    for crd in crds:
        argv = ("get", f"crd/{crd}", "-o", f"jsonpath={query}")

        def established(argv: tuple[str, ...] = argv) -> bool:
            return kubectl(server, *argv, check=False).stdout.strip() == "True"

        wait_for(
            established,
            timeout=timeout,
            interval=0.1,
            what=f"crd/{crd} Established",
        )


@pytest.fixture
def kube_api(kube_apiserver: KubeApiserver, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The operator's ``kube`` module, in this process, pointed at the test apiserver (as
    its admin): the API client it calls through, for reading back what it wrote."""
    from taskfleet_operator import kube

    with kube_apiserver.api_client() as api_client:
        monkeypatch.setattr(kube, "_api_client", lambda: api_client)
        yield api_client


@pytest.fixture(scope="session")
def operator_kubeconfig(
    kube_apiserver: KubeApiserver, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A kubeconfig for the operator's ServiceAccount, bound by manifests/rbac only.

    The operator runs with exactly the RBAC the manifests grant, so a missing rule fails
    these tests instead of a user's install.
    """
    kubectl(kube_apiserver, "apply", "-f", str(REPO / "manifests" / "namespace.yaml"))
    kubectl(kube_apiserver, "apply", "-k", str(REPO / "manifests" / "rbac"))
    token = kubectl(
        kube_apiserver,
        "-n",
        "taskfleet-system",
        "create",
        "token",
        "taskfleet-operator",
        "--duration=2h",
    ).stdout.strip()
    config = json.loads(kube_apiserver.kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": {"token": token}}]
    path = tmp_path_factory.mktemp("operator-kubeconfig") / "kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


@dataclass
class OperatorProcess:
    process: subprocess.Popen[bytes]
    log: Path
    liveness: str

    def tail(self, n: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def alive(self) -> bool:
        return self.process.poll() is None

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.liveness, timeout=2) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError) as exc:
            close_error(exc)
            return False


@contextmanager
def running_operator(
    kube_apiserver: KubeApiserver, kubeconfig: Path, log: Path, **env_extra: str
) -> Iterator[OperatorProcess]:
    """``python -m taskfleet_operator`` against the test apiserver, as its ServiceAccount,
    healthy, and stopped at the end (``env_extra``: more of its environment)."""
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    env = {
        **kube_apiserver.env(),
        "KUBECONFIG": str(kubeconfig),
        "TASKFLEET_SWEEP_INTERVAL": "0.5",
        # Longer than any test: an idle queue is swept again only when something wakes it,
        # so a missing wake-up fails a test instead of hiding behind a periodic sweep.
        "TASKFLEET_IDLE_SWEEP_INTERVAL": "600",
        "TASKFLEET_REDIS_TIMEOUT": "0.5",
        "TASKFLEET_QUOTA_STATUS_INTERVAL": "1",
        "PYTHONUNBUFFERED": "1",
        **env_extra,
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "taskfleet_operator", "--liveness", liveness, "--verbose"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    operator = OperatorProcess(process, log, liveness)
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while not operator.healthy():
            if not operator.alive() or time.monotonic() > deadline:
                pytest.fail(f"operator did not become healthy:\n{operator.tail()}")
            time.sleep(0.1)
        yield operator
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def operator_process(
    kube_apiserver: KubeApiserver,
    taskqueue_crd: str,
    operator_kubeconfig: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """The session's operator, watching all namespaces."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with running_operator(kube_apiserver, operator_kubeconfig, log) as operator:
        yield operator


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item) -> Any:
    """Attach the operator's log to a failing test that used it."""
    report = yield
    if report.failed and "operator_process" in getattr(item, "funcargs", {}):
        operator: OperatorProcess = item.funcargs["operator_process"]  # type: ignore[attr-defined]
        report.sections.append(("operator log (tail)", operator.tail()))
    return report


@pytest.fixture
def tq_namespace(kube_apiserver: KubeApiserver, kube_namespace: str) -> Iterator[str]:
    """A test namespace whose TaskQueues are deleted afterwards.

    No namespace controller runs in this tier, so deleting the namespace leaves its
    objects behind; deleting the TaskQueues stops the operator from sweeping them.
    """
    yield kube_namespace
    with kube_apiserver.api_client() as api:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        custom = client.CustomObjectsApi(api)

        def remaining() -> list[Any]:
            listed: Any = custom.list_namespaced_custom_object(
                GROUP, VERSION, kube_namespace, PLURAL
            )
            items: list[Any] = listed.get("items", [])
            return items

        for item in remaining():
            custom.delete_namespaced_custom_object(
                GROUP, VERSION, kube_namespace, PLURAL, item["metadata"]["name"]
            )
        # The operator (when running) removes its finalizer; without it, nobody will.
        deadline = time.monotonic() + 15
        while remaining() and time.monotonic() < deadline:
            time.sleep(0.1)
        for item in remaining():
            try:
                custom.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    kube_namespace,
                    PLURAL,
                    item["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise


def manifest(name: str, spec: dict[str, Any]) -> str:
    """A TaskQueue manifest as JSON (valid YAML) for kubectl."""
    return json.dumps(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TaskQueue",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def base_spec(redis_url: str, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "image": "localhost/taskfleet-worker:dev",
        "handler": "taskfleet.samples:echo",
        "redis": {"url": redis_url},
        "heartbeat": {"intervalSeconds": 1, "ttlSeconds": 3},
    }
    spec.update(overrides)
    return spec
