"""The worker's side of tracing: each run of a handler in a span whose parent is the
enqueue's (``protocol.tracing``). Installed only when a tracer provider is configured as
the worker starts; otherwise handlers are called as they are, and claims fetch nothing."""

from __future__ import annotations

from typing import Any

from taskfleet.protocol import tracing
from taskfleet.worker.context import current_task
from taskfleet.worker.handlers import Handler
from taskfleet.worker.named import HandlerSet


def traced(handlers: HandlerSet, queue: str) -> HandlerSet:
    """``handlers``, each call inside a ``process <queue>`` span (same way of running)."""
    default = None if handlers.default is None else _traced(handlers.default, queue)
    named = {name: _traced(h, queue) for name, h in handlers.named.items()}
    return HandlerSet(default, named)


def _traced(handler: Handler, queue: str) -> Handler:
    func = handler.func
    if handler.is_async:

        async def run_async(payload: dict[str, Any]) -> Any:
            task = current_task()
            with tracing.run_span(queue, task.task_id, task.attempt, task.trace):
                return await func(payload)

        return Handler(handler.ref, run_async, True)

    def run(payload: dict[str, Any]) -> Any:
        task = current_task()
        with tracing.run_span(queue, task.task_id, task.attempt, task.trace):
            return func(payload)

    return Handler(handler.ref, run, False)
