"""Flows as values: ``chain``, ``group`` and ``chord`` of tasks, built into one
``enqueue_many`` call whose items wait for each other (``after``), so a whole flow is
stored in one atomic script; and ``add_children``, how a running task adds tasks it
waits for (docs/flows.md).

A task of a flow is an ``enqueue_many`` item (a dict of ``Queue.enqueue``'s arguments
with its ``payload``, or an ``EnqueueSpec``). ``chain(a, b, c)``: b after a, c after b;
``group(a, b)``: side by side; a part after a group waits for every task that ends it;
``chord(group(...), merge)`` is ``chain(group(...), merge)``: merge runs once all are
done and reads their results (``current_task().dependency_results()``). Parts nest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from taskfleet.producer.encoding import EnqueueSpec
from taskfleet.protocol.errors import InvalidArgument

__all__ = ["MAX_FLOW_DEPTH", "Flow", "FlowIds", "build", "chain", "chord", "from_json", "group"]

#: Levels of chains and groups one flow nests at most.
MAX_FLOW_DEPTH = 100

Item = EnqueueSpec | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Flow:
    """A chain or a group of parts (tasks or flows); build with ``chain`` / ``group``."""

    kind: str  # "chain" | "group"
    parts: tuple[Flow | Item, ...]


@dataclass(frozen=True, slots=True)
class FlowIds:
    """What ``Queue.enqueue_flow`` stored: every task's id in the order the flow names
    them, and the ids of the tasks that end it (what a part after it would wait for)."""

    ids: list[str]
    last: list[str]


def chain(*parts: Flow | Item) -> Flow:
    """Each part after the one before it."""
    return Flow("chain", parts)


def group(*parts: Flow | Item) -> Flow:
    """The parts side by side; what follows waits for all of them."""
    return Flow("group", parts)


def chord(header: Flow | Item, callback: Flow | Item) -> Flow:
    """``callback`` once every task of ``header`` is done, with their results."""
    return Flow("chain", (header, callback))


def build(flow: Flow | Item) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``enqueue_many`` items of a flow, in order (each after what it waits for, with
    an id of its own), and the ids that end it."""
    items: list[dict[str, Any]] = []
    last = _place(flow, [], items, 0)
    if not items:  # an empty chain or group, or only empty ones: surely not what was meant
        raise InvalidArgument("the flow has no task: give chain / group at least one part")
    return items, last


def _place(
    part: Flow | Item, after: list[str], items: list[dict[str, Any]], depth: int
) -> list[str]:
    if depth > MAX_FLOW_DEPTH:
        raise InvalidArgument(f"a flow nests more than {MAX_FLOW_DEPTH} levels deep")
    if isinstance(part, Flow):
        if part.kind == "chain":
            ends = after
            for sub in part.parts:
                ends = _place(sub, ends, items, depth + 1)
            return ends
        out: list[str] = []
        for sub in part.parts:
            out += _place(sub, after, items, depth + 1)
        return out if part.parts else after
    item = dict(part.__dict__ if isinstance(part, EnqueueSpec) else _mapping(part))
    if item.get("task_id") is None:
        item["task_id"] = os.urandom(16).hex()
    own = item.get("after") or []
    if isinstance(own, str) or not isinstance(own, list | tuple):
        raise InvalidArgument("after must be a list of task ids")
    waits = [*own, *(dep for dep in after if dep not in own)]
    if waits:
        item["after"] = waits
    items.append(item)
    return [str(item["task_id"])]


def _mapping(part: object) -> Mapping[str, Any]:
    if not isinstance(part, Mapping):
        raise InvalidArgument(f"a flow's part must be a task (a dict) or a flow, not {part!r:.100}")
    return part


def from_json(value: Any) -> Flow | Item:
    """A flow written as JSON (the CLI's ``taskfleet flow``): ``{"chain": [...]}``,
    ``{"group": [...]}``, ``{"chord": [header, callback]}``, or a task item (an object
    with a ``payload``)."""
    if not isinstance(value, dict):
        raise InvalidArgument(f"a flow's part must be a JSON object, not {json.dumps(value)[:100]}")
    kinds = [k for k in ("chain", "group", "chord") if k in value]
    if not kinds:
        return value
    if len(kinds) > 1 or len(value) > 1:
        raise InvalidArgument(f"a flow's part has one key, chain, group or chord: {sorted(value)}")
    parts = value[kinds[0]]
    if not isinstance(parts, list):
        raise InvalidArgument(f"{kinds[0]} takes a list of parts")
    built = [from_json(p) for p in parts]
    if kinds[0] == "chord":
        if len(built) != 2:
            raise InvalidArgument("chord takes two parts: [group, callback]")
        return chord(built[0], built[1])
    return Flow(kinds[0], tuple(built))


def child_items(items: Iterable[Item]) -> list[Item]:
    """``add_children``'s items, as a list (each checked by the enqueue)."""
    return list(items)
