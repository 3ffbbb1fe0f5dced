"""A level-1 worker (release/previous.env's LEVEL1_COMMIT, taskfleet 0.1.0), for tests that
run it beside this tree's parts: its own ``taskfleet`` script, from its wheel in a venv of its own
(release/previous-library.sh: built once per commit, cached), and a handler module on its
path that imports nothing of this tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PREVIOUS = dict(
    line.split("=", 1)
    for line in (REPO / "release/previous.env").read_text().splitlines()
    if line and not line.startswith("#")
)
#: A cold build (a wheel, a venv, its dependencies from the index) takes about half a minute;
#: within pytest-timeout's 300 s for the first test, so a stuck build fails saying so.
BUILD_TIMEOUT_S = 240
#: ``oldtasks:double``, for the previous release's worker.
HANDLERS = """
def double(payload):
    return {"doubled": payload["n"] * 2}
"""


@pytest.fixture(scope="session")
def previous_taskfleet() -> Path:
    """The previous release's ``taskfleet`` script, in its cached venv."""
    built = subprocess.run(
        [str(REPO / "release/previous-library.sh")],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if built.returncode != 0:
        tail = "\n".join(built.stderr.strip().splitlines()[-20:])
        pytest.fail(f"release/previous-library.sh exited {built.returncode}:\n{tail}")
    script = Path(built.stdout.strip().splitlines()[-1]) / "bin" / "taskfleet"
    shown = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    assert shown == f"taskfleet, version {PREVIOUS['LEVEL1_VERSION']}"
    return script


def handler_path(directory: Path) -> dict[str, str]:
    """``oldtasks`` written into ``directory``: the environment that puts it on the path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "oldtasks.py").write_text(HANDLERS)
    return {"PYTHONPATH": str(directory)}
