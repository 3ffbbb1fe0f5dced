"""A state machine's legal transitions, declared once as a table and checked on each move.

The worker has two: its own phases (``lifecycle.Phase``) and each held task's state
(``runs.RunState``). A move the table does not list is a bug of the worker, never a
condition to handle: ``IllegalTransition`` says which machine, from where and to where.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

__all__ = ["IllegalTransition", "Transitions"]

S = TypeVar("S", bound=enum.Enum)


class IllegalTransition(RuntimeError):  # noqa: N818 - names the bug, as KeyError does
    """A move its state machine does not allow."""


class Transitions(Generic[S]):
    """``table[state]``: the states a machine may move to from ``state`` (none: final).

    Every member of the enum must have its row, so a state added later can't be
    forgotten here.
    """

    __slots__ = ("_next", "name")

    def __init__(self, name: str, table: Mapping[S, Iterable[S]]) -> None:
        members = set(type(next(iter(table))))
        if set(table) != members:
            missing = sorted(m.name for m in members - set(table))
            raise ValueError(f"{name}: no row for {', '.join(missing)}")
        self.name = name
        self._next = {state: frozenset(targets) for state, targets in table.items()}

    def allows(self, old: S, new: S) -> bool:
        return new in self._next[old]

    def check(self, old: S, new: S) -> None:
        """``IllegalTransition`` unless the table lists ``old -> new``."""
        if new not in self._next[old]:
            raise IllegalTransition(f"{self.name}: {old.name} -> {new.name} is not a transition")

    def targets(self, old: S) -> frozenset[S]:
        return self._next[old]

    def rows(self) -> list[tuple[S, list[S]]]:
        """The table in declaration order, targets too: for a test or a document."""
        order = list(type(next(iter(self._next))))
        return [(s, sorted(self._next[s], key=order.index)) for s in order]
