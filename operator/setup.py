"""The operator distribution's version and dependencies (pyproject.toml lists them dynamic).

Both come from the library's version, written in one place: worker-image/taskfleet/
_version.py in the repository. A wheel built from this distribution's sdist has no
repository around it: there the version is read back from the sdist's PKG-INFO.
"""

import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
VERSION_FILE = HERE.parent / "worker-image" / "taskfleet" / "_version.py"


def _version() -> str:
    if VERSION_FILE.is_file():
        found = re.search(r'^__version__ = "([^"]+)"$', VERSION_FILE.read_text(), re.M)
    else:
        found = re.search(r"^Version: (\S+)$", (HERE / "PKG-INFO").read_text(), re.M)
    if found is None:
        raise SystemExit(f"taskfleet-operator: no version in {VERSION_FILE} or PKG-INFO")
    return found.group(1)


VERSION = _version()

setup(
    version=VERSION,
    install_requires=[
        # The library of the same release: the operator writes the queue's config and reads
        # its tasks through it, so both speak one version of the Redis layout.
        f"taskfleet=={VERSION}",
        "kopf>=1.37,<2",
        "kubernetes>=29",
        # The operator always serves its metrics (TASKFLEET_METRICS_PORT, 0 turns them off).
        "prometheus-client>=0.20",
        # crdgen writes the CRD's YAML (the Kubernetes client needs it too).
        "PyYAML>=6",
    ],
)
