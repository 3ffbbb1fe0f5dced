"""The worker's runtime file and the ``taskfleet drain`` side that reads it.

The worker and the preStop hook run in the same container but share nothing but the
filesystem and the PID namespace. The worker keeps ``$TASKFLEET_RUNTIME_DIR/worker.json``
(``{pid, start, pod, queue, inflight, draining, state}``) current; ``taskfleet drain``
reads it, sends SIGTERM to that pid (only while the process there has the recorded
``/proc`` start time: a pid may be reused) and, with ``--wait``, polls the file until
nothing is in flight.
The file is replaced atomically (write + rename), so a reader never sees half of it.

Nothing in the directory is trusted blindly. The default directory is private
(``$XDG_RUNTIME_DIR/taskfleet``, else ``/tmp/taskfleet-<uid>``, made with mode 0700; one
that is a symlink, not ours, or group/world-writable is refused). An explicitly configured
one (``--runtime-dir``, ``TASKFLEET_RUNTIME_DIR``: in a pod, a directory the worker makes
on the pod's emptyDir) is trusted for its location, and made with mode 0700 when missing.
In either, files are written through a fresh temp file (``O_EXCL | O_NOFOLLOW``, 0600)
renamed into place, read with ``O_NOFOLLOW`` and only when they are ours; and ``taskfleet
drain`` signals a pid only if that process is ours, is a ``taskfleet worker`` by its
command line and has the recorded start time.

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
import secrets
import signal
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from taskfleet.protocol import environment

__all__ = [
    "WAITER_GRACE_S",
    "DrainError",
    "RuntimeState",
    "UnsafeRuntimeDir",
    "default_runtime_dir",
    "live_waiters",
    "pid_alive",
    "prepare_runtime_dir",
    "process_start",
    "read_state",
    "register_waiter",
    "remove_state",
    "request_drain",
    "runtime_path",
    "write_state",
]

FILE_NAME = "worker.json"
POLL_INTERVAL_S = 0.05
WAITER_PREFIX = "drain-waiter."
#: Longest a drained worker waits for ``taskfleet drain`` processes to exit before it does.
WAITER_GRACE_S = 5.0


class DrainError(RuntimeError):
    """No worker to drain (no runtime file, or its pid is gone before the signal), or a
    runtime file that can't be trusted."""


class UnsafeRuntimeDir(ValueError):  # noqa: N818 - says what is wrong, like ValueError
    """The runtime directory could be written by someone else: not used."""


@dataclass
class RuntimeState:
    pid: int
    pod: str
    queue: str
    inflight: int = 0
    draining: bool = False
    state: str = "starting"  # starting | running | draining | drained | stopped
    start: str | None = None  # /proc start time of pid: tells the worker from a reused pid


def default_runtime_dir() -> Path:
    """``$XDG_RUNTIME_DIR/taskfleet`` if set, else ``/tmp/taskfleet-<uid>``: private."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "taskfleet"
    return Path(f"/tmp/taskfleet-{os.geteuid()}")


def _configured(directory: str | os.PathLike[str] | None) -> str | None:
    return str(directory) if directory else os.environ.get(environment.RUNTIME_DIR) or None


def runtime_path(directory: str | os.PathLike[str] | None = None) -> Path:
    return Path(_configured(directory) or default_runtime_dir()) / FILE_NAME


def prepare_runtime_dir(directory: str | os.PathLike[str] | None = None, *, create: bool) -> Path:
    """The runtime directory to use (made with mode 0700 if missing and ``create``).

    The default one must be a real directory (no symlink) of ours that no one else can
    write; ``UnsafeRuntimeDir`` says what is wrong otherwise. A configured one is trusted
    for its location (the files in it are still written and read safely).
    """
    configured = _configured(directory)
    path = Path(configured) if configured else default_runtime_dir()
    if create:
        if configured:
            path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
    if configured:
        return path
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return path  # nothing there to trust or distrust (drain then finds no file)
    fix = "remove it or pass --runtime-dir (TASKFLEET_RUNTIME_DIR)"
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeRuntimeDir(f"runtime directory {path} is a symlink; {fix}")
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeRuntimeDir(f"runtime directory {path} is not a directory; {fix}")
    if info.st_uid != os.geteuid():
        raise UnsafeRuntimeDir(
            f"runtime directory {path} belongs to uid {info.st_uid}, not to us "
            f"(uid {os.geteuid()}); {fix}"
        )
    if info.st_mode & 0o022:
        raise UnsafeRuntimeDir(
            f"runtime directory {path} is group- or world-writable "
            f"(mode {stat.S_IMODE(info.st_mode):04o}); {fix}"
        )
    return path


def _write_new(directory: Path, name: str, text: str) -> None:
    """Write ``directory/name`` through a fresh temp file renamed over it: never through a
    symlink planted at either name (the rename replaces a symlink, not its target)."""
    while True:
        tmp = directory / f".{name}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue  # someone's file (or symlink) by that name: pick another
        break
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, directory / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_own(path: Path) -> str:
    """The text of ``path``, a regular file of ours, not through a symlink (else OSError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as src:
        info = os.fstat(src.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise PermissionError(f"{path} is not a file of ours")
        return src.read()


def write_state(state: RuntimeState, path: Path) -> None:
    text = json.dumps(asdict(state))
    try:
        _write_new(path.parent, path.name, text)
    except FileNotFoundError:  # the directory, made on first use only: this runs often
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write_new(path.parent, path.name, text)


def read_state(path: Path) -> RuntimeState | None:
    """The state in ``path``; None when missing, unreadable, a symlink or not ours."""
    try:
        data: dict[str, Any] = json.loads(_read_own(path))
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


def _not_a_worker(pid: int) -> str | None:
    """Why ``pid`` is not a ``taskfleet worker`` process of ours (None: it is one).

    Without procfs nothing can be checked (None).
    """
    proc = Path(f"/proc/{pid}")
    try:
        owner = os.stat(proc).st_uid
        args = (proc / "cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return None if not Path("/proc/self").exists() else "it is gone"
    except OSError as exc:
        return f"its /proc entry can't be read ({exc.strerror})"
    if owner != os.geteuid():
        return f"it belongs to uid {owner}, not to us"
    names = [os.path.basename(arg) for arg in args]
    if b"worker" in args and any(name.startswith(b"taskfleet") for name in names):
        return None
    shown = b" ".join(arg for arg in args if arg).decode(errors="replace")[:120]
    return f"its command line is not a taskfleet worker's ({shown!r})"


def register_waiter(directory: Path) -> Path | None:
    """Record this process as one the worker must outlive (done before it is signalled).

    The file stays after we exit: the worker deletes it once it has seen us gone, so
    there is no window between removing it and the process really ending. A directory
    we can't write to only costs that courtesy, not the drain: None then.
    """
    path = directory / f"{WAITER_PREFIX}{os.getpid()}"
    try:
        _write_new(directory, path.name, json.dumps(_proc_identity("self")))
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
            recorded: dict[str, Any] = json.loads(_read_own(entry))
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
    with contextlib.suppress(FileNotFoundError):
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid():
            raise DrainError(
                f"runtime file {path} is a symlink or not ours; not trusting it (no signal sent)"
            )
    state = read_state(path)
    if state is None:
        raise DrainError(f"no worker runtime file at {path}")
    if not _is_worker(state):
        return True  # gone (its pid may name another process now): it holds nothing
    why = _not_a_worker(state.pid)
    if why is not None:
        raise DrainError(f"runtime file {path} names pid {state.pid}, but {why}; no signal sent")
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
