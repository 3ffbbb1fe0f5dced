"""What a Redis error means for the caller: one pure function, ``classify``.

Every loop of the worker (and anything else that talks to Redis in a loop) asks this
module, on its error path only, what an exception from a Redis call is, and does what
its ``Policy`` says:

- ``WAIT``: Redis can't serve us right now (unreachable, busy running a script, loading
  its data set, full, a replica, a cluster in motion...). Stop claiming, keep what is
  held, probe with backoff, resume when it answers. Nothing about the request was wrong.
- ``STOP``: Redis refuses our credentials or our rights (a rotated password, an ACL
  change). No retry mends it: exit with a one-line configuration error.
- ``FAIL_TASK``: Redis refused the request itself (a script error, a wrong type, a value
  too large). Retrying it can't help; where the request was about one task, that task
  fails; where it was not, the loop that made it stops the worker loudly.

Not a Redis error at all: ``None`` (a bug: the caller lets it go up).

Error replies are told apart by redis-py's exception class where it has one, else by
the reply's error code (its first word), so a reply redis-py maps to no class of its own
(``BUSY``, ``MISCONF``, ``NOREPLICAS``...) is still classified.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import redis.exceptions as rx

from taskfleet.protocol.errors import auth_failure

__all__ = ["REDIS_ERRORS", "Fault", "Policy", "RedisFault", "classify", "code_fault"]

#: Every exception a Redis call can raise: what a loop catches before classifying.
#: (The builtin ConnectionError and TimeoutError are OSErrors.)
REDIS_ERRORS: tuple[type[BaseException], ...] = (rx.RedisError, OSError)


class Policy(enum.Enum):
    WAIT = "wait"
    STOP = "stop"
    FAIL_TASK = "fail task"


class Fault(enum.Enum):
    """One class of Redis trouble; its value is what logs and metrics say."""

    UNREACHABLE = "unreachable"  # refused, reset or timed-out connections
    BUSY = "busy"  # a script or function running past busy-reply-threshold
    LOADING = "loading"  # a restarted server reading its AOF/RDB
    FULL = "full"  # OOM: maxmemory reached under noeviction
    MISCONF = "misconf"  # writes stopped after a failed RDB save
    NOREPLICAS = "noreplicas"  # fewer replicas than min-replicas-to-write
    READONLY = "readonly"  # a replica (a failover under way, or pointed at one)
    MASTERDOWN = "masterdown"  # a replica that lost its master (replica-serve-stale-data no)
    CLUSTERDOWN = "clusterdown"  # a cluster electing a master or missing a slot
    TRYAGAIN = "tryagain"  # a multi-key call during a slot migration
    MOVED = "moved"  # the slot moved (MOVED/ASK)
    NOSCRIPT = "noscript"  # the script cache flushed between our load and our call
    AUTH = "auth"  # NOAUTH, WRONGPASS: the credentials are refused
    PERMISSION = "permission"  # NOPERM: the user may not run a command or touch a key
    REFUSED = "refused"  # any other error reply: the request itself is wrong


@dataclass(frozen=True)
class RedisFault:
    fault: Fault
    policy: Policy

    @property
    def writes_refused(self) -> bool:
        """Redis answers reads but refuses writes (full, its persistence failing, or a
        replica): a read alone can't tell that the outage is over."""
        return self.fault in _WRITES_REFUSED


_WRITES_REFUSED = frozenset({Fault.FULL, Fault.MISCONF, Fault.NOREPLICAS, Fault.READONLY})
#: What to do about each refusal of writes, for the log line that says so.
WHAT_TO_DO = {
    Fault.FULL: "Redis is full (maxmemory): raise maxmemory or free memory",
    Fault.MISCONF: "Redis can't save its RDB snapshot: fix its disk (see its log)",
    Fault.NOREPLICAS: "fewer replicas than min-replicas-to-write are connected",
    Fault.READONLY: "the server is a replica now (a failover?): point workers at the master",
}

#: Error codes (the first word of an error reply) of faults to wait out.
_BY_CODE: dict[str, Fault] = {
    "BUSY": Fault.BUSY,
    "UNKILLABLE": Fault.BUSY,  # a script that wrote can't be killed: BUSY until SHUTDOWN
    "LOADING": Fault.LOADING,
    "OOM": Fault.FULL,
    "MISCONF": Fault.MISCONF,
    "NOREPLICAS": Fault.NOREPLICAS,
    "READONLY": Fault.READONLY,
    "MASTERDOWN": Fault.MASTERDOWN,
    "CLUSTERDOWN": Fault.CLUSTERDOWN,
    "TRYAGAIN": Fault.TRYAGAIN,
    "MOVED": Fault.MOVED,
    "ASK": Fault.MOVED,
    "NOSCRIPT": Fault.NOSCRIPT,
    "UNBLOCKED": Fault.UNREACHABLE,  # CLIENT UNBLOCK ... ERROR, or a failover's unblocking
}

#: redis-py's classes, most specific first (BusyLoadingError is a ConnectionError,
#: MasterDownError a ClusterDownError, MovedError an AskError).
_BY_CLASS: tuple[tuple[type[BaseException], Fault], ...] = (
    (rx.BusyLoadingError, Fault.LOADING),
    (rx.OutOfMemoryError, Fault.FULL),
    (rx.ReadOnlyError, Fault.READONLY),
    (rx.MasterDownError, Fault.MASTERDOWN),
    (rx.ClusterDownError, Fault.CLUSTERDOWN),
    (rx.TryAgainError, Fault.TRYAGAIN),
    (rx.AskError, Fault.MOVED),
    (rx.NoScriptError, Fault.NOSCRIPT),
    (rx.ClusterError, Fault.CLUSTERDOWN),  # redis-py's cluster client out of retries
    (rx.ConnectionError, Fault.UNREACHABLE),
    (rx.TimeoutError, Fault.UNREACHABLE),
    (OSError, Fault.UNREACHABLE),
)


def classify(exc: BaseException) -> RedisFault | None:
    """What ``exc`` from a Redis call means, or None if it is no Redis error."""
    auth = auth_failure(exc)
    if auth is not None:
        return RedisFault(Fault.AUTH if auth == "authentication" else Fault.PERMISSION, Policy.STOP)
    for cls, fault in _BY_CLASS:
        if isinstance(exc, cls):
            return RedisFault(fault, Policy.WAIT)
    if isinstance(exc, rx.ResponseError):
        code = _code(exc)
        waited = _BY_CODE.get(code)
        if waited is None and code == "ERR":
            waited = _in_script(str(exc))
        if waited is not None:
            return RedisFault(waited, Policy.WAIT)
        return RedisFault(Fault.REFUSED, Policy.FAIL_TASK)
    if isinstance(exc, rx.RedisError):
        # redis-py's own complaints (DataError, InvalidResponse, ...): a reply it could
        # not read is a broken connection; a value it could not send is the request.
        if isinstance(exc, rx.InvalidResponse):
            return RedisFault(Fault.UNREACHABLE, Policy.WAIT)
        return RedisFault(Fault.REFUSED, Policy.FAIL_TASK)
    return None


def code_fault(code: str) -> Fault | None:
    """The fault an error reply's code (its first word) names, or None for any other
    code: credentials or rights refused (``AUTH``, ``PERMISSION``), else one to wait
    out. For a caller that reads the code itself (the operator unwraps a pipeline's
    error first); ``classify`` takes the exception."""
    if code in ("NOAUTH", "WRONGPASS"):
        return Fault.AUTH
    if code == "NOPERM":
        return Fault.PERMISSION
    return _BY_CODE.get(code)


def _code(exc: BaseException) -> str:
    text = str(exc)
    return text.split(" ", 1)[0] if text else ""


def _in_script(text: str) -> Fault | None:
    """A fault reported from inside a script (Redis before 7.0 wraps the error reply of a
    ``redis.call`` as ``ERR Error running script ...: -OOM ...``)."""
    marker = ": -"
    at = text.find(marker)
    if at < 0:
        return None
    return _BY_CODE.get(text[at + len(marker) :].split(" ", 1)[0])


#: A write script that writes nothing: Redis 7 refuses a script declared with flags
#: (``#!lua``) and without ``no-writes`` up front when it refuses writes (OOM under
#: ``noeviction``, MISCONF, NOREPLICAS, a replica), so this asks "would a write pass now?"
#: at no cost. Declared with the queue's key so a cluster routes it to the queue's slot.
WRITABLE_PROBE = "#!lua\nreturn 1"
