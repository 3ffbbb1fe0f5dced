"""Every queue's state, read from Redis when Prometheus scrapes the operator.

One scrape reads every connected TaskQueue's queue in two pipelined round trips per Redis
server (counts, counters, worker records and the head of pending; then when that head
became ready), however many queues or pods there are. Nothing is cached: the figures are
Redis's at the moment of the scrape. A server that does not answer gives its queues
``taskfleet_queue_redis_up 0`` and no other series (a gap, not a false zero).

Labels: ``queue`` (``<namespace>.<name>``, as the workers label theirs), and the
TaskQueue's ``taskqueue_namespace`` and ``taskqueue`` (not ``namespace``: Prometheus'
Kubernetes discovery sets that to the operator's own namespace).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import Call, run, run_all
from taskfleet.protocol.groups import GroupCount, group_counts, group_heads, group_names
from taskfleet.protocol.quota import QuotaOps, QuotaState, quota_state
from taskfleet.protocol.reads import STATES, Workers
from taskfleet.protocol.records import CURRENT_LEVEL, DEFAULT_LEASE_TTL_S
from taskfleet.protocol.tasks import COUNTERS, FLOW_COUNTERS

from taskfleet_operator.builders import queue_name
from taskfleet_operator.connections import SAFE_POLICY, Connections

__all__ = ["QueueCollector", "QueueReading", "read_queues"]

#: Counters of the queue's ``stats`` hash -> the metric that exports each.
COUNTER_METRICS = {
    "enqueued": "taskfleet_queue_enqueued",
    "completed": "taskfleet_queue_completed",
    "failed": "taskfleet_queue_failed",
    "retried": "taskfleet_queue_retried",
    "dead_total": "taskfleet_queue_dead",
    "requeued": "taskfleet_queue_requeued",
    "lost": "taskfleet_queue_lost",
    "released": "taskfleet_queue_released",
    "stale": "taskfleet_queue_stale",
    "expired": "taskfleet_queue_expired",
    "cancelled_total": "taskfleet_queue_cancelled",
    "deferred": "taskfleet_queue_deferred",
    "replayed": "taskfleet_queue_replayed",
    "throttled": "taskfleet_queue_claim_pauses",
    "flow_repairs": "taskfleet_queue_flow_repairs",
}
#: The flow counters are one family, ``taskfleet_queue_flows{outcome}``.
assert set(COUNTER_METRICS) | set(FLOW_COUNTERS.values()) == set(COUNTERS)


#: Groups a scrape reads per queue (of each kind: claimable, parked, running) and exports
#: by name (the most pending); the rest it reads are summed as group "other".
GROUPS_READ = 1000
GROUPS_SHOWN = 10


@dataclass
class QueueReading:
    """One queue as one scrape read it (``up`` False: its Redis did not answer)."""

    namespace: str
    taskqueue: str
    queue: str
    up: bool = True
    tasks: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    workers: int = 0
    workers_alive: int = 0
    slots_alive: int = 0  # the concurrency of the live workers, summed
    workers_older: int = 0  # live workers of a level below CURRENT_LEVEL (0.1.x workers)
    oldest_pending_s: float = 0.0  # the oldest head of pending and its groups'; 0: none pending
    policy: str | None = None  # the server's maxmemory-policy as last checked
    quota: QuotaState | None = None  # the claim pause and the budget's spend
    groups_paused: int = 0  # groups (of those read) whose own claim pause holds
    groups: list[GroupCount] = field(default_factory=list)  # the top ones, then "other"
    # (group, period) -> cost units left of that group's budget, for the top groups with one
    group_budgets: dict[tuple[str, str], int] = field(default_factory=dict)


def _workers(found: Workers, now_ms: int, ttl_s: float) -> tuple[int, int, int, int]:
    """Registered workers, the live ones (heartbeat within a lease TTL, as ``Queue.workers``
    judges), their slots, and the live ones of a level below this release's."""
    alive = [rec for _, rec in found.readable() if rec.alive(now_ms, ttl_s)]
    older = sum(1 for rec in alive if rec.level < CURRENT_LEVEL)
    return len(found.records), len(alive), sum(rec.concurrency for rec in alive), older


def _read_server(members: list[tuple[tuple[str, str], Queue]]) -> list[QueueReading]:
    client = members[0][1].client
    # The server's clock on its own: a cluster pipeline refuses TIME (a command of no key).
    now_ms = run(client, members[0][1].reads.clock())
    calls: list[Call[Any]] = []
    for _, queue in members:
        reads = queue.reads
        calls += [
            reads.sizes(STATES),
            reads.counters(),
            reads.workers(),
            reads.lease_ttl(),
            reads.ids("pending", 0, 1),
            QuotaOps(queue.keys).read(),
            reads.config(),
            group_names(queue.keys, most=GROUPS_READ),
        ]
    replies = run_all(client, calls)
    readings: list[QueueReading] = []
    heads: list[tuple[QueueReading, Queue, str]] = []
    grouped: list[tuple[QueueReading, Queue, list[str]]] = []
    configs: dict[int, Any] = {}
    for i, ((namespace, name), queue) in enumerate(members):
        sizes, counters, workers, ttl, head, quota, config, names = replies[i * 8 : i * 8 + 8]
        reading = QueueReading(namespace, name, queue.name)
        reading.tasks = sizes
        reading.counters = {counter: counters.get(counter, 0) for counter in COUNTERS}
        ttl_s = DEFAULT_LEASE_TTL_S if ttl is None else ttl
        (
            reading.workers,
            reading.workers_alive,
            reading.slots_alive,
            reading.workers_older,
        ) = _workers(workers, now_ms, ttl_s)
        reading.quota = quota_state(
            quota, now_ms, budget_day=config.budget_day, budget_month=config.budget_month
        )
        readings.append(reading)
        configs[id(reading)] = config
        if names:
            grouped.append((reading, queue, names))
        if head:
            heads.append((reading, queue, head[0]))
    group_calls: list[Call[Any]] = []
    for _, queue, names in grouped:
        group_calls += [group_counts(queue.keys, names, now_ms), group_heads(queue.keys, names)]
    group_replies = run_all(client, group_calls)
    counts = group_replies[0::2]
    # the oldest ready task across groups: each group's next one too, not only pending's
    for (reading, queue, _), found in zip(grouped, group_replies[1::2], strict=True):
        heads += [(reading, queue, task_id) for task_id in found if task_id]
    budget_reads: list[tuple[QueueReading, str]] = []
    budget_calls: list[Call[dict[str, str]]] = []
    for (reading, queue, _), found in zip(grouped, counts, strict=True):
        reading.groups = _top(found)
        reading.groups_paused = sum(1 for c in found if c.paused_until_ms)
        for one in reading.groups[:GROUPS_SHOWN]:  # the summed "other" comes after these
            budget_reads.append((reading, one.group))
            budget_calls.append(QuotaOps(queue.keys, one.group).read())
    budgets = run_all(client, budget_calls)
    for (reading, group), raw in zip(budget_reads, budgets, strict=True):
        config = configs[id(reading)]
        q = quota_state(
            raw,
            now_ms,
            budget_day=config.group_budget_day,
            budget_month=config.group_budget_month,
        )
        for period, left in (("day", q.day_left), ("month", q.month_left)):
            if left is not None:
                reading.group_budgets[(group, period)] = left
    ready = run_all(client, [queue.reads.ready_at([task_id]) for _, queue, task_id in heads])
    for (reading, _, _), (ready_ms,) in zip(heads, ready, strict=True):
        if ready_ms is not None:
            reading.oldest_pending_s = max(reading.oldest_pending_s, (now_ms - ready_ms) / 1000)
    return readings


def _top(found: list[GroupCount]) -> list[GroupCount]:
    """The GROUPS_SHOWN groups with the most pending (then running), and the rest summed
    as "other": a bounded number of series whatever the number of groups."""
    ranked = sorted(found, key=lambda c: (-c.pending, -c.running, c.group))
    top, rest = ranked[:GROUPS_SHOWN], ranked[GROUPS_SHOWN:]
    if rest:
        top.append(GroupCount("other", sum(c.pending for c in rest), sum(c.running for c in rest)))
    return top


def read_queues(connections: Connections) -> list[QueueReading]:
    """Every connected queue, two round trips per Redis server."""
    out: list[QueueReading] = []
    for members in connections.by_server():
        try:
            out.extend(_read_server(members))
        except redis.RedisError as error:
            connections.report(*members[0][0], error)
            out.extend(
                QueueReading(namespace, name, queue.name, up=False)
                for (namespace, name), queue in members
            )
    # A parked server is not called: its queues are down until its probe succeeds.
    read = {(r.namespace, r.taskqueue) for r in out}
    for keys in connections.outages.queues().values():
        out.extend(
            QueueReading(namespace, name, queue_name(namespace, name), up=False)
            for namespace, name in sorted(keys - read)
        )
    for reading in out:
        reading.policy = connections.policy(reading.namespace, reading.taskqueue)
    return sorted(out, key=lambda r: r.queue)


class QueueCollector:
    """The ``taskfleet_queue_*`` series, read at each scrape (on the metrics thread)."""

    def __init__(self, connections: Connections) -> None:
        self._connections = connections

    def describe(self) -> list[Any]:
        return []  # nothing to check at registration: collect() reads Redis

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        readings = read_queues(self._connections)
        labels = ["queue", "taskqueue_namespace", "taskqueue"]

        def gauge(name: str, doc: str, extra: list[str] | None = None) -> Any:
            return GaugeMetricFamily(name, doc, labels=labels + (extra or []))

        up = gauge("taskfleet_queue_redis_up", "1 when the queue's Redis answered this scrape.")
        tasks = gauge(
            "taskfleet_queue_tasks",
            "Tasks in each state now (done and dead: those still retained).",
            ["state"],
        )
        workers = gauge("taskfleet_queue_workers", "Workers registered with the queue.")
        alive = gauge(
            "taskfleet_queue_workers_alive", "Workers whose heartbeat is within a lease TTL."
        )
        slots = gauge("taskfleet_queue_worker_slots", "Slots (concurrency) of the live workers.")
        older = gauge(
            "taskfleet_queue_workers_older",
            f"Live workers of a level below {CURRENT_LEVEL} (0.1.x workers), which do not serve "
            "flows, groups, claim pauses or spend budgets.",
        )
        oldest = gauge(
            "taskfleet_queue_oldest_pending_age_seconds",
            "How long the task next in line (head of pending) has been ready: the oldest "
            "pending task of the highest priority waiting; 0 when nothing is pending.",
        )
        counters = {
            stat: CounterMetricFamily(
                metric, f"The queue's '{stat}' counter (taskfleet stats).", labels=labels
            )
            for stat, metric in COUNTER_METRICS.items()
        }
        flows = CounterMetricFamily(
            "taskfleet_queue_flows",
            "Flows that ended, by outcome: done (every task done), failed (one dead), "
            "cancelled (one cancelled, none dead); a flow a retry reopened counts again.",
            labels=[*labels, "outcome"],
        )
        evicting = gauge(
            "taskfleet_queue_redis_evicting",
            "1 when the queue's Redis has a maxmemory-policy other than noeviction: a full "
            "Redis then deletes keys, acknowledged tasks among them (docs/redis.md).",
            ["policy"],
        )
        paused = gauge(
            "taskfleet_queue_claims_paused_seconds",
            "Seconds left of the fleet-wide claim pause a provider's rate limit set "
            "(RateLimited, taskfleet quota pause); 0 when claims go on.",
        )
        groups_paused = gauge(
            "taskfleet_queue_groups_paused",
            "Groups whose own claim pause holds (RateLimited(scope='group'), taskfleet quota "
            f"pause --group; of the first {GROUPS_READ} groups read of each kind).",
        )
        group_budget = gauge(
            "taskfleet_queue_group_budget_left",
            f"Cost units left of a group's budget in the current UTC period, for the "
            f"{GROUPS_SHOWN} groups with the most pending that have a budget (their own or "
            "every group's default).",
            ["group", "period"],
        )
        budget_limit = gauge(
            "taskfleet_queue_budget_limit",
            "The spend budget in cost units per UTC period (day, month); absent: none.",
            ["period"],
        )
        budget_spent = gauge(
            "taskfleet_queue_budget_spent",
            "Cost units spent in the current UTC period (charged at claim, settled with "
            "reported costs), for periods with a budget.",
            ["period"],
        )
        budget_reset = gauge(
            "taskfleet_queue_budget_reset_seconds",
            "Seconds until the current UTC period ends and its spend starts again at 0.",
            ["period"],
        )
        by_group = gauge(
            "taskfleet_queue_group_tasks",
            f"Tasks of a group pending (ready) or running now: the {GROUPS_SHOWN} groups with "
            f"the most pending, the others summed as group 'other' (of the first {GROUPS_READ} "
            "groups read of each kind).",
            ["group", "state"],
        )
        for reading in readings:
            values = [reading.queue, reading.namespace, reading.taskqueue]
            for one in reading.groups:
                by_group.add_metric([*values, one.group, "pending"], one.pending)
                by_group.add_metric([*values, one.group, "running"], one.running)
            for (group, period), left in reading.group_budgets.items():
                group_budget.add_metric([*values, group, period], left)
            up.add_metric(values, int(reading.up))
            if reading.policy is not None:
                evicting.add_metric([*values, reading.policy], int(reading.policy != SAFE_POLICY))
            if not reading.up:
                continue
            for state, count in reading.tasks.items():
                tasks.add_metric([*values, state], count)
            workers.add_metric(values, reading.workers)
            alive.add_metric(values, reading.workers_alive)
            slots.add_metric(values, reading.slots_alive)
            older.add_metric(values, reading.workers_older)
            oldest.add_metric(values, reading.oldest_pending_s)
            for stat, family in counters.items():
                family.add_metric(values, reading.counters.get(stat, 0))
            for outcome, stat in FLOW_COUNTERS.items():
                flows.add_metric([*values, outcome], reading.counters.get(stat, 0))
            q = reading.quota
            if q is not None:
                paused.add_metric(values, q.pause_left_ms / 1000)
                groups_paused.add_metric(values, reading.groups_paused)
                for period, limit, spent, end in (
                    ("day", q.day_limit, q.day_spent, q.day_end_ms),
                    ("month", q.month_limit, q.month_spent, q.month_end_ms),
                ):
                    if limit > 0:
                        budget_limit.add_metric([*values, period], limit)
                        budget_spent.add_metric([*values, period], spent)
                        budget_reset.add_metric([*values, period], (end - q.now_ms) / 1000)
        yield from (up, evicting, tasks, workers, alive, slots, older, oldest, by_group)
        yield from counters.values()
        yield flows
        yield from (paused, groups_paused, group_budget, budget_limit, budget_spent, budget_reset)
