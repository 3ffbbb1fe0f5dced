"""Fixtures of the release stage: the two releases' artefacts, their images in the node's
containerd, namespaces that clean up after themselves, and the cluster's other operators
out of the way.

The stage runs only on the local cluster, from e2e/release/run.sh (``make e2e-release``),
which builds both releases and names their directories: ``TASKFLEET_RELEASE_DIST`` (the
new one, ``dist/`` by default) and ``TASKFLEET_PREVIOUS_DIST`` (release/previous.env's,
built by e2e/release/build-previous.sh).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.lib.fleet import OPERATOR_IMAGE_HINT
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, Kube
from e2e.lib.outcome import failed
from e2e.release.artefacts import Release, load_images
from e2e.release.stage import Stage
from tests.polling import wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def current() -> Release:
    """The release under test (``make release VERSION=...``), its images in containerd."""
    release = Release.read(Path(os.environ.get("TASKFLEET_RELEASE_DIST") or REPO / "dist"))
    load_images(release)
    return release


@pytest.fixture(scope="session")
def previous(current: Release) -> Release:
    """The previous release (release/previous.env), its images in containerd."""
    given = os.environ.get("TASKFLEET_PREVIOUS_DIST")
    if not given:
        pytest.fail(
            "TASKFLEET_PREVIOUS_DIST is not set: make e2e-release builds the previous release "
            "(e2e/release/build-previous.sh) and names its directory"
        )
    release = Release.read(Path(given))
    assert release.version != current.version, (
        f"the previous release and the one under test are both {current.version}"
    )
    for name, image in release.images.items():
        assert image.ref != current.images[name].ref, f"both releases' {name} is {image.ref}"
    load_images(release)
    return release


@pytest.fixture(scope="session")
def previous_python(previous: Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway venv holding the previous release's library, installed from its wheel
    (its dependencies from the package index, as an application gets them)."""
    venv = tmp_path_factory.mktemp("previous-library") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(previous.wheel())],
        check=True,
        timeout=900,
    )
    version = subprocess.run(
        [str(python), "-c", "import taskfleet; print(taskfleet.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert version == previous.version, f"the venv's taskfleet is {version}"
    return python


@pytest.fixture(scope="session", autouse=True)
def others_paused() -> Iterator[None]:
    """Operators this stage did not install (the suite's, from manifests/) serve every
    namespace and would share the stage's TaskQueues: scaled to zero for the stage, then
    back, whatever happens."""
    paused: list[tuple[Kube, str, int]] = []
    for found in Kube().json("get", "deployments", "--all-namespaces")["items"]:
        containers = found["spec"]["template"]["spec"]["containers"]
        replicas = int(found["spec"].get("replicas", 1))
        if replicas and any(OPERATOR_IMAGE_HINT in c["image"] for c in containers):
            kube = Kube(found["metadata"]["namespace"])
            kube.run("scale", f"deployment/{found['metadata']['name']}", "--replicas=0")
            paused.append((kube, found["metadata"]["name"], replicas))
    for kube, name, _ in paused:

        def stopped(kube: Kube = kube, name: str = name) -> bool:
            return not (kube.get("deployment", name) or {}).get("status", {}).get("replicas")

        wait_for(
            stopped,
            timeout=180,
            interval=CLUSTER_INTERVAL_S,
            what=f"operator {kube.namespace}/{name} to stop",
            ignoring=CLUSTER_ERRORS,
        )
    yield
    for kube, name, replicas in paused:
        kube.run("scale", f"deployment/{name}", f"--replicas={replicas}", check=False)


@pytest.fixture
def stage(request: pytest.FixtureRequest) -> Iterator[Stage]:
    made = Stage(request.node.name.removeprefix("test_")[:12].strip("_").replace("_", "-"))
    try:
        yield made
    finally:
        made.close(failed(request))
