"""The worker's side of tracing: each run of a handler in a span whose parent is the
enqueue's (``protocol.tracing``). Installed only when a tracer provider is configured as
the worker starts; otherwise the handler is called as is, and claims fetch nothing."""

from __future__ import annotations

from typing import Any

from taskfleet.protocol import tracing
from taskfleet.worker.handlers import Handler, current_task


def traced(handler: Handler, queue: str) -> Handler:
    """``handler`` with each call inside a ``process <queue>`` span (same way of running)."""
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
