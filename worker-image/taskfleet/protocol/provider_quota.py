"""Provider quotas: one limit shared by every queue, group and language that names it.

A provider limits an API key, not a queue: requests, input tokens and output tokens per
minute, sometimes concurrent requests. A provider quota is one hash on the queues' Redis
(``keys.SHARED_KEYS``) holding limits per unit over fixed windows of ``period_ms``, a
concurrency cap and a pause. A task names what its run will use
(``enqueue(..., quotas={"openai": {"requests": 1, "input_tokens": 3000}})``, stored as
its ``quotas`` field); a claim reserves that estimate (``lua/includes/pq_admit.lua``) or
leaves the task delayed until the quota can admit it, and the handler settles what the
call really used (``settle`` script). On a Redis Cluster the quota lies in a slot of its
own: the worker reserves, settles and ends each run's reservation there (``pq_run``,
``QuotaSlotOps``; docs/protocol.md 4.17). This module validates, builds the scripts'
calls and reads their replies; docs/quotas.md says how it behaves.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from taskfleet.protocol.errors import InvalidArgument, ProtocolError, StaleToken
from taskfleet.protocol.keys import (
    QueueKeys,
    provider_quota_key,
    validate_quota_name,
    validate_unit_name,
)
from taskfleet.protocol.scripts import Op
from taskfleet.protocol.signatures import (
    PqDefer,
    PqMember,
    PqRun,
    ProviderQuota,
    Settle,
    with_records,
)

__all__ = [
    "MAX_QUOTAS",
    "MAX_QUOTA_AMOUNT",
    "MAX_UNITS",
    "ProviderQuotaOps",
    "QuotaSlotOps",
    "QuotaUnit",
    "QuotaUse",
    "check_amounts",
    "defer_op",
    "quotas_json",
    "run_member",
    "settle_op",
]

T = TypeVar("T")

#: The largest amount of a unit a limit, an estimate or a settlement may name (exact in
#: a double, as Lua counts).
MAX_QUOTA_AMOUNT = 2**50
#: Most quotas a task names, and most units a quota or an estimate names: what a claim
#: reads per task stays small.
MAX_QUOTAS = 8
MAX_UNITS = 16
#: The longest window and pause (ms): a hundred years, as other pauses.
_MAX_MS = 3_153_600_000_000


@dataclass(frozen=True, slots=True)
class QuotaUnit:
    """One unit of a quota: its limit per period (0: none set) and this window's use."""

    limit: int
    used: int


@dataclass(frozen=True, slots=True)
class QuotaUse:
    """A provider quota as the scripts see it now."""

    name: str
    period_ms: int
    max_concurrency: int  # 0: no cap
    reserved: int  # runs holding a concurrency reservation now
    paused_until_ms: int  # 0: no pause
    window_ms: int  # when the current window began (epoch ms)
    reason: str  # why the pause holds ('' without one)
    units: dict[str, QuotaUnit]

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "period_ms": self.period_ms,
            "max_concurrency": self.max_concurrency,
            "reserved": self.reserved,
            "paused_until_ms": self.paused_until_ms,
            "window_ms": self.window_ms,
            "reason": self.reason,
            "units": {u: {"limit": v.limit, "used": v.used} for u, v in self.units.items()},
        }


def _amount(value: Any, what: str, *, positive: bool) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, not {value!r}")
    low = 1 if positive else 0
    if not low <= value <= MAX_QUOTA_AMOUNT:
        raise InvalidArgument(f"{what} must be {low}..{MAX_QUOTA_AMOUNT}, not {value}")
    return value


def check_amounts(units: Any, what: str, *, positive: bool) -> dict[str, int]:
    """``units`` ({unit: int}) checked: valid unit names, ints in range."""
    if not isinstance(units, Mapping) or not units:
        raise InvalidArgument(f"{what} must be a non-empty mapping of unit -> int, not {units!r}")
    if len(units) > MAX_UNITS:
        raise InvalidArgument(f"{what} names {len(units)} units, at most {MAX_UNITS}")
    out: dict[str, int] = {}
    for unit, value in units.items():
        try:
            validate_unit_name(unit)
        except ValueError as e:
            raise InvalidArgument(str(e)) from None
        out[unit] = _amount(value, f"{what}[{unit!r}]", positive=positive)
    return out


def quotas_json(quotas: Any) -> str:
    """An enqueue's ``quotas`` ({name: {unit: int >= 0}}) checked, as the task stores it
    ('' for None or empty)."""
    if quotas is None:
        return ""
    if not isinstance(quotas, Mapping):
        raise InvalidArgument(f"quotas must be a mapping of quota name -> units, not {quotas!r}")
    if len(quotas) > MAX_QUOTAS:
        raise InvalidArgument(f"a task names {len(quotas)} quotas, at most {MAX_QUOTAS}")
    out: dict[str, dict[str, int]] = {}
    for name, units in quotas.items():
        try:
            validate_quota_name(name)
        except ValueError as e:
            raise InvalidArgument(str(e)) from None
        out[name] = check_amounts(units, f"quotas[{name!r}]", positive=False)
    return json.dumps(out, separators=(",", ":"), sort_keys=True) if out else ""


def _use(name: str, raw: Any) -> QuotaUse | None:
    if raw == []:
        return None
    if not isinstance(raw, list) or len(raw) < 6 or (len(raw) - 6) % 3:
        raise ProtocolError(f"provider_quota: unexpected reply {raw!r}")

    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    units = {
        text(raw[i]): QuotaUnit(int(raw[i + 1]), int(raw[i + 2])) for i in range(6, len(raw), 3)
    }
    return QuotaUse(
        name, int(raw[0]), int(raw[1]), int(raw[2]), int(raw[3]), int(raw[4]), text(raw[5]), units
    )


def _quota_name(name: str) -> str:
    try:
        return validate_quota_name(name)
    except ValueError as e:
        raise InvalidArgument(str(e)) from None


class ProviderQuotaOps:
    """The ``provider_quota`` script's calls for one quota, sent with the quota's hash as
    their one key (a Redis Cluster routes them to its slot; the script binds the shared
    keys itself)."""

    def __init__(self, name: str) -> None:
        self.name = _quota_name(name)
        self._keys = (provider_quota_key(self.name),)

    def _op(self, args: ProviderQuota) -> Op[QuotaUse | None]:
        return Op("provider_quota", self._keys, args, lambda raw: _use(self.name, raw))

    def configure(
        self, limits: Mapping[str, int], period_ms: int, max_concurrency: int | None
    ) -> Op[QuotaUse | None]:
        checked = check_amounts(limits, "limits", positive=True)
        if isinstance(period_ms, bool) or not isinstance(period_ms, int):
            raise InvalidArgument(f"the period must be a number of ms, not {period_ms!r}")
        if not 1 <= period_ms <= _MAX_MS:
            raise InvalidArgument(f"the period must be 1 ms..100 years, not {period_ms} ms")
        conc = 0
        if max_concurrency is not None:
            conc = _amount(max_concurrency, "max_concurrency", positive=True)
        return self._op(
            ProviderQuota(
                op="configure",
                name=self.name,
                limits=json.dumps(checked, separators=(",", ":"), sort_keys=True),
                period_ms=period_ms,
                max_concurrency=conc,
            )
        )

    def get(self) -> Op[QuotaUse | None]:
        return self._op(ProviderQuota(op="get", name=self.name))

    def pause(self, pause_ms: int, reason: str = "") -> Op[QuotaUse | None]:
        if (
            isinstance(pause_ms, bool)
            or not isinstance(pause_ms, int)
            or not 0 <= pause_ms <= _MAX_MS
        ):
            raise InvalidArgument(f"a pause must be 0..100 years in ms, not {pause_ms!r}")
        return self._op(
            ProviderQuota(op="pause", name=self.name, pause_ms=pause_ms, reason=str(reason)[:200])
        )

    def resume(self) -> Op[QuotaUse | None]:
        return self._op(ProviderQuota(op="resume", name=self.name))


def run_member(keys: QueueKeys, task_id: str, token: str) -> str:
    """A run's name in a quota's slot (``pq_run``): its task's key, NUL, its claim token."""
    return f"{keys.task(task_id)}\0{token}"


class QuotaSlotOps:
    """The ``pq_run`` script's calls for one quota: runs of queues in other slots of a
    Redis Cluster reserve, settle and end there. Sent with the quota's hash as the key."""

    def __init__(self, name: str) -> None:
        self.name = _quota_name(name)
        #: the key whose slot its calls go to (a client pinned to that slot's master)
        self.route = provider_quota_key(self.name)
        self._keys = (self.route,)

    def _op(self, head: PqRun, members: Sequence[str], decode: Callable[[Any], T]) -> Op[T]:
        args = with_records(head._replace(n=len(members)), (PqMember(m) for m in members))
        return Op("pq_run", self._keys, args, decode)

    def reserve(self, member: str, units_json: str, lease_ms: int) -> Op[int]:
        """0 reserved; > 0: ms to wait (the run must not start); -2: no such quota."""
        head = PqRun("reserve", self.name, lease_ms, units_json, "", 1)
        return self._op(head, [member], int)

    def settle(self, member: str, used: Mapping[str, int]) -> Op[int]:
        """1 settled; 0 no such reservation (the run ended or was lost); -2 no such quota."""
        checked = check_amounts(used, "settle", positive=False)
        units = json.dumps(checked, separators=(",", ":"), sort_keys=True)
        return self._op(PqRun("settle", self.name, "", units, "", 1), [member], int)

    def extend(self, members: Sequence[str], lease_ms: int) -> Op[int]:
        return self._op(PqRun("extend", self.name, lease_ms, "", "", 0), members, int)

    def end(self, members: Sequence[str], *, refund: bool) -> Op[int]:
        head = PqRun("end", self.name, "", "", 1 if refund else 0, 0)
        return self._op(head, members, int)


def defer_op(keys: QueueKeys, task_id: str, token: str, wait_ms: int, name: str) -> Op[bool]:
    """A claimed task whose quota (on its own slot) could not reserve: back to delayed
    for ``wait_ms``, not an attempt. False: the token no longer holds it."""
    args = PqDefer(task_id, token, wait_ms, name)
    return Op("pq_defer", keys.script("pq_defer"), args, lambda raw: int(raw) == 1)


def settle_op(
    keys: QueueKeys, task_id: str, token: str, name: str, used: Mapping[str, int]
) -> Op[bool]:
    """A run's settlement of what it really used of quota ``name``: True when settled;
    False when the quota lies in another slot (a Redis Cluster: settle with
    ``QuotaSlotOps.settle``, nothing written). Raises ``StaleToken`` when another run
    holds the task, ``InvalidArgument`` when the task names no such quota or the quota
    does not exist."""
    try:
        validate_quota_name(name)
    except ValueError as e:
        raise InvalidArgument(str(e)) from None
    checked = check_amounts(used, "settle", positive=False)

    def decode(raw: Any) -> bool:
        code = int(raw)
        if code == -3:
            return False
        if code == 0:
            raise StaleToken(task_id)
        if code == -1:
            raise InvalidArgument(f"task {task_id} names no quota {name!r} (enqueue(..., quotas=))")
        if code == -2:
            raise InvalidArgument(f"no provider quota {name!r}: configure it first")
        return True

    args = Settle(task_id, token, name, json.dumps(checked, separators=(",", ":"), sort_keys=True))
    return Op("settle", keys.script("settle"), args, decode)
