"""Provider quotas on the dashboard: each quota's limits, use in its window, live
reservations and pause (``provider_quota`` get: one script call a quota, at most
``QUOTAS_SHOWN``), and which queues have tasks waiting on a paused one.

A claim that cannot start a task because of a quota leaves it delayed with
``quota_wait`` naming the quota; a queue's first ``WAITING_READ`` delayed tasks (due
first) are looked at for it, and only while some quota is paused: a page pays nothing
for it otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from taskfleet.protocol.calls import run, run_all
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.provider_quota import ProviderQuotaOps, QuotaUse
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.scripts import SyncScripts
from taskfleet.protocol.states import TaskState
from taskfleet.protocol.store import quota_clock

__all__ = ["QUOTAS_SHOWN", "WAITING_READ", "QuotaView", "UnitView", "read_quotas", "waiting_on"]

#: Quotas the page reads (by name).
QUOTAS_SHOWN = 100
#: Delayed tasks of a queue looked at for the quota they wait for.
WAITING_READ = 20


@dataclass(frozen=True)
class UnitView:
    unit: str
    limit: int
    used: int

    @property
    def over(self) -> int:
        """What this window's use exceeds its limit by (runs that settled more than they
        reserved): the debt the next windows start from. 0 within the limit."""
        return max(0, self.used - self.limit) if self.limit else 0

    @property
    def fraction(self) -> float | None:
        return None if not self.limit else min(1.0, self.used / self.limit)


@dataclass(frozen=True)
class QuotaView:
    use: QuotaUse
    now_ms: int

    @property
    def name(self) -> str:
        return self.use.name

    @property
    def paused(self) -> bool:
        return self.use.paused_until_ms > self.now_ms

    @property
    def pause_left_s(self) -> float:
        return max(0.0, (self.use.paused_until_ms - self.now_ms) / 1000)

    @property
    def window_left_s(self) -> float:
        return max(0.0, (self.use.window_ms + self.use.period_ms - self.now_ms) / 1000)

    @property
    def units(self) -> list[UnitView]:
        return [UnitView(u, v.limit, v.used) for u, v in sorted(self.use.units.items())]


def read_quotas(client: SyncClient, names: list[str]) -> list[QuotaView]:
    """Each quota of ``names`` (the first ``QUOTAS_SHOWN``) as its script sees it now, on
    its server's clock; a name no longer configured is left out."""
    scripts = SyncScripts.for_client(client)
    out = []
    for name in names[:QUOTAS_SHOWN]:
        use = scripts.run(ProviderQuotaOps(name).get())
        if use is not None:
            now = run(client, quota_clock(name))
            out.append(QuotaView(use, now))
    return out


def waiting_on(client: SyncClient, queue: str, paused: set[str]) -> list[str]:
    """The paused quotas among those the queue's first ``WAITING_READ`` delayed tasks
    wait for, sorted; [] at once when none is paused."""
    if not paused:
        return []
    reads = QueueReads(QueueKeys(queue))
    (ids,) = run_all(client, [reads.ids(TaskState.DELAYED, 0, WAITING_READ)])
    if not ids:
        return []
    return sorted(set(run(client, reads.quota_waits(ids))) & paused)
