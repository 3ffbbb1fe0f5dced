"""Who a worker is (its name, the pod) and where its process runs (its whereabouts).

A worker's name keys everything it holds in Redis (``pod:<pod>``, ``wake:<pod>``, its
``workers`` record), and a worker that starts under a name takes back whatever earlier
incarnations of that name held: that is how a restarted container gets its tasks back at
once. Two live workers under one name would take each other's tasks, so:

- without ``--pod`` / ``TASKFLEET_POD_NAME`` the name is unique per process
  (``<hostname>-<pid>-<6 hex>``); in Kubernetes the operator sets ``TASKFLEET_POD_NAME``
  from the pod's name, which a restarted container keeps;
- every worker record carries the worker's whereabouts (``host boot netns pidns pid start
  beat``, an opaque string to Lua), and a worker that finds its name held by another
  incarnation judges whether that one (its ``WorkerRecord``) is alive
  (:func:`holder_alive`) before it takes over; a live one makes it refuse to start;
- a worker whose name was taken over while it runs learns it from its next heartbeat
  and stops (see ``Broker.heartbeat``).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from taskfleet.protocol.records import WorkerRecord as StoredRecord
from taskfleet.worker.runtime import pid_alive, process_start

__all__ = ["Whereabouts", "WorkerRecord", "default_pod_name", "holder_alive"]

_NOT_IN_NAME = re.compile(r"[^a-z0-9.-]+")
#: A holder on a host (or network namespace) we can't look into is taken for alive while
#: its last heartbeat is younger than this many of its heartbeat intervals.
REMOTE_ALIVE_BEATS = 2


def default_pod_name() -> str:
    """``<hostname>-<pid>-<6 hex>``: unique per process, and a valid Kubernetes-style name
    (lower-case letters, digits, ``.`` and ``-``), so two workers on one host never share it."""
    host = _NOT_IN_NAME.sub("-", socket.gethostname().lower()).strip(".-")[:40] or "worker"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


def _namespace(kind: str) -> str | None:
    """Inode of this process's ``kind`` namespace (``pid:[4026531836]`` -> ``4026531836``)."""
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/self/ns/{kind}").partition("[")[2].rstrip("]") or None
    return None


def _boot_id() -> str | None:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    return None


def _word(value: str) -> str:
    return re.sub(r"[\s=]+", "-", value) or "-"


@dataclass(frozen=True)
class Whereabouts:
    """Where a worker process runs, as much as its peers need to tell it alive or gone.

    ``boot`` (the kernel's boot id) and the namespace inodes tell whether another process
    is one this process could see in ``/proc``; ``pid`` + ``start`` (its ``/proc`` start
    time) name it there even after its pid is reused; ``beat`` is its heartbeat interval.
    """

    host: str
    pid: int | None = None
    start: str | None = None
    boot: str | None = None
    netns: str | None = None
    pidns: str | None = None
    beat: float | None = None

    @classmethod
    def local(cls, heartbeat_interval: float) -> Whereabouts:
        """This process's whereabouts (a forked child must call it again: its pid differs)."""
        pid = os.getpid()
        return cls(
            host=socket.gethostname(),
            pid=pid,
            start=process_start(pid),
            boot=_boot_id(),
            netns=_namespace("net"),
            pidns=_namespace("pid"),
            beat=heartbeat_interval,
        )

    def encode(self) -> str:
        """``host=H pid=N start=S boot=B netns=I pidns=I beat=F`` (``-`` for unknown)."""
        fields = {
            "host": self.host,
            "pid": self.pid,
            "start": self.start,
            "boot": self.boot,
            "netns": self.netns,
            "pidns": self.pidns,
            "beat": None if self.beat is None else f"{self.beat:g}",
        }
        return " ".join(f"{k}={'-' if v is None else _word(str(v))}" for k, v in fields.items())

    @classmethod
    def parse(cls, text: str | None) -> Whereabouts | None:
        """The whereabouts of a worker record (None: none recorded, or unreadable)."""
        if not text:
            return None
        fields: dict[str, str | None] = {}
        for item in text.split():
            key, sep, value = item.partition("=")
            if sep:
                fields[key] = None if value == "-" else value
        try:
            pid = fields.get("pid")
            beat = fields.get("beat")
            return cls(
                host=fields.get("host") or "?",
                pid=None if pid is None else int(pid),
                start=fields.get("start"),
                boot=fields.get("boot"),
                netns=fields.get("netns"),
                pidns=fields.get("pidns"),
                beat=None if beat is None else float(beat),
            )
        except ValueError:
            return None


def holder_alive(
    holder: Whereabouts | None, heartbeat_age_ms: int, me: Whereabouts, default_beat: float
) -> bool:
    """Is the worker that holds our name (another incarnation) alive?

    - No whereabouts recorded (an older version): taken for gone, as before.
    - Same kernel and PID namespace: alive while its pid runs with the recorded start time
      (``/proc`` says so for certain; a crashed worker's restart takes over at once). This
      very process (an earlier ``Worker`` object of it) counts as gone.
    - Same kernel and network namespace, another PID namespace: an earlier container of
      this pod (a restarted container gets a new PID namespace and keeps the pod's network
      namespace, and the kubelet restarts it only once the old one has exited): gone.
    - Anywhere else: alive while its last heartbeat is younger than ``REMOTE_ALIVE_BEATS``
      of its heartbeat intervals (``default_beat`` if it recorded none).
    """
    if holder is None:
        return False
    if holder.boot is not None and holder.boot == me.boot:
        if holder.pidns is not None and holder.pidns == me.pidns:
            if holder.pid is None:
                return False
            if holder.pid == me.pid and holder.start == me.start:
                return False
            return pid_alive(holder.pid) and process_start(holder.pid) == holder.start
        if holder.netns is not None and holder.netns == me.netns:
            return False
    beat = holder.beat if holder.beat is not None and holder.beat > 0 else default_beat
    return heartbeat_age_ms < REMOTE_ALIVE_BEATS * beat * 1000


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """Another incarnation's record in ``workers``, as ``register`` found it."""

    incarnation: str
    heartbeat_age_ms: int  # 0 when not known
    host: str  # its whereabouts ('' = none recorded)
    draining: bool = False

    @classmethod
    def parse(cls, raw: str, now_ms: int | None = None) -> WorkerRecord:
        stored = StoredRecord.parse(raw)
        if stored is None:
            return cls("", 0, "")
        age = 0 if now_ms is None else stored.age_ms(now_ms)
        return cls(stored.incarnation, age, stored.host, stored.draining)

    def describe(self) -> str:
        """``pid N on host H`` (or ``incarnation X`` when no whereabouts were recorded)."""
        where = Whereabouts.parse(self.host)
        if where is not None and where.pid is not None:
            return f"pid {where.pid} on host {where.host}"
        return f"incarnation {self.incarnation}"
