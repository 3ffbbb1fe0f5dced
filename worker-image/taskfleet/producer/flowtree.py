"""The tree of a flow around one task, as data: what it waits for (``after``: its
dependencies and the children it added), what those wait for, and the tasks still
waiting on it (its dependants), each with its state and progress. ``taskfleet task``
prints it and the dashboard's task page draws it; both read it here (docs/flows.md).

Bounded: at most ``TREE_LIMIT`` tasks are read, level by level, one pipelined round
trip a level, a few fields each (never a payload or a result).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from taskfleet.protocol.calls import run, run_all
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.reads import FlowRow, QueueReads

__all__ = ["TREE_LIMIT", "FlowNode", "FlowTree", "flow_tree", "fraction"]

#: At most this many tasks of a flow's tree are read and shown.
TREE_LIMIT = 200
#: Of those, at most this many of the tasks still waiting on the task shown.
DEPENDANTS_SHOWN = 50


@dataclass(frozen=True)
class FlowNode:
    """One line of the tree: ``depth`` 0 is the task asked for, 1 what it waits for...
    ``state`` '' : gone (pruned by retention, or never stored)."""

    id: str
    depth: int
    state: str
    deps_left: int | None = None
    progress: Any = None

    @property
    def gone(self) -> bool:
        return not self.state

    @property
    def done_fraction(self) -> float | None:
        return fraction(self.progress)


@dataclass(frozen=True)
class FlowTree:
    """``nodes``: the task, then what it waits for, depth first, each task once;
    ``dependants``: tasks still waiting on it; ``cut``: the bound left some out."""

    nodes: list[FlowNode] = field(default_factory=list)
    dependants: list[FlowNode] = field(default_factory=list)
    cut: bool = False

    @property
    def empty(self) -> bool:
        """Nothing but the task itself: no flow to show."""
        return len(self.nodes) <= 1 and not self.dependants


def flow_tree(
    client: SyncClient, reads: QueueReads, task_id: str, limit: int = TREE_LIMIT
) -> FlowTree:
    """The tree around ``task_id`` (see the module's docstring), at most ``limit`` tasks."""
    dependants, (root,) = run_all(
        client, [reads.dependants(task_id, DEPENDANTS_SHOWN), reads.flow_rows([task_id])]
    )
    dependants = [d for d in dependants if d != task_id][: max(0, limit - 1)]
    found: dict[str, FlowRow] = {task_id: root}
    level = [task_id]
    cut = False
    while level:
        wanted: list[str] = []
        for tid in level:
            for dep in found[tid].after:
                if dep not in found and dep not in wanted:
                    wanted.append(dep)
        room = limit - len(found) - len(dependants)
        if len(wanted) > room:
            wanted, cut = wanted[: max(0, room)], True
        if not wanted:
            break
        for row in run(client, reads.flow_rows(wanted)):
            found[row.id] = row
        level = wanted
    above = run(client, reads.flow_rows(dependants)) if dependants else []
    return FlowTree(
        nodes=_depth_first(found, task_id),
        dependants=[_node(row, 0) for row in above],
        cut=cut,
    )


def _node(row: FlowRow, depth: int) -> FlowNode:
    return FlowNode(row.id, depth, row.state, row.deps_left, row.progress)


def _depth_first(found: dict[str, FlowRow], root: str) -> list[FlowNode]:
    """The rows read, from ``root`` down its ``after`` lists, each once (a task two
    others wait on is shown under the first)."""
    nodes: list[FlowNode] = []
    seen: set[str] = set()
    stack = [(root, 0)]
    while stack:
        tid, depth = stack.pop()
        if tid in seen or tid not in found:
            continue
        seen.add(tid)
        row = found[tid]
        nodes.append(_node(row, depth))
        stack.extend((dep, depth + 1) for dep in reversed(row.after))
    return nodes


def fraction(progress: Any) -> float | None:
    """A progress value as 0..1 when it reads as one: a number in 0..1, a percentage in
    1..100, or ``{"done": d, "total": t}`` / ``{"current": c, "total": t}``; else None."""
    if isinstance(progress, dict):
        done = _number(progress.get("done", progress.get("current")))
        total = _number(progress.get("total"))
        if done is None or total is None or total <= 0:
            return None
        return min(1.0, max(0.0, done / total))
    number = _number(progress)
    if number is None or not 0 <= number <= 100:
        return None
    return number if number <= 1 else number / 100


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
