"""``Quota``: a provider quota shared by every queue, group and language that names it
(``protocol.provider_quota``; docs/quotas.md).

    openai = Quota("openai", redis_url="redis://localhost:6379/0")
    openai.configure(limits={"requests": 500, "input_tokens": 200_000}, period_s=60)
    queue.enqueue({"text": ...}, quotas={"openai": {"requests": 1, "input_tokens": 3000}})

Each call is one script call on the queues' Redis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from types import TracebackType

from taskfleet.protocol.connect import SyncClient, connect
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.provider_quota import ProviderQuotaOps, QuotaUse
from taskfleet.protocol.scripts import SyncScripts

__all__ = ["Quota", "seconds_to_ms"]


def seconds_to_ms(value: float | timedelta, what: str) -> int:
    """Seconds (a number or a timedelta) in whole ms, checked finite and >= 0."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"{what} must be seconds, not {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgument(f"{what} must be finite and >= 0, not {value!r}")
    return math.ceil(seconds * 1000)


class Quota:
    """A named provider quota on the queues' Redis: limits per unit per period and an
    optional concurrency cap, paused and resumed for every queue that names it."""

    def __init__(self, name: str, redis_url: str = "redis://localhost:6379/0") -> None:
        self._ops = ProviderQuotaOps(name)
        self.name = self._ops.name
        self._client: SyncClient = connect(redis_url)
        self._scripts = SyncScripts.for_client(self._client)

    def configure(
        self,
        limits: Mapping[str, int],
        period_s: float | timedelta = 60,
        max_concurrency: int | None = None,
    ) -> QuotaUse:
        """Set the limits ({unit: units per period}, e.g. ``{"requests": 500,
        "input_tokens": 200_000}``), the period and the concurrency cap (None: none).
        The units named replace those set before; use in the current window is kept."""
        period_ms = seconds_to_ms(period_s, "period_s")
        use = self._scripts.run(self._ops.configure(limits, period_ms, max_concurrency))
        assert use is not None
        return use

    def get(self) -> QuotaUse | None:
        """Limits, this window's use, live reservations and the pause; None when the
        quota was never configured."""
        return self._scripts.run(self._ops.get())

    def pause(self, seconds: float | timedelta, reason: str = "") -> QuotaUse:
        """No claim starts a task naming this quota for ``seconds`` (a longer pause already
        on is kept), in every queue and language; other tasks run on."""
        use = self._scripts.run(self._ops.pause(seconds_to_ms(seconds, "seconds"), reason))
        if use is None:
            raise InvalidArgument(f"no provider quota {self.name!r}: configure it first")
        return use

    def resume(self) -> QuotaUse:
        """End the pause now."""
        use = self._scripts.run(self._ops.resume())
        if use is None:
            raise InvalidArgument(f"no provider quota {self.name!r}: configure it first")
        return use

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Quota:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
