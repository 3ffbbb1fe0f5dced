"""The parsed replies of the scripts whose answers carry more than a list of numbers.

:mod:`taskfleet.protocol.scripts` builds them from the raw replies; they are plain values,
shared by the sync and async callers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from taskfleet.protocol.errors import ProtocolError
from taskfleet.protocol.records import text

__all__ = [
    "SWEEP_BOUND",
    "SWEEP_EXPIRE_SHARE",
    "Extended",
    "RawClaim",
    "Registered",
    "RepairResult",
    "SweepResult",
    "applied_codes",
    "ints",
    "raw_claim",
    "repair_result",
]

#: Most tasks a sweep call handles per step; call again while a step is full.
SWEEP_BOUND = 1000
#: A sweep expires at most ``bound // SWEEP_EXPIRE_SHARE`` tasks per call (an expired task
#: costs a read and a write of its record: a step of ``bound`` of them would be a long
#: call); sweep.lua's ``EXPIRE_SHARE``.
SWEEP_EXPIRE_SHARE = 10


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


@dataclass(frozen=True, slots=True)
class SweepResult:
    promoted: int
    expired: int
    requeued: int
    lost_dead: int
    pruned_done: int
    pruned_dead: int
    workers_dropped: int
    pruned_cancelled: int = 0

    def saturated(self, bound: int = SWEEP_BOUND) -> bool:
        """A step hit the bound: there may be more to do, call again."""
        return self.expired >= max(1, bound // SWEEP_EXPIRE_SHARE) or (
            max(
                self.promoted,
                self.requeued + self.lost_dead,
                self.pruned_done,
                self.pruned_dead,
                self.pruned_cancelled,
            )
            >= bound
        )


@dataclass(frozen=True, slots=True)
class RepairResult:
    """One repair call: where the next call starts (0 once the pass is over) and the tasks
    it resolved, each with the state it left in."""

    cursor: int
    more: bool
    repaired: tuple[tuple[str, str], ...]


def repair_result(raw: Any) -> RepairResult:
    if not isinstance(raw, list) or len(raw) < 2 or len(raw) % 2:
        raise ProtocolError(f"repair: unexpected reply {raw!r}")
    items = [text(x) for x in raw[2:]]
    pairs = tuple((items[i], items[i + 1]) for i in range(0, len(items), 2))
    return RepairResult(int(raw[0]), bool(int(raw[1])), pairs)


def raw_claim(raw: Any, script: str) -> RawClaim:
    if isinstance(raw, list) and len(raw) == 2 and int(raw[0]) == -1:
        return RawClaim(0, None, False, [], holder=text(raw[1]))  # superseded: nothing claimed
    if not isinstance(raw, list) or len(raw) < 3:
        raise ProtocolError(f"{script}: unexpected claim reply {raw!r}")
    due = int(raw[1])
    return RawClaim(int(raw[0]), None if due < 0 else due, int(raw[2]) == 1, raw[3:])


def applied_codes(raw: Any) -> list[int]:
    return [int(c) for c in text(raw)]


def ints(raw: Any, n: int, script: str) -> list[int]:
    if not isinstance(raw, list) or len(raw) != n:
        raise ProtocolError(f"{script}: unexpected reply {raw!r}")
    return [int(x) for x in raw]
