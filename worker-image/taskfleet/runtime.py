"""The worker's runtime file and the ``taskfleet drain`` side that reads it.

The worker and the preStop hook run in the same container but share nothing but the
filesystem and the PID namespace. The worker keeps ``$TASKFLEET_RUNTIME_DIR/worker.json``
(``{pid, start, pod, queue, inflight, draining, state}``) current; ``taskfleet drain``
reads it, sends SIGTERM to that pid (only while the process there has the recorded
``/proc`` start time: a pid may be reused) and, with ``--wait``, polls the file until
nothing is in flight.
The file is replaced atomically (write + rename), so a reader never sees half of it.

When the worker's init is PID 1 of the PID namespace, its exit makes the kernel SIGKILL
every other process there, ``taskfleet drain`` included: the kubelet would then report
the preStop hook as failed (exit 137) on every shutdown. So ``taskfleet drain`` first
leaves a ``drain-waiter.<pid>`` file, and the worker, once drained (``state: drained``),
waits (bounded) until every waiter named there has exited before it exits itself.
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
    "WAITER_GRACE_S",
    "DrainError",
    "RuntimeState",
    "live_waiters",
    "pid_alive",
    "process_start",
    "read_state",
    "register_waiter",
    "remove_state",
    "request_drain",
    "runtime_path",
    "write_state",
]

DEFAULT_RUNTIME_DIR = "/tmp/taskfleet"  # an emptyDir in the pod; the root filesystem is read-only
FILE_NAME = "worker.json"
POLL_INTERVAL_S = 0.05
WAITER_PREFIX = "drain-waiter."
#: Longest a drained worker waits for ``taskfleet drain`` processes to exit before it does.
WAITER_GRACE_S = 5.0


class DrainError(RuntimeError):
    """No worker to drain (no runtime file, or its pid is gone before the signal)."""


@dataclass
class RuntimeState:
    pid: int
    pod: str
    queue: str
    inflight: int = 0
    draining: bool = False
    state: str = "starting"  # starting | running | draining | drained | stopped
    start: str | None = None  # /proc start time of pid: tells the worker from a reused pid


def runtime_path(directory: str | os.PathLike[str] | None = None) -> Path:
    base = directory or os.environ.get("TASKFLEET_RUNTIME_DIR") or DEFAULT_RUNTIME_DIR
    return Path(base) / FILE_NAME


def write_state(state: RuntimeState, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    text = json.dumps(asdict(state))
    try:
        tmp.write_text(text)
    except FileNotFoundError:  # the directory, made on first use only: this runs often
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
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
            start=None if data.get("start") is None else str(data["start"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_state(path: Path, pid: int) -> None:
    """Remove the file if it is still ours (a restarted worker may already own it)."""
    current = read_state(path)
    if current is not None and current.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _proc_identity(pid: int | str) -> dict[str, str | None]:
    """PID namespace and start time of a process: a pid alone may be reused or foreign."""
    identity: dict[str, str | None] = {"pidns": None, "start": None}
    with contextlib.suppress(OSError):
        identity["pidns"] = os.readlink(f"/proc/{pid}/ns/pid")
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        identity["start"] = stat.rpartition(")")[2].split()[19]  # field 22: starttime
    return identity


def process_start(pid: int | str) -> str | None:
    """``/proc`` start time of ``pid`` (None without procfs or when it is gone)."""
    return _proc_identity(pid)["start"]


def _is_worker(state: RuntimeState) -> bool:
    """Is ``state.pid`` still the process that wrote ``state``? (A pid may be reused.)"""
    if not pid_alive(state.pid):
        return False
    return state.start is None or process_start(state.pid) in (None, state.start)


def register_waiter(directory: Path) -> Path | None:
    """Record this process as one the worker must outlive (done before it is signalled).

    The file stays after we exit: the worker deletes it once it has seen us gone, so
    there is no window between removing it and the process really ending. A directory
    we can't write to only costs that courtesy, not the drain: None then.
    """
    path = directory / f"{WAITER_PREFIX}{os.getpid()}"
    tmp = directory / f".{path.name}.tmp"
    try:
        tmp.write_text(json.dumps(_proc_identity("self")))
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def live_waiters(directory: Path) -> list[int]:
    """Pids of ``taskfleet drain`` processes still running that share our PID namespace.

    Files of waiters that are gone (or whose pid now names another process) are removed.
    A waiter in another PID namespace is ignored: our exit can't kill it.
    """
    own_ns = _proc_identity("self")["pidns"]
    live = []
    try:
        entries = list(directory.glob(f"{WAITER_PREFIX}*"))
    except OSError:
        return []
    for entry in entries:
        try:
            pid = int(entry.name.removeprefix(WAITER_PREFIX))
            recorded: dict[str, Any] = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue  # not ours to judge (or removed meanwhile)
        if own_ns is not None and recorded.get("pidns") not in (None, own_ns):
            continue
        started = recorded.get("start")
        if pid_alive(pid) and (started is None or _proc_identity(pid)["start"] == started):
            live.append(pid)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
    return live


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

    Returns True when the worker holds no task (or is gone), False on timeout. It
    never waits for the worker to exit: a drained worker waits for us instead.
    """
    state = read_state(path)
    if state is None:
        raise DrainError(f"no worker runtime file at {path}")
    if not _is_worker(state):
        return True  # gone (its pid may name another process now): it holds nothing
    # Before the signal, so the worker can't finish draining without knowing of us.
    register_waiter(path.parent)
    try:
        os.kill(state.pid, signal.SIGTERM)
    except ProcessLookupError:
        return True  # the worker is already gone: it holds nothing
    if not wait:
        return True
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if not _is_worker(state):
            return True
        current = read_state(path)
        if current is None or current.pid != state.pid:
            return True  # file removed at exit, or a new incarnation took over
        if current.state in ("drained", "stopped"):
            return True
        if current.draining and current.inflight == 0:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL_S)
