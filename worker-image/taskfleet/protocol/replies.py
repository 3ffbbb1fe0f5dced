"""The parsed replies of the scripts whose answers carry more than a list of numbers.

:mod:`taskfleet.protocol.scripts` builds them from the raw replies; they are plain values,
shared by the sync and async callers.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Extended", "RawClaim", "Registered"]


@dataclass(frozen=True, slots=True)
class Extended:
    """The heartbeat's reply: ids whose token no longer matches and ids whose cancellation
    was asked for, or (``holder`` set, the pod's worker record as JSON) another
    incarnation holds the pod's name now; ``holder`` '' (a registered caller's beat): the
    name has no readable record, nothing was extended, and the caller registers again."""

    lost: set[str]
    holder: str | None = None
    cancelled: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Registered:
    """The register reply: tasks taken back from earlier incarnations; or, ``holder``
    set, the record of another incarnation than the expected one (nothing changed), with
    the server's time ``now_ms`` to judge its heartbeat by; or, ``gone_until`` set, the
    worker's pod is gone from the Kubernetes API (tombstoned until then, epoch ms):
    nothing changed, and the worker must exit."""

    requeued: int
    dead: int
    holder: str | None = None
    now_ms: int = 0
    gone_until: int | None = None


@dataclass(frozen=True, slots=True)
class RawClaim:
    """The claim reply, not yet parsed into tasks (the broker does that cheaply).

    Each record is ``id, token, attempts, max_attempts, timeout_s, lost, priority, cost,
    payload`` joined by NUL, payload last: split it with ``maxsplit=8``. ``holder`` set
    (the name's worker record as JSON): another incarnation registered under this
    worker's name since, and nothing was claimed; ``holder`` '' (a registered caller's
    claim): the name has no readable record, nothing was claimed, and the caller
    registers again.
    """

    retry_after_ms: int
    next_due_ms: int | None
    more_pending: bool
    records: list[bytes | str]
    holder: str | None = None
