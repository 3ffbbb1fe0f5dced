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

    __slots__ = ("_order", "name", "next_by_value")

    def __init__(self, name: str, table: Mapping[S, Iterable[S]]) -> None:
        members = set(type(next(iter(table))))
        if set(table) != members:
            missing = sorted(m.name for m in members - set(table))
            raise ValueError(f"{name}: no row for {', '.join(missing)}")
        self.name = name
        order = list(type(next(iter(table))))
        #: Targets by the old state's value, for a hot path's own check (a run moves on
        #: every task's path): an enum member's hash is a Python call, a str's is cached.
        self.next_by_value: dict[object, tuple[S, ...]] = {
            state.value: tuple(sorted(table[state], key=order.index)) for state in order
        }
        self._order = order

    def allows(self, old: S, new: S) -> bool:
        return new in self.next_by_value[old._value_]

    def check(self, old: S, new: S) -> None:
        """``IllegalTransition`` unless the table lists ``old -> new``."""
        if new not in self.next_by_value[old._value_]:
            raise IllegalTransition(f"{self.name}: {old.name} -> {new.name} is not a transition")

    def targets(self, old: S) -> tuple[S, ...]:
        return self.next_by_value[old.value]

    def rows(self) -> list[tuple[S, list[S]]]:
        """The table in declaration order, targets too: for a test or a document."""
        return [(s, list(self.next_by_value[s.value])) for s in self._order]
