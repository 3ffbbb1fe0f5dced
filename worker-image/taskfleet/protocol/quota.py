"""A queue's claim pause and spend budget: the ``quota`` script's calls and the hash read.

When a handler meets a provider's rate limit (``RateLimited``), the whole fleet stops
claiming the queue's tasks until the pause ends (``fail`` with ``throttle``, or the
``quota`` script's ``pause``); a spend budget per UTC day and month stops claims once
the period's cost is spent. Both live in one hash per queue (``quota``), which every
claim reads once; the Lua is in ``lua/includes/quota_*.lua``. This module builds the
``quota`` script's calls and reads the hash back for people (stats, the CLI, the
operator's status and metrics).
"""

from __future__ import annotations

import calendar
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from taskfleet.protocol.calls import Call, one
from taskfleet.protocol.errors import InvalidArgument, OlderWorker, ProtocolError
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import hash_of, number, text
from taskfleet.protocol.scripts import Op
from taskfleet.protocol.signatures import Quota

__all__ = ["BudgetLimit", "QuotaOps", "QuotaState", "period_of", "quota_state"]

#: A run-time budget setting: an int >= 0 (0: none), "default" (the config's), None (kept).
BudgetLimit = int | Literal["default"] | None

#: The quota hash's fields (lua/includes/quota_state.lua, quota_pause.lua, quota_budget.lua).
QUOTA_FIELDS = (
    "until",
    "streak",
    "pause_ms",
    "reason",
    "at",
    "pauses",
    "day_limit",
    "month_limit",
    "day",
    "day_spent",
    "month",
    "month_spent",
)


def period_of(now_ms: int) -> tuple[str, int, str, int]:
    """The UTC day and month ``now_ms`` falls in and when each ends (ms), as the scripts
    compute them: ('YYYY-MM-DD', day end, 'YYYY-MM', month end)."""
    moment = datetime.fromtimestamp(now_ms / 1000, UTC)
    day_start = datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
    day_end = int(day_start.timestamp() * 1000) + 86_400_000
    days = calendar.monthrange(moment.year, moment.month)[1]
    month_end = int(datetime(moment.year, moment.month, 1, tzinfo=UTC).timestamp() * 1000)
    month_end += days * 86_400_000
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}",
        day_end,
        f"{moment.year:04d}-{moment.month:02d}",
        month_end,
    )


@dataclass(frozen=True, slots=True)
class QuotaState:
    """The queue's claim pause and budget as of ``now_ms`` (server time)."""

    now_ms: int
    paused_until_ms: int  # 0: no pause
    streak: int  # rate limits in a row without a retry-after (the adaptive pause's doublings)
    pause_ms: int  # the last pause's length
    reason: str  # why the last pause began
    pauses: int  # pauses ever begun
    day_limit: int  # 0: no daily budget
    month_limit: int
    day: str
    day_spent: int
    day_end_ms: int
    month: str
    month_spent: int
    month_end_ms: int
    day_override: bool  # the limits come from a run-time setting, not the config
    month_override: bool

    @property
    def paused(self) -> bool:
        return self.paused_until_ms > self.now_ms

    @property
    def pause_left_ms(self) -> int:
        return max(0, self.paused_until_ms - self.now_ms)

    @property
    def day_left(self) -> int | None:
        return None if self.day_limit <= 0 else max(0, self.day_limit - self.day_spent)

    @property
    def month_left(self) -> int | None:
        return None if self.month_limit <= 0 else max(0, self.month_limit - self.month_spent)

    @property
    def budget_spent(self) -> bool:
        """Whether a budget holds claims back now (a period's spend reached its limit)."""
        day, month = self.day_left, self.month_left
        return day == 0 or month == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "paused": self.paused,
            "paused_until_ms": self.paused_until_ms if self.paused else 0,
            "pause_left_ms": self.pause_left_ms,
            "streak": self.streak,
            "pause_ms": self.pause_ms,
            "reason": self.reason,
            "pauses": self.pauses,
            "budget": {
                "day": {
                    "period": self.day,
                    "limit": self.day_limit or None,
                    "spent": self.day_spent,
                    "left": self.day_left,
                    "resets_at_ms": self.day_end_ms,
                    "runtime": self.day_override,
                },
                "month": {
                    "period": self.month,
                    "limit": self.month_limit or None,
                    "spent": self.month_spent,
                    "left": self.month_left,
                    "resets_at_ms": self.month_end_ms,
                    "runtime": self.month_override,
                },
            },
        }


def _int(raw: str | None) -> int:
    value = number(raw)
    return int(value) if value is not None else 0


def quota_state(
    raw: Mapping[str, str], now_ms: int, *, budget_day: int | None, budget_month: int | None
) -> QuotaState:
    """The quota hash ``raw`` read as the scripts read it; ``budget_*``: the config's."""
    day, day_end, month, month_end = period_of(now_ms)
    day_set = number(raw.get("day_limit"))
    month_set = number(raw.get("month_limit"))
    return QuotaState(
        now_ms=now_ms,
        paused_until_ms=_int(raw.get("until")),
        streak=_int(raw.get("streak")),
        pause_ms=_int(raw.get("pause_ms")),
        reason=raw.get("reason", ""),
        pauses=_int(raw.get("pauses")),
        day_limit=int(day_set) if day_set is not None else (budget_day or 0),
        month_limit=int(month_set) if month_set is not None else (budget_month or 0),
        day=day,
        day_spent=_int(raw.get("day_spent")) if raw.get("day") == day else 0,
        day_end_ms=day_end,
        month=month,
        month_spent=_int(raw.get("month_spent")) if raw.get("month") == month else 0,
        month_end_ms=month_end,
        day_override=day_set is not None,
        month_override=month_set is not None,
    )


def _limit(name: str, value: BudgetLimit) -> str:
    if value is None:
        return ""
    if value == "default":
        return "default"
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**9:
        raise InvalidArgument(f"{name} must be an int within 0..1000000000 or 'default'")
    return str(value)


class QuotaOps:
    """The ``quota`` script's calls, and the read of the hash, for one queue, or for one
    group of it (``group``: its own pause and budget, kept in the group's hash)."""

    def __init__(self, keys: QueueKeys, group: str = "") -> None:
        self._k = keys
        self._group = group

    def read(self) -> Call[dict[str, str]]:
        """The raw quota hash (``quota_state`` reads it with the config and the clock); a
        group's hash also holds its settings, which ``quota_state`` ignores."""
        key = self._k.group(self._group) if self._group else self._k.quota
        return one(("HGETALL", key), hash_of)

    def _op(self, args: Quota) -> Op[tuple[int, int]]:
        def decode(raw: Any) -> tuple[int, int]:
            if isinstance(raw, list) and (refused := OlderWorker.refused(self._k.queue, raw)):
                raise refused
            if not isinstance(raw, list) or len(raw) != 2:
                raise ProtocolError(f"quota: unexpected reply {raw!r}")
            return int(raw[0]), int(raw[1])

        return Op("quota", self._k.script("quota"), args, decode)

    def pause(
        self, pause_ms: int | None, reason: str = "", *, task_id: str = "", reporter: str = ""
    ) -> Op[tuple[int, int]]:
        """Nobody claims for ``pause_ms`` (None: the adaptive pause). Reply (until, streak).
        ``task_id`` (for a queue's ops): pause that task's group, or the queue if it has none.
        ``reporter``: the worker whose handler reports its quota spent; '' (a producer or the
        CLI): ``OlderWorker`` while a live worker of an older release serves the queue."""
        if pause_ms is not None and (
            isinstance(pause_ms, bool)
            or not isinstance(pause_ms, int)
            or not 0 <= pause_ms <= 3_153_600_000_000
        ):
            raise InvalidArgument(f"a pause must be 0..100 years in ms, not {pause_ms!r}")
        args = Quota(
            op="pause",
            pause_ms="" if pause_ms is None else pause_ms,
            reason=text(reason)[:200],
            day_limit="",
            month_limit="",
            group=self._group,
            task_id=task_id,
            reporter=reporter,
        )
        return self._op(args)

    def resume(self) -> Op[tuple[int, int]]:
        args = Quota(
            op="resume",
            pause_ms="",
            reason="",
            day_limit="",
            month_limit="",
            group=self._group,
            task_id="",
        )
        return self._op(args)

    def budget(self, *, day: BudgetLimit = None, month: BudgetLimit = None) -> Op[tuple[int, int]]:
        args = Quota(
            op="budget",
            pause_ms="",
            reason="",
            day_limit=_limit("day", day),
            month_limit=_limit("month", month),
            group=self._group,
            task_id="",
        )
        return self._op(args)
