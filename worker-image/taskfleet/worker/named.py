"""The handlers a worker serves, by task name (``--handler NAME=REF``, or a registry).

A ``--handler`` value is one of:

- ``module:function``: the default handler, for tasks enqueued without a name (the one
  handler of a worker that serves one kind of task, as ever);
- ``name=module:function``: the handler of tasks enqueued with ``task="name"``;
- ``module:REGISTRY`` where ``REGISTRY`` is a mapping of names to functions: one named
  handler per entry (a module registers its handlers by name in one dict).

Everything is resolved at start (a typo fails the pod with one line, before Redis is
touched). A claimed task whose name this worker does not serve goes dead at once, reason
``unknown task``, with the name and the names served in its error (``claimed.Served``);
it never reaches a handler and never stops the worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from taskfleet.protocol.tasknames import task_name_problem
from taskfleet.worker.claimed import Served
from taskfleet.worker.handlers import Handler, HandlerLoadError, load_handler, resolve_handler

__all__ = ["HandlerSet", "load_handlers"]


@dataclass(frozen=True)
class HandlerSet:
    """A worker's handlers: ``default`` for tasks without a name, ``named`` by task name."""

    default: Handler | None = None
    named: Mapping[str, Handler] = field(default_factory=dict)

    @classmethod
    def of(cls, handler: Handler | HandlerSet) -> HandlerSet:
        return handler if isinstance(handler, HandlerSet) else cls(default=handler)

    def for_task(self, name: str | None) -> Handler | None:
        return self.default if name is None else self.named.get(name)

    @property
    def served(self) -> Served:
        return Served(frozenset(self.named), unnamed=self.default is not None)

    @property
    def any_async(self) -> bool:
        return any(h.is_async for h in self.all())

    @property
    def ref(self) -> str:
        """What the worker runs, for its log line and metrics: ``mod:f`` for one default
        handler, else ``name=mod:f`` entries (the default one first, without a name)."""
        parts = [] if self.default is None else [self.default.ref]
        parts += [f"{name}={h.ref}" for name, h in sorted(self.named.items())]
        return " ".join(parts)

    def all(self) -> list[Handler]:
        """Every handler served, the default one first."""
        return ([] if self.default is None else [self.default]) + list(self.named.values())


def load_handlers(values: Iterable[str]) -> HandlerSet:
    """The handlers of ``--handler`` values (see the module's docstring); ``HandlerLoadError``
    for a reference that does not load, a bad name, a name given twice or two defaults."""
    default: Handler | None = None
    named: dict[str, Handler] = {}

    def add(name: str, handler: Handler) -> None:
        problem = task_name_problem(name)
        if problem:
            raise HandlerLoadError(f"handler {handler.ref!r}: {problem}")
        if name in named:
            raise HandlerLoadError(f"task name {name!r} has two handlers")
        named[name] = handler

    for value in values:
        name, sep, ref = value.partition("=")
        if sep:
            add(name, load_handler(ref))
            continue
        obj = resolve_handler(value)
        if isinstance(obj, Mapping):
            if not obj:
                raise HandlerLoadError(f"handler registry {value!r} is empty")
            for key, func in obj.items():
                add(str(key), _registered(value, key, func))
        else:
            if default is not None:
                raise HandlerLoadError(
                    f"two handlers for tasks without a name: {default.ref!r} and {value!r} "
                    "(give one a name: NAME=module:function)"
                )
            default = load_handler(value)
    if default is None and not named:
        raise HandlerLoadError("no handler given")
    return HandlerSet(default, named)


def _registered(registry: str, key: Any, func: Any) -> Handler:
    ref = f"{registry}[{key!r}]"
    if not callable(func):
        raise HandlerLoadError(f"handler {ref} is a {type(func).__name__}, not callable")
    return Handler.of(ref, func)
