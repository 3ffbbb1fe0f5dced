"""The worker's runtime file and the ``taskfleet drain`` side that reads it.

The worker and the preStop hook run in the same container but share nothing but the
filesystem and the PID namespace. The worker keeps ``$TASKFLEET_RUNTIME_DIR/worker.json``
(``{pid, pod, queue, inflight, draining, state}``) current; ``taskfleet drain`` reads it,
sends SIGTERM to that pid and, with ``--wait``, polls the file until nothing is in flight.
The file is replaced atomically (write + rename), so a reader never sees half of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_RUNTIME_DIR",
    "DrainError",
    "RuntimeState",
    "pid_alive",
    "read_state",
    "remove_state",
    "request_drain",
    "runtime_path",
    "write_state",
]

DEFAULT_RUNTIME_DIR = "/tmp/taskfleet"  # an emptyDir in the pod; the root filesystem is read-only
FILE_NAME = "worker.json"
POLL_INTERVAL_S = 0.05


class DrainError(RuntimeError):
    """No worker to drain (no runtime file, or its pid is gone before the signal)."""


@dataclass
class RuntimeState:
    pid: int
    pod: str
    queue: str
    inflight: int = 0
    draining: bool = False
    state: str = "starting"  # starting | running | draining | stopped


def runtime_path(directory: str | os.PathLike[str] | None = None) -> Path:
    base = directory or os.environ.get("TASKFLEET_RUNTIME_DIR") or DEFAULT_RUNTIME_DIR
    return Path(base) / FILE_NAME


def write_state(state: RuntimeState, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(state)))
    os.replace(tmp, path)


def read_state(path: Path) -> RuntimeState | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return RuntimeState(
            pid=int(data["pid"]),
            pod=str(data.get("pod", "")),
            queue=str(data.get("queue", "")),
            inflight=int(data.get("inflight", 0)),
            draining=bool(data.get("draining", False)),
            state=str(data.get("state", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_state(path: Path, pid: int) -> None:
    """Remove the file if it is still ours (a restarted worker may already own it)."""
    current = read_state(path)
    if current is not None and current.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a live process; a zombie counts as gone (it holds no task)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    # The state follows the parenthesised command name, which may itself contain spaces.
    return stat.rpartition(")")[2].split()[0] != "Z"


def request_drain(path: Path, *, wait: bool, timeout: float | None) -> bool:
    """SIGTERM the worker named in the runtime file; with ``wait``, wait until it holds nothing.

    Returns True when the worker holds no task (or is gone), False on timeout.
    """
    state = read_state(path)
    if state is None:
        raise DrainError(f"no worker runtime file at {path}")
    try:
        os.kill(state.pid, signal.SIGTERM)
    except ProcessLookupError:
        return True  # the worker is already gone: it holds nothing
    if not wait:
        return True
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if not pid_alive(state.pid):
            return True
        current = read_state(path)
        if current is None or current.pid != state.pid:
            return True  # file removed at exit, or a new incarnation took over
        if current.draining and current.inflight == 0:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL_S)
