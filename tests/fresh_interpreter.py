"""Run a snippet in a fresh interpreter with the operator's and the worker's packages on
its path, for what is process-wide (the C heap, the garbage collector) and would change
what every later test in a shared pytest process sees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def run_json(code: str) -> dict[str, Any]:
    """Run ``code`` with ``python -c``; the JSON object its last line of output prints."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={"PYTHONPATH": f"{REPO / 'operator'}:{REPO / 'worker-image'}", "PATH": "/usr/bin"},
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
