"""A real etcd + kube-apiserver for the operator tier.

The session starts one etcd (temp data dir, free ports) and one kube-apiserver built from
the pinned Kubernetes release (``make k8s-bins``). Clients authenticate with a static admin
token in ``system:masters`` and the apiserver authorizes with RBAC, as a real cluster does;
TLS uses a throwaway CA made with openssl, so clients verify the serving certificate.

There is no controller-manager or scheduler: objects are stored and watched, Deployments get
no pods and deleted namespaces stay Terminating. Tests that need those use ``e2e/``.

Binaries come from ``$TASKFLEET_K8S_BIN`` or ``$TASKFLEET_CACHE/k8s/current/bin``. When they
are missing, tests that use the fixture are skipped, except in CI (``CI`` set), where that is
an error: CI must never pass by skipping the operator tier.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.fixtures_redis import free_port
from tests.needs import need
from tests.polling import close_error

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 10.0
SERVICE_CIDR = "10.96.0.0/16"
CONTEXT = "taskfleet-apiserver"


def _cache_dir() -> Path:
    default = Path.home() / ".cache" / "taskfleet"
    return Path(os.environ.get("TASKFLEET_CACHE") or default)


def kube_bin_dir() -> Path:
    """Where the Kubernetes binaries are looked up (see the module docstring)."""
    explicit = os.environ.get("TASKFLEET_K8S_BIN")
    return Path(explicit) if explicit else _cache_dir() / "k8s" / "current" / "bin"


def kubectl_path() -> str:
    """The pinned kubectl built beside the apiserver (within the supported version skew),
    else whatever ``kubectl`` is on PATH."""
    pinned = kube_bin_dir() / "kubectl"
    return str(pinned) if pinned.is_file() else "kubectl"


def _missing_binaries() -> list[str]:
    missing = []
    if not (kube_bin_dir() / "kube-apiserver").is_file():
        missing.append(f"{kube_bin_dir() / 'kube-apiserver'} (run `make k8s-bins`)")
    if shutil.which("etcd") is None:
        missing.append("etcd (apt-get install etcd-server)")
    if shutil.which("openssl") is None:
        missing.append("openssl")
    return missing


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_pki(directory: Path) -> None:
    """CA, serving cert for 127.0.0.1/localhost, service-account signing key (EC: fast)."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=taskfleet-test-ca", cwd=directory,
    )  # fmt: skip
    _openssl(
        "req", *ec, "-keyout", "apiserver.key", "-out", "apiserver.csr",
        "-subj", "/CN=kube-apiserver", cwd=directory,
    )  # fmt: skip
    (directory / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.96.0.1\n"
        "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n"
    )
    _openssl(
        "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "apiserver.crt",
        cwd=directory,
    )  # fmt: skip
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=directory)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_DEADLINE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


@dataclass
class KubeApiserver:
    """A running etcd + kube-apiserver pair; ``kubeconfig`` works for kubectl and kopf alike."""

    directory: Path
    #: Where kube-apiserver is: the pinned build, or another version's (an older minor).
    bin_dir: Path = field(default_factory=kube_bin_dir)
    token: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    etcd_port: int = field(default_factory=free_port)
    etcd_peer_port: int = field(default_factory=free_port)
    port: int = field(default_factory=free_port)
    etcd: subprocess.Popen[bytes] | None = None
    apiserver: subprocess.Popen[bytes] | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.directory / "pki" / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    def env(self) -> dict[str, str]:
        """The current environment plus KUBECONFIG, for subprocesses (kubectl, kopf run)."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def api_client(self) -> ApiClient:
        """A fresh ``kubernetes.client.ApiClient`` for this apiserver (close it when done)."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = str(self.ca_file)
        configuration.api_key = {"authorization": f"Bearer {self.token}"}
        return client.ApiClient(configuration)

    def request(self, path: str) -> Any:
        """GET ``path`` as the admin and decode the JSON answer."""
        req = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        context = ssl.create_default_context(cafile=str(self.ca_file))
        with urllib.request.urlopen(req, context=context, timeout=5) as response:
            return json.loads(response.read())

    def start(self) -> None:
        bin_dir = self.bin_dir
        pki = self.directory / "pki"
        _make_pki(pki)
        (self.directory / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
        self._write_kubeconfig()

        etcd_log = self.directory / "etcd.log"
        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{self.etcd_peer_port}"
        with etcd_log.open("wb") as log:
            self.etcd = subprocess.Popen(
                [
                    shutil.which("etcd") or "etcd",
                    "--name=default",
                    f"--data-dir={self.directory / 'etcd'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=default={peer_url}",
                    # Test data is thrown away: skip fsync so a busy disk cannot stall the suite.
                    "--unsafe-no-fsync",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._wait(lambda: self._etcd_healthy(etcd_url), self.etcd, etcd_log, "etcd")

        api_log = self.directory / "kube-apiserver.log"
        with api_log.open("wb") as log:
            self.apiserver = subprocess.Popen(
                [
                    str(bin_dir / "kube-apiserver"),
                    f"--etcd-servers={etcd_url}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={self.port}",
                    f"--cert-dir={self.directory / 'certs'}",
                    f"--tls-cert-file={pki / 'apiserver.crt'}",
                    f"--tls-private-key-file={pki / 'apiserver.key'}",
                    f"--client-ca-file={pki / 'ca.crt'}",
                    f"--token-auth-file={self.directory / 'tokens.csv'}",
                    "--authorization-mode=RBAC",
                    f"--service-cluster-ip-range={SERVICE_CIDR}",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-account-key-file={pki / 'sa.pub'}",
                    f"--service-account-signing-key-file={pki / 'sa.key'}",
                    # No kubelet ever serves 127.0.0.1 as the "kubernetes" Service's endpoint.
                    "--endpoint-reconciler-type=none",
                    "--profiling=false",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._wait(self._ready, self.apiserver, api_log, "kube-apiserver")

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": CONTEXT,
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": "admin"}}],
            "current-context": CONTEXT,
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2))  # JSON is valid YAML
        self.kubeconfig.chmod(0o600)

    @staticmethod
    def _etcd_healthy(url: str) -> bool:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return bool(json.loads(response.read()).get("health") == "true")

    def _ready(self) -> bool:
        req = urllib.request.Request(
            self.server + "/readyz", headers={"Authorization": f"Bearer {self.token}"}
        )
        context = ssl.create_default_context(cafile=str(self.ca_file))
        with urllib.request.urlopen(req, context=context, timeout=2) as response:
            return bool(response.status == 200)

    @staticmethod
    def _wait(probe: Any, process: subprocess.Popen[bytes] | None, log: Path, name: str) -> None:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            if process is None or process.poll() is not None:
                raise RuntimeError(f"{name} exited at start:\n{_tail(log)}")
            try:
                if probe():
                    return
            except (OSError, urllib.error.URLError, ValueError) as exc:
                # not listening yet, or /readyz still 500 while post-start hooks run
                close_error(exc)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {START_DEADLINE_S}s:\n{_tail(log)}")
            time.sleep(0.1)

    def stop(self) -> None:
        _stop(self.apiserver)
        _stop(self.etcd)
        self.apiserver = self.etcd = None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the apiserver carries the marker, so `-m "not apiserver"` works."""
    for item in items:
        if "kube_apiserver" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.apiserver)


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiserver]:
    """A real etcd + kube-apiserver for the session (see the module docstring)."""
    missing = _missing_binaries()
    if missing:
        reason = "kube-apiserver tier needs: " + ", ".join(missing)
        need(False, reason)
    server = KubeApiserver(tmp_path_factory.mktemp("kube"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube_namespace(kube_apiserver: KubeApiserver) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards.

    Its ``default`` ServiceAccount is created here, because without a controller-manager
    nobody else does and the ServiceAccount admission plugin would refuse every Pod.
    """
    from kubernetes import client

    name = f"t-{secrets.token_hex(4)}"
    with kube_apiserver.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        core.create_namespaced_service_account(
            name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default"))
        )
        try:
            yield name
        finally:
            core.delete_namespace(name)
