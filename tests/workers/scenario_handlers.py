"""The handler vocabulary of the worker-behaviour scenarios (conformance/scenarios/), as
the Python worker runs it; clients/node/test/fixtures/scenario_handlers.mjs is the same
for the Node worker. conformance/scenarios/README.md describes each behaviour.

The payload's ``do`` picks the behaviour. Each run notes what it did as one JSON line in
``$TASKFLEET_SCENARIO_DIR/handled``; ``hold`` waits for the file ``gate-<name>`` there.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from taskfleet import current_task

#: How often a held run looks at its gate and its cancellation.
POLL_S = 0.01
#: Never set: a run waiting on it never returns, as a call without a timeout.
_NEVER = threading.Event()


def _dir() -> Path:
    return Path(os.environ["TASKFLEET_SCENARIO_DIR"])


def _note(did: str) -> None:
    task = current_task()
    line = {"did": did, "task": task.task_id, "attempt": task.attempt, "worker": task.pod}
    with (_dir() / "handled").open("a") as out:  # one short append: whole lines
        out.write(json.dumps(line) + "\n")


def run(payload: dict[str, Any]) -> Any:
    """The scenario task: ``succeed``, ``fail``, ``hold``, ``sleep`` or ``hang``."""
    do = payload["do"]
    _note("start")
    if do == "succeed":
        result = payload.get("result")
    elif do == "fail":
        raise RuntimeError(payload["error"])
    elif do == "hold":
        gate = _dir() / f"gate-{payload['gate']}"
        while not gate.exists():
            if current_task().cancelled:
                _note("cancelled")
                return None  # a cancelled task ends cancelled whatever its run returns
            time.sleep(POLL_S)
        result = {"gate": payload["gate"]}
    elif do == "sleep":
        time.sleep(payload["ms"] / 1000)
        result = {"slept_ms": payload["ms"]}
    elif do == "hang":
        _NEVER.wait()
        result = None
    else:
        raise ValueError(f"no scenario behaviour {do!r}")
    _note("end")
    return result
