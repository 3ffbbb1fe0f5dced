"""The pinned helm binary, found in one place for tests and e2e.

``e2e/cluster/build-helm.sh`` (``make helm``) builds helm from its Go module at the version
pinned in ``e2e/cluster/versions.env`` into ``$TASKFLEET_CACHE/helm/<version>/bin/helm``;
``$TASKFLEET_HELM`` names another binary (as in ``e2e/cluster/lib.sh``). A helm on PATH is
never used: its version would decide what the tests check. When the binary is missing,
tests skip with a message, except in CI (``CI`` set), where that is an error.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.needs import need

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "taskfleet"
VERSIONS_ENV = REPO / "e2e" / "cluster" / "versions.env"


def pinned_version() -> str:
    """HELM_VERSION of e2e/cluster/versions.env."""
    for line in VERSIONS_ENV.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "HELM_VERSION":
            return value.strip()
    raise LookupError(f"no HELM_VERSION in {VERSIONS_ENV}")


def helm_path() -> Path:
    """Where the pinned helm is (it may not be built yet)."""
    explicit = os.environ.get("TASKFLEET_HELM")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("TASKFLEET_CACHE") or Path.home() / ".cache" / "taskfleet")
    return cache / "helm" / pinned_version() / "bin" / "helm"


def require_helm() -> str:
    """The pinned helm's path; skips the test when it is not built (fails in CI)."""
    path = helm_path()
    if not path.is_file():
        reason = f"needs the pinned helm at {path} (run `make helm`)"
        need(False, reason)
    return str(path)


def helm(
    *args: str, env: dict[str, str] | None = None, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the pinned helm; with check, a non-zero exit fails the test with helm's stderr."""
    result = subprocess.run(
        [require_helm(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result
