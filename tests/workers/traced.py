"""Handlers for tracing tests, in a worker whose handler module configures OpenTelemetry.

Importing this module sets a tracer provider with the SDK's in-memory exporter, as a
user's handler module would set theirs (with an OTLP exporter): the worker sees it at
start and runs each task in a span. A handler returns what it can see of its own span, or
(``report``) every span the worker process has finished so far, so a test reads them
through the queue itself.
"""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)


def described(span: ReadableSpan) -> dict[str, Any]:
    """A span as plain data (ids in hex, as the W3C traceparent spells them)."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
        "exception_types": [
            (event.attributes or {}).get("exception.type")
            for event in span.events
            if event.name == "exception"
        ],
    }


def _answer(payload: dict[str, Any]) -> Any:
    if payload.get("fail"):
        raise ValueError("boom")
    if payload.get("report"):
        return [described(span) for span in EXPORTER.get_finished_spans()]
    span = trace.get_current_span()
    assert isinstance(span, ReadableSpan), f"not in an SDK span: {span!r}"
    return described(span)


def handle(payload: dict[str, Any]) -> Any:
    return _answer(payload)


def inputs(payload: dict[str, Any]) -> Any:
    """The results its dependencies handed it (``dependency_results``)."""
    from taskfleet.worker.context import current_task

    return current_task().dependency_results()


async def handle_async(payload: dict[str, Any]) -> Any:
    await asyncio.sleep(0)
    return _answer(payload)
