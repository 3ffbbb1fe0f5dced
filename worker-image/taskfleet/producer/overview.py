"""A queue at a glance, in two pipelined round trips: sizes by state, counters, workers
and what each holds, the head of pending, the newest dead tasks, its biggest groups
(``read``); every queue of a Redis by its counters (``discover``); a counter's rate
between two reads (``rate``).

``taskfleet top`` draws these in a terminal and the dashboard on its queues page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from taskfleet.producer.quotas import state_of
from taskfleet.protocol import groups as group_reads
from taskfleet.protocol import holdbacks as holdback_reads
from taskfleet.protocol import store
from taskfleet.protocol.calls import Call, run, run_all, scan
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.quota import QuotaState
from taskfleet.protocol.reads import STATES, QueueReads

__all__ = ["DeadView", "GroupsView", "QueueView", "WorkerView", "discover", "rate", "read"]

#: Dead tasks shown per queue, newest first.
DEAD_SHOWN = 3
#: Groups shown per queue, most pending first; the rest are summed on one "other" line.
GROUPS_SHOWN = 5
#: Groups read per kind (claimable, held back, running) to find the biggest: a refresh
#: reads at most three times this many groups whatever the queue holds (10,000 groups:
#: the biggest among those read, the ones next in the claim's turn and those held back).
GROUPS_READ = 100


@dataclass
class WorkerView:
    pod: str
    holds: int
    slots: int
    heartbeat_age_s: float
    draining: bool
    incarnation: str = ""
    #: heartbeat within one lease TTL (the queue's ``lease_ttl_s``)
    alive: bool = True
    #: what it serves: ``records.WORKER_LEVEL`` for this release, 1 for a 0.1.x worker
    level: int = 1
    #: slots held by calls it gave up on (their task ended) that still run
    held: int = 0


@dataclass
class DeadView:
    id: str
    reason: str
    error: str


@dataclass
class GroupsView:
    """A queue's groups: the ``GROUPS_SHOWN`` with most pending (of those read), and the
    rest summed. ``groups``: groups with pending tasks (counted, not read);
    ``other_pending``: exact (the groups' pending total less those shown);
    ``other_running``: of the other groups read; ``complete``: every group was read."""

    shown: list[group_reads.GroupRow] = field(default_factory=list)
    groups: int = 0
    other_groups: int = 0
    other_pending: int = 0
    other_running: int = 0
    complete: bool = True


@dataclass
class QueueView:
    """One queue as read at ``at_ms`` (Redis's clock)."""

    name: str
    at_ms: int
    counts: dict[str, int]
    counters: dict[str, int]
    oldest_pending_s: float | None
    workers: list[WorkerView] = field(default_factory=list)
    #: the queue's shared settings (``QueueConfig``) as plain data
    limits: dict[str, Any] = field(default_factory=dict)
    dead: list[DeadView] = field(default_factory=list)
    #: its groups (none shown when it has none)
    groups: GroupsView = field(default_factory=GroupsView)
    #: the claim pause and spend budget (``Queue.quota()``'s answer)
    quota: QuotaState | None = None
    #: each rate limit set: (name, tokens used now, limit per ``rate_limit_period_s``)
    rate_use: list[tuple[str, int, int]] = field(default_factory=list)
    #: groups whose own claim pause is on (of the first ``holdbacks.PAUSED_READ`` parked)
    paused_groups: list[holdback_reads.GroupPause] = field(default_factory=list)

    @property
    def paused(self) -> bool:
        """Whether the whole queue's claims are paused now."""
        return self.quota is not None and self.quota.paused


def discover(client: SyncClient) -> list[str]:
    """Every queue with counters in this Redis (its ``stats`` hash), by name."""
    return sorted(set(scan(client, store.queues())))


def read(client: SyncClient, name: str, *, groups: bool = True) -> QueueView:
    """One queue in two round trips: everything, then the tasks it named and what each
    worker holds; ``groups=False``: without its groups (a page that does not show them)."""
    reads = QueueReads(QueueKeys(name))
    # The clock of the queue's server, on its own: a cluster pipeline refuses TIME.
    now_ms = run(client, reads.clock())
    keys = QueueKeys(name)
    first: list[Call[Any]] = [
        reads.sizes(STATES),
        reads.counters(),
        reads.workers(),
        reads.ids("pending", 0, 1),
        reads.ids("dead", 0, DEAD_SHOWN),
        reads.config(),
        holdback_reads.holdbacks(keys),
    ]
    if groups:
        first += [group_reads.group_totals(keys), group_reads.group_names(keys, GROUPS_READ)]
    counts, counters, workers, head, dead_ids, config, held_back, *grouped = run_all(client, first)
    totals, group_names = grouped if groups else (None, [])
    records = workers.readable()
    # what each holds by the queue's own records (exact, unlike heartbeats)
    second: list[Call[Any]] = [
        reads.ready_at(head),
        reads.rows(dead_ids),
        reads.held_counts(sorted(workers.records)),
        holdback_reads.group_pauses(
            keys, [g for g, until in held_back.parked if until > now_ms], now_ms
        ),
    ]
    if group_names:
        second += [
            group_reads.group_rows(keys, group_names),
            group_reads.group_heads(keys, group_names),
        ]
    ready, rows, held, paused_groups, *group_rows = run_all(client, second)
    readies = [r for r in ready if r]
    if group_names:
        # the oldest ready task across groups: the head of each group read
        heads = [h for h in group_rows[1] if h]
        readies += [r for r in run(client, reads.ready_at(heads)) if r] if heads else []
    oldest = None
    if readies:
        oldest = max(0.0, (now_ms - min(readies)) / 1000)
    limits = config.model_dump()
    view = QueueView(name, now_ms, counts, counters, oldest, limits=limits)
    view.quota = state_of(held_back.quota, now_ms, config)
    view.paused_groups = paused_groups
    for kind, bucket, limit in (
        ("tasks", held_back.tasks, config.rate_limit_tasks),
        ("cost", held_back.cost, config.rate_limit_cost),
    ):
        used = holdback_reads.bucket_used(bucket, limit, config.rate_limit_period_s, now_ms)
        if used is not None and limit:
            view.rate_use.append((kind, used, limit))
    for pod, rec in records:
        view.workers.append(
            WorkerView(
                pod,
                held.get(pod, 0),
                rec.concurrency,
                rec.age_ms(now_ms) / 1000,
                rec.draining,
                incarnation=rec.incarnation,
                alive=rec.alive(now_ms, config.lease_ttl_s),
                level=rec.level,
                held=rec.held,
            )
        )
    for row in rows:
        view.dead.append(DeadView(row.id, row.reason, row.error))
    if totals is not None and group_names:
        found = group_rows[0]
        # every group read: each kind's read held fewer than its bound ('' takes one)
        complete = max(totals.claimable + 1, totals.held, len(group_names)) < GROUPS_READ
        view.groups = biggest(found, totals, complete=complete)
    return view


def biggest(
    rows: list[group_reads.GroupRow], totals: group_reads.GroupTotals, *, complete: bool
) -> GroupsView:
    """The ``GROUPS_SHOWN`` groups of ``rows`` with most pending (then most running, then
    by name), the rest summed. Pure."""
    ranked = sorted(rows, key=lambda r: (-r.pending, -r.running, r.group))
    shown, rest = ranked[:GROUPS_SHOWN], ranked[GROUPS_SHOWN:]
    groups = max(totals.groups, sum(1 for r in rows if r.pending))
    return GroupsView(
        shown=shown,
        groups=groups,
        other_groups=max(len(rest), groups - sum(1 for r in shown if r.pending)),
        other_pending=max(0, totals.pending - sum(r.pending for r in shown)),
        other_running=sum(r.running for r in rest),
        complete=complete,
    )


def rate(now: QueueView, before: QueueView | None, counter: str) -> float | None:
    """``counter`` per second between two reads of one queue (None before the second)."""
    if before is None or now.at_ms <= before.at_ms:
        return None
    delta = now.counters.get(counter, 0) - before.counters.get(counter, 0)
    return max(0, delta) / ((now.at_ms - before.at_ms) / 1000)
