"""Redis servers in trouble, one record per server: what each error reply means, which
servers are parked, and the one probe per parked server that brings its queues back.

A queue's Redis is a connection target (its resolved URL: host, port, database and
credentials). When any call to it fails with a fault of the server, not of the call
(`classify`), the target is *parked*: every queue on it stops touching Redis (its sweep,
fast path, autoscaler and housekeeping return at once), and one probe per target, with
backoff (`PROBE_FIRST_S` doubling up to `PROBE_MAX_S`), asks whether it answers again.
When it does, every queue on it resumes together. So 1,000 queues on a Redis that
refuses the password cost one connection attempt per backoff step, not 1,000 per
sweep interval, and no thread waits on that server's timeouts but the probe's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import redis
from redis.cluster import RedisCluster
from taskfleet.protocol import faults

__all__ = [
    "PROBE_FIRST_S",
    "PROBE_MAX_S",
    "Fault",
    "Outages",
    "ServerParked",
    "classify",
    "probe",
]

#: The first probe of a parked server, and the longest wait between two.
PROBE_FIRST_S = 1.0
PROBE_MAX_S = 30.0

Key = tuple[str, str]  # (namespace, name)
#: What a fault asks of the operator: fix the configuration, wait, or wait for room /
#: for a failover to end. Every one parks the server; the kind says why in the docs.
Kind = Literal["configuration", "unreachable", "wait", "writes_refused", "failover"]


class Fault(NamedTuple):
    """A server fault: the TaskQueue condition's reason, what to do, and a message."""

    reason: str
    kind: Kind
    message: str


# What each server fault means here -> (reason, kind, what it means). Which fault an
# error is comes from the worker's classifier (taskfleet.protocol.faults, the one source
# of it); a fault not listed (MISCONF, NOREPLICAS, MOVED, NOSCRIPT, a refused request)
# fails the one call, not the server.
_MEANINGS: dict[faults.Fault, tuple[str, Kind, str]] = {
    faults.Fault.AUTH: ("RedisAuthRefused", "configuration", "Redis refuses the credentials"),
    faults.Fault.PERMISSION: (
        "RedisAuthRefused",
        "configuration",
        "Redis denies this user a command",
    ),
    faults.Fault.BUSY: ("RedisBusy", "wait", "Redis is busy running a script"),
    faults.Fault.LOADING: ("RedisLoading", "wait", "Redis is loading its data set"),
    faults.Fault.MASTERDOWN: ("RedisMasterDown", "wait", "the replica has lost its master"),
    faults.Fault.TRYAGAIN: ("RedisTryAgain", "wait", "the cluster is moving a slot"),
    faults.Fault.CLUSTERDOWN: ("RedisClusterDown", "wait", "the cluster is down"),
    faults.Fault.FULL: (
        "RedisOutOfMemory",
        "writes_refused",
        "Redis is full (maxmemory): writes refused",
    ),
    faults.Fault.READONLY: (
        "RedisReadOnly",
        "failover",
        "Redis is a read-only replica (a failover)",
    ),
    faults.Fault.UNREACHABLE: ("RedisUnreachable", "unreachable", "cannot reach Redis"),
}


def _first_word(error: BaseException) -> str:
    # redis-py strips the prefix of the replies it maps to a class of its own (keeping
    # it as ``status_code`` from redis-py 8); the text keeps it for the others.
    code = getattr(error, "status_code", None)
    if isinstance(code, str) and code:
        return code
    text = str(error).lstrip()
    # A pipeline's error names the command first: "Command # 1 (...) of pipeline caused
    # error: BUSY ...".
    _, found, reply = text.partition(" caused error: ")
    if found:
        text = reply.lstrip()
    return text.split(" ", 1)[0] if text else ""


def classify(error: BaseException, describe: str) -> Fault | None:
    """The server fault ``error`` is, or None when it is the one call's own (a script
    error, a wrong type, NOSCRIPT, which the script runner reloads): that fails the call,
    not the server. ``describe`` is the error's text with secrets masked."""
    fault = faults.code_fault(_first_word(error))
    if fault is None:
        found = faults.classify(error)
        fault = None if found is None else found.fault
    meaning = _MEANINGS.get(fault) if fault is not None else None
    if meaning is None:
        return None
    reason, kind, text = meaning
    return Fault(reason, kind, f"{text}: {describe}")


class ServerParked(redis.ConnectionError):
    """Raised instead of calling a parked server: the probe tells when it answers again.
    A `redis.RedisError`, so every caller that waits out an outage waits this one out."""

    def __init__(self, fault: Fault) -> None:
        super().__init__(fault.message)
        self.fault = fault


@dataclass
class _Parked:
    fault: Fault
    url: str  # to probe with; never logged
    since: float
    backoff_s: float
    next_probe: float
    probing: bool = False
    probes: int = 0
    queues: set[Key] = field(default_factory=set)


class Outages:
    """The parked servers, by target (the digest of the resolved URL). Thread-safe: the
    sweeps, the fast path and the probe loop all report here."""

    def __init__(self, first_s: float = PROBE_FIRST_S, max_s: float = PROBE_MAX_S) -> None:
        self._lock = threading.Lock()
        self._parked: dict[str, _Parked] = {}
        self._first_s, self._max_s = first_s, max_s
        self._on_park: Callable[[], None] | None = None

    def on_park(self, notify: Callable[[], None] | None) -> None:
        """Call ``notify`` (from the parking thread, outside the lock) each time a server
        is newly parked: the probe loop sleeps until a probe is due or this says one
        will be. None: no longer."""
        self._on_park = notify

    def fault(self, target: str, key: Key | None = None) -> Fault | None:
        """The fault the target is parked for (``key`` noted as one of its queues)."""
        with self._lock:
            parked = self._parked.get(target)
            if parked is None:
                return None
            if key is not None:
                parked.queues.add(key)
            return parked.fault

    def park(self, target: str, url: str, fault: Fault, key: Key | None = None) -> bool:
        """Park ``target`` (or update its fault); True when it was not parked before."""
        now = time.monotonic()
        with self._lock:
            parked = self._parked.get(target)
            new = parked is None
            if parked is None:
                parked = self._parked[target] = _Parked(
                    fault, url, now, self._first_s, now + self._first_s
                )
            else:
                parked.fault = fault
            if key is not None:
                parked.queues.add(key)
        notify = self._on_park
        if new and notify is not None:
            notify()
        return new

    def next_probe_in(self) -> float | None:
        """Seconds until the earliest probe not in flight is due (0 or less: due now);
        None when no parked server waits for one."""
        with self._lock:
            times = [p.next_probe for p in self._parked.values() if not p.probing]
        return None if not times else min(times) - time.monotonic()

    def due(self) -> list[tuple[str, str, Fault]]:
        """The targets whose probe is due (marked in flight: one probe per target)."""
        now = time.monotonic()
        with self._lock:
            found = []
            for target, parked in self._parked.items():
                if not parked.probing and parked.next_probe <= now:
                    parked.probing = True
                    found.append((target, parked.url, parked.fault))
            return found

    def probed(self, target: str, fault: Fault | None) -> set[Key] | None:
        """Record a probe: ``fault`` None resumes the target (its queues are returned);
        else the next probe waits twice as long (up to the bound)."""
        with self._lock:
            parked = self._parked.get(target)
            if parked is None:
                return set()
            parked.probing, parked.probes = False, parked.probes + 1
            if fault is None:
                del self._parked[target]
                return parked.queues
            parked.fault = fault
            parked.backoff_s = min(parked.backoff_s * 2, self._max_s)
            parked.next_probe = time.monotonic() + parked.backoff_s
            return None

    def release(self, target: str, keys: set[Key]) -> None:
        """``keys`` left ``target`` (their URL changed: a rotated Secret)."""
        with self._lock:
            parked = self._parked.get(target)
            if parked is not None:
                parked.queues -= keys

    def queues(self) -> dict[str, set[Key]]:
        with self._lock:
            return {target: set(p.queues) for target, p in self._parked.items()}

    def targets(self) -> set[str]:
        with self._lock:
            return set(self._parked)


def probe(client: redis.Redis | RedisCluster, fault: Fault) -> None:
    """Whether a parked server serves again; raises what it answers otherwise.

    A PING covers what refuses every command (credentials, unreachable, BUSY, LOADING;
    AUTH runs at connect); a full Redis still answers PING, so OOM asks INFO whether
    there is room, and READONLY whether this server is a master again."""
    client.ping()
    if fault.kind == "writes_refused":
        memory = client.info("memory")
        limit, used = int(memory.get("maxmemory", 0)), int(memory.get("used_memory", 0))
        if limit and used >= limit:
            raise redis.OutOfMemoryError("OOM used_memory is at maxmemory")
    elif fault.kind == "failover":
        role = client.info("replication").get("role")
        if role != "master":
            raise redis.ReadOnlyError(f"READONLY the server is a {role}")
