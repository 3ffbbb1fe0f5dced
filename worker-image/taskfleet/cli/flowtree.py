"""The tree of a flow that ``taskfleet task`` prints: what a task waits for, and what those
wait for, with their states (docs/flows.md)."""

from __future__ import annotations

from typing import Any

from taskfleet.cli.options import terminal_safe

#: At most this many tasks of a flow's tree are read and printed.
TREE_LIMIT = 200


def tree_lines(q: Any, task_id: str) -> list[str]:
    """The tasks ``task_id`` waits for (``after``: its dependencies and the children it
    added), theirs below them, with state and progress: one line each, at most
    ``TREE_LIMIT`` tasks read."""
    lines: list[str] = []
    seen: set[str] = set()

    def walk(tid: str, indent: str) -> None:
        if len(seen) >= TREE_LIMIT:
            if not lines or not lines[-1].endswith("..."):
                lines.append(f"{indent}...")
            return
        seen.add(tid)
        task = q.get(tid)
        if task is None:
            lines.append(f"{indent}{terminal_safe(tid)}  (gone)")
            return
        state = task.state.value
        extra = f" {task.deps_left} left" if task.deps_left else ""
        lines.append(f"{indent}{terminal_safe(tid)}  {state}{extra}")
        for dep in task.after:
            if dep not in seen:
                walk(dep, indent + "  ")

    walk(task_id, "")
    return lines
