"""Provider quotas: one limit shared by every queue, group and language that names it.

A provider limits an API key, not a queue: requests, input tokens and output tokens per
minute, sometimes concurrent requests. A provider quota is one hash on the queues' Redis
(``keys.SHARED_KEYS``) holding limits per unit over fixed windows of ``period_ms``, a
concurrency cap and a pause. A task names what its run will use
(``enqueue(..., quotas={"openai": {"requests": 1, "input_tokens": 3000}})``, stored as
its ``quotas`` field); a claim reserves that estimate (``lua/includes/pq_admit.lua``) or
leaves the task delayed until the quota can admit it, and the handler settles what the
call really used (``settle`` script). This module validates, builds the two scripts'
calls and reads their replies; docs/quotas.md says how it behaves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from taskfleet.protocol.errors import InvalidArgument, ProtocolError, StaleToken
from taskfleet.protocol.keys import QueueKeys, validate_quota_name, validate_unit_name
from taskfleet.protocol.scripts import Op
from taskfleet.protocol.signatures import ProviderQuota, Settle

__all__ = [
    "MAX_QUOTAS",
    "MAX_QUOTA_AMOUNT",
    "MAX_UNITS",
    "ProviderQuotaOps",
    "QuotaUnit",
    "QuotaUse",
    "check_amounts",
    "quotas_json",
    "settle_op",
]

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


class ProviderQuotaOps:
    """The ``provider_quota`` script's calls for one quota (no queue's keys: it binds the
    shared ones itself)."""

    def __init__(self, name: str) -> None:
        try:
            self.name = validate_quota_name(name)
        except ValueError as e:
            raise InvalidArgument(str(e)) from None

    def _op(self, args: ProviderQuota) -> Op[QuotaUse | None]:
        return Op("provider_quota", (), args, lambda raw: _use(self.name, raw))

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


def settle_op(
    keys: QueueKeys, task_id: str, token: str, name: str, used: Mapping[str, int]
) -> Op[None]:
    """A run's settlement of what it really used of quota ``name``. Raises ``StaleToken``
    when another run holds the task, ``InvalidArgument`` when the task names no such
    quota or the quota does not exist."""
    try:
        validate_quota_name(name)
    except ValueError as e:
        raise InvalidArgument(str(e)) from None
    checked = check_amounts(used, "settle", positive=False)

    def decode(raw: Any) -> None:
        code = int(raw)
        if code == 0:
            raise StaleToken(task_id)
        if code == -1:
            raise InvalidArgument(f"task {task_id} names no quota {name!r} (enqueue(..., quotas=))")
        if code == -2:
            raise InvalidArgument(f"no provider quota {name!r}: configure it first")

    args = Settle(task_id, token, name, json.dumps(checked, separators=(",", ":"), sort_keys=True))
    return Op("settle", keys.script("settle"), args, decode)
