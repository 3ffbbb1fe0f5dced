"""A handler module for supervisor tests whose import stands for a worker's start.

While the file named by ``TASKFLEET_TEST_CRASH`` exists, importing it ends the process
with exit code 3 (a worker that crashes at start). While the file named by
``TASKFLEET_TEST_HOLD`` exists, the import waits for it to go, after leaving
``<hold>.<pid>`` behind: a test sees the process inside its start and chooses when it ends.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

_crash = os.environ.get("TASKFLEET_TEST_CRASH")
if _crash and Path(_crash).exists():
    os._exit(3)

_hold = os.environ.get("TASKFLEET_TEST_HOLD")
if _hold and Path(_hold).exists():
    Path(f"{_hold}.{os.getpid()}").touch()
    _deadline = time.monotonic() + 30
    while Path(_hold).exists() and time.monotonic() < _deadline:
        time.sleep(0.01)  # test scaffolding: a start that takes as long as the test says


def noop(payload: dict[str, Any]) -> None:
    return None
