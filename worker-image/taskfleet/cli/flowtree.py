"""The tree of a flow that ``taskfleet task`` prints: what a task waits for, and what those
wait for, with their states and progress, and the tasks still waiting on it; read by
``producer.flowtree`` (the dashboard draws the same tree; docs/flows.md)."""

from __future__ import annotations

from typing import Any

from taskfleet.cli.options import terminal_safe
from taskfleet.producer.flowtree import TREE_LIMIT, FlowNode, FlowTree, flow_tree

__all__ = ["TREE_LIMIT", "tree_lines"]


def tree_lines(q: Any, task_id: str) -> list[str]:
    """The tree around ``task_id`` (``producer.flowtree``): one line a task, indented by
    depth, at most ``TREE_LIMIT`` tasks read; empty when it has no flow."""
    return lines_of(flow_tree(q.client, q.reads, task_id))


def lines_of(tree: FlowTree) -> list[str]:
    if tree.empty:
        return []
    lines = [_line(node, "  " * node.depth) for node in tree.nodes]
    if tree.cut:
        lines.append("  ...")
    if tree.dependants:
        lines.append("waited on by:")
        lines += [_line(node, "  ") for node in tree.dependants]
    return lines


def _line(node: FlowNode, indent: str) -> str:
    if node.gone:
        return f"{indent}{terminal_safe(node.id)}  (gone)"
    extra = f" {node.deps_left} left" if node.deps_left else ""
    done = node.done_fraction
    if done is not None:
        extra += f" {done * 100:.0f}%"
    return f"{indent}{terminal_safe(node.id)}  {node.state}{extra}"
