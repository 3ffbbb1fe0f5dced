"""A release as a user receives it: a directory of artefacts, and nothing of the source tree.

`Release` reads what `make release` wrote (``images.txt``, the chart package, the wheels,
``SHA256SUMS``); `load_images` puts its image archives into the node's containerd the way
``images.txt`` tells a user to (``ctr images import --base-name``), so the cluster runs the
archived bytes; `Install` is one Helm release of its chart package in a namespace.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, LOCAL_CONTAINERD, Kube
from tests.helm import helm
from tests.polling import wait_for

__all__ = ["Image", "Install", "Release", "load_images"]

#: The CRDs a chart installs and its uninstall must leave: deleting the first deletes every
#: TaskQueue (and so every fleet); the second is kopf's, shared by every kopf operator.
CRDS = ("taskqueues.taskfleet.dev", "clusterkopfpeerings.kopf.dev")


@dataclass(frozen=True)
class Image:
    """One line of images.txt: ``name tag digest archive``."""

    name: str
    tag: str
    digest: str
    archive: Path

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.tag}"

    @property
    def pinned(self) -> str:
        return f"{self.name}@{self.digest}"


@dataclass(frozen=True)
class Release:
    """The artefacts of one release in a directory (``dist/`` or a cached previous one)."""

    directory: Path
    version: str
    images: dict[str, Image]  # operator, worker, worker-node

    @classmethod
    def read(cls, directory: Path) -> Release:
        """The release in ``directory``; fails the test when a file is missing or altered."""
        sums = directory / "SHA256SUMS"
        if not sums.is_file():
            pytest.fail(f"{directory} holds no release (no SHA256SUMS): run make e2e-release")
        for line in sums.read_text().splitlines():
            digest, name = line.split(maxsplit=1)
            if _sha256(directory / name.strip()) != digest:
                pytest.fail(f"{directory}/{name.strip()} does not match its SHA256SUMS")
        images = {}
        for line in (directory / "images.txt").read_text().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, tag, digest, archive = line.split()
            short = name.rsplit("/", 1)[-1].removeprefix("taskfleet-")
            images[short] = Image(name, tag, digest, directory / archive)
        versions = {image.tag for image in images.values()}
        # the Node worker's image from 0.2.0 on; the previous release may predate it
        assert len(versions) == 1 and {"operator", "worker"} <= set(images), images
        assert set(images) <= {"operator", "worker", "worker-node"}, images
        return cls(directory, versions.pop(), images)

    @property
    def chart(self) -> Path:
        return self.directory / f"taskfleet-{self.version}.tgz"

    def wheel(self, distribution: str = "taskfleet") -> Path:
        [found] = self.directory.glob(f"{distribution}-*.whl")
        return found

    @contextmanager
    def crds(self) -> Iterator[Path]:
        """The chart package's crds/ directory, unpacked (docs/upgrade.md, step 1)."""
        with (
            tempfile.TemporaryDirectory(prefix="taskfleet-chart-") as scratch,
            tarfile.open(self.chart) as archive,
        ):
            archive.extractall(scratch, filter="data")
            yield Path(scratch) / "taskfleet" / "crds"

    def image_values(self, *, by_digest: bool = False) -> dict[str, Any]:
        """The chart's ``image`` values for this release's operator image."""
        operator = self.images["operator"]
        registry, _, repository = operator.name.rpartition("/")
        values: dict[str, Any] = {"registry": registry, "repository": repository}
        if by_digest:
            values["digest"] = operator.digest
        return values


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _ctr(*args: str, timeout: float = 600) -> str:
    address = os.environ.get("TASKFLEET_E2E_CTR_ADDRESS") or LOCAL_CONTAINERD
    argv = ["ctr", "-a", address, "-n", "k8s.io", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def load_images(release: Release) -> None:
    """Import the release's image archives into the local cluster's containerd, as
    images.txt says (``--base-name``), with their digest references too (``--digests``)
    so a pod may name an image by digest as install.yaml does; then check each name in
    containerd points at the digest images.txt lists."""
    if not Path(os.environ.get("TASKFLEET_E2E_CTR_ADDRESS") or LOCAL_CONTAINERD).exists():
        pytest.fail(
            f"no containerd socket at {LOCAL_CONTAINERD}: the release stage runs on the local "
            "cluster (make e2e-release)"
        )
    for image in release.images.values():
        _ctr("images", "import", "--base-name", image.name, "--digests", str(image.archive))
        for ref in (image.ref, image.pinned):
            listed = _ctr("images", "ls", f"name=={ref}").splitlines()[1:]
            assert listed and image.digest in listed[0].split(), (
                f"containerd lists {ref} as {listed}, images.txt says {image.digest}"
            )


@dataclass
class Install:
    """One Helm release of a chart package, in its own namespace."""

    name: str
    kube: Kube  # the release's namespace

    @property
    def namespace(self) -> str:
        assert self.kube.namespace is not None
        return self.kube.namespace

    @property
    def fullname(self) -> str:
        return self.name if "taskfleet" in self.name else f"{self.name}-taskfleet"

    @property
    def deployment(self) -> str:
        return f"{self.fullname}-operator"

    def install(self, release: Release, values: dict[str, Any]) -> None:
        self._helm("install", release, values)

    def upgrade(self, release: Release, values: dict[str, Any]) -> None:
        """``helm upgrade`` as docs/upgrade.md says: the release's values kept, ``values``
        set on top."""
        self._helm("upgrade", release, values, "--reset-then-reuse-values")

    def _helm(self, verb: str, release: Release, values: dict[str, Any], *extra: str) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
            json.dump(values, file)
            file.flush()
            helm(
                verb, self.name, str(release.chart), "--namespace", self.namespace,
                "--values", file.name, *extra, "--wait", "--timeout", "10m", timeout=660,
            )  # fmt: skip
        self.kube.run(
            "rollout", "status", f"deployment/{self.deployment}", "--timeout=600s", timeout=620
        )

    def uninstall(self) -> None:
        helm("uninstall", self.name, "--namespace", self.namespace, "--wait", timeout=300)

    def operator_images(self) -> set[str]:
        """The images of the operator's running pods (their spec, as the kubelet ran it)."""
        deployment = self.kube.get("deployment", self.deployment)
        assert deployment is not None, f"no Deployment {self.deployment}"
        labels = deployment["spec"]["selector"]["matchLabels"]
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        return {
            c["image"]
            for pod in self.kube.pods(selector)
            if not pod["metadata"].get("deletionTimestamp")
            for c in pod["spec"]["containers"]
        }

    def ready(self) -> int:
        deployment = self.kube.get("deployment", self.deployment)
        return int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)

    def wait_ready(self, replicas: int, timeout: float = 300) -> None:
        wait_for(
            lambda: self.ready() >= replicas,
            timeout=timeout,
            interval=CLUSTER_INTERVAL_S,
            what=f"{replicas} ready replicas of {self.deployment}",
            ignoring=CLUSTER_ERRORS,
        )


def crd_uids() -> dict[str, str]:
    """uid of each CRD the chart brings: the same uid later means never deleted."""
    uids = {}
    for crd in CRDS:
        found = Kube().get("crd", crd)
        assert found is not None, f"CRD {crd} is missing"
        uids[crd] = found["metadata"]["uid"]
    return uids


def peering_uid(name: str) -> str | None:
    found = Kube().get("clusterkopfpeering", name)
    return None if found is None else str(found["metadata"]["uid"])


def tear_down(kube: Kube, *installs: str) -> None:
    """Remove what a scenario left in ``kube``'s namespace, whatever its outcome: the Helm
    releases, the TaskQueues (their finalizers dropped when no operator is left to run
    them) and the namespace; and each release's peering object, which uninstall keeps."""
    namespace = kube.namespace
    assert namespace is not None
    kube.run(
        "delete", "taskqueues", "--all", "--wait=true", "--timeout=60s", check=False, timeout=90
    )
    for name in installs:
        helm("uninstall", name, "--namespace", namespace, "--wait", check=False, timeout=300)
    for queue in kube.run("get", "taskqueues", "-o", "name", check=False).stdout.split():
        kube.run(
            "patch", queue, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False
        )
    Kube().run("delete", "namespace", namespace, "--wait=false", check=False)
    for name in installs:
        fullname = name if "taskfleet" in name else f"{name}-taskfleet"
        Kube().run("delete", "clusterkopfpeering", fullname, "--ignore-not-found", check=False)
