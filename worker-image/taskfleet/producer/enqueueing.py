"""Enqueueing: one task, many at once, a flow, the children of a running task.

Each call is one enqueue script call, however many tasks (``Ops.enqueue``), after every
task is checked and encoded by ``encoding`` (``encode_task`` holds the arguments). The
call is a ``Write`` step: the runner waits for replicas when the queue asks for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from taskfleet.producer.encoding import (
    EnqueueResult,
    EnqueueSpec,
    batch_args,
    encode_task,
    token_base,
)
from taskfleet.producer.flows import Flow, FlowIds, build
from taskfleet.producer.runner import Plan, QueueBase, Write, taking
from taskfleet.protocol import tracing
from taskfleet.protocol.queue_ops import EnqueueArgs

__all__ = ["add_children", "enqueue", "enqueue_flow", "enqueue_many", "enqueue_result"]

Items = Iterable[EnqueueSpec | Mapping[str, Any]]


def _one(q: QueueBase, args: EnqueueArgs) -> Plan[bool]:
    """One task's enqueue script call; whether it created the task."""
    if tracing.configured():
        with tracing.enqueue_span(q.name, 1) as span:
            span.set_attribute("messaging.message.id", args.task_id)
            op = q.ops.enqueue([args], token_base(), tracing.carrier_text())
            [created] = yield Write(op, [args.task_id])
    else:
        [created] = yield Write(q.ops.enqueue([args], token_base()), [args.task_id])
    return bool(created)


def _plain(q: QueueBase, args: EnqueueArgs) -> Write:
    """An untraced single enqueue's step (``enqueue``'s, the hot path, built inline)."""
    return Write(q.ops.enqueue([args], token_base()), [args.task_id])


@taking(encode_task)
def enqueue(q: QueueBase, args: EnqueueArgs) -> Plan[str]:
    """Add a task; returns its id.

    ``delay``: seconds (or timedelta) before it may run. ``deadline``: seconds from
    now (or an aware datetime) by which it must have started, else it goes dead
    with reason ``expired``. ``cost``: units it takes from the cost rate limit.
    Bounds (``taskfleet.protocol.bounds``): delay and deadline at most 100 years, timeout at
    most one year, cost 0..1e9, max_attempts 1..10,000, priority -1000..1000.

    ``task``: the name of the handler that runs it, among those its workers serve
    (``--handler NAME=module:function``); None: the workers' default handler. A name
    no worker serves makes the task go dead, reason ``unknown task``.

    ``group``: the group it belongs to (a tenant, a customer): the queue's workers
    claim fairly between groups, in turn (weighted by ``set_group``), so one group's
    backlog never starves another; priorities order tasks within a group, and the
    group's own limits apply (``set_group``, the config's ``group_*`` defaults).
    ``quotas``: provider quotas its run reserves when claimed (``taskfleet.Quota``),
    ``{"openai": {"requests": 1, "input_tokens": 3000}}``; a claim starts it only when
    each can admit the estimate now, and its handler settles the real use
    (``current_task().settle``; docs/quotas.md).

    With ``task_id``, enqueueing the same task again (same payload, task, priority,
    cost, timeout and, if given, max_attempts) returns the id and changes nothing; another
    payload or option under an existing id raises ``TaskExists``. ``enqueue_result``
    also says whether the task was created.

    ``after``: ids of tasks (of this queue) it waits for: it stays ``waiting``, never
    claimed, until every one is done, then becomes pending in the same script. When one
    ends dead or cancelled (or is gone), ``on_dep_fail`` decides: ``fail`` (default,
    it ends dead, reason ``dependency failed``), ``ignore`` (counts as done) or
    ``cancel`` (it and its other unfinished dependencies are cancelled). An id that is
    no task raises ``InvalidArgument``; see docs/flows.md.
    """
    if tracing.configured():
        yield from _one(q, args)
    else:
        yield _plain(q, args)
    return args.task_id


@taking(encode_task)
def enqueue_result(q: QueueBase, args: EnqueueArgs) -> Plan[EnqueueResult]:
    """``enqueue``, returning the id and whether this call created the task."""
    created = yield from _one(q, args)
    return EnqueueResult(args.task_id, created)


def _batch(q: QueueBase, items: Items, *, flow: bool) -> Plan[list[str]]:
    """``flow``: every new task joins the flow named by the first task's id."""
    batch = batch_args(items)
    if not batch:
        return []
    ids = [a.task_id for a in batch]
    named = ids[0] if flow else ""
    if tracing.configured():
        with tracing.enqueue_span(q.name, len(batch)):
            op = q.ops.enqueue(batch, token_base(), tracing.carrier_text(), flow=named)
            yield Write(op, ids)
    else:
        yield Write(q.ops.enqueue(batch, token_base(), flow=named), ids)
    return ids


def enqueue_many(q: QueueBase, items: Items) -> Plan[list[str]]:
    """Add many tasks atomically in one round trip; returns their ids in order.

    Each item is an ``EnqueueSpec`` or a dict of ``enqueue``'s arguments. If any
    item is invalid (or too large), names an id twice, or names an existing task
    with another payload or options (``TaskExists``), nothing is stored.
    """
    ids = yield from _batch(q, items, flow=False)
    return ids


def enqueue_flow(q: QueueBase, flow: Flow | EnqueueSpec | Mapping[str, Any]) -> Plan[FlowIds]:
    """Store a flow (``chain``, ``group``, ``chord``, nested; ``taskfleet.producer.
    flows``) in one atomic call: every task or none. Returns its ids. Its tasks are
    one flow, named by its first task's id (``Task.flow``; docs/flows.md)."""
    items, last = build(flow)
    ids = yield from _batch(q, items, flow=True)
    return FlowIds(ids, last)


def add_children(q: QueueBase, parent: str, token: str, items: Items) -> Plan[list[str]]:
    """Tasks the running task ``parent`` (claimed under ``token``) waits for, in one
    atomic call: it is done only once they all are (``taskfleet.add_children`` from
    a handler). ``StaleToken`` when that run no longer holds it."""
    batch = batch_args(items)
    if batch:
        yield q.ops.enqueue(batch, parent=(parent, token))
    return [a.task_id for a in batch]
