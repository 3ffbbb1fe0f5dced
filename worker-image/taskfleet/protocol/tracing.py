"""Trace context that travels with a task (OpenTelemetry; the ``opentelemetry`` extra).

A producer that enqueues inside a configured tracer provider opens an ``enqueue`` span and
stores its context with the task (the task hash's ``trace`` field: the propagator's
carrier as compact JSON, e.g. ``{"traceparent": "00-..."}``); the worker that runs the
task opens a ``run`` span whose parent is that context. So a handler's span is a child of
the producer's, in the same trace, however long the task waited and whichever pod ran it.

Off costs nothing: without ``opentelemetry-api`` installed, or with no tracer provider
configured (the API's default proxy), nothing here is called on the enqueue or claim
path. The producer asks `configured` on every enqueue; the worker asks `configured_now`
once at start (after the handler module, which may configure a provider, is imported).

Why `configured` caches, and how the cache stays true: the API's answer costs about 5 µs
while no provider is set (``get_tracer_provider`` looks ``OTEL_PYTHON_TRACER_PROVIDER`` up
in ``os.environ``, a ``KeyError`` raised and caught each time), a twentieth of a whole
enqueue's client CPU. A provider, once set, is set for good (the API refuses a second
one), so "configured" is kept for ever. "Not configured" is kept for `RECHECK_S` and then
asked again: a provider set while a process is already enqueueing is seen within that
time, and one set before the process's first enqueue (the usual place: at start, or by
``opentelemetry-instrument``) is seen by that first enqueue. Reading the answer once per
`Queue` was the other way: it would miss a provider configured after a module-level
`Queue` was created, which an application's start-up hook commonly does.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = [
    "TRACE_FIELD",
    "carrier_text",
    "configured",
    "configured_now",
    "enqueue_span",
    "run_span",
]

#: The task hash field that holds the producer's trace context.
TRACE_FIELD = "trace"
#: A stored carrier is at most this long (a foreign writer's field is ignored beyond it).
MAX_CARRIER_CHARS = 4096


@functools.cache
def _trace_api() -> Any:
    """``opentelemetry.trace``, or None when the API is not installed (looked up once)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


#: How long `configured` keeps an answer of "no provider" before asking the API again (s).
RECHECK_S = 1.0


class _Seen:
    """`configured`'s last answer: a provider for good, its absence until ``recheck_at``
    (``time.monotonic``). Threads may race to ask: each writes the same answer."""

    configured = False
    recheck_at = 0.0


_seen = _Seen()


def configured() -> bool:
    """A tracer provider other than the API's default (proxy or no-op) is set.

    Asked on every enqueue, so cached (the module's note says why and how): once a
    provider is seen, for good; "none" for up to `RECHECK_S` after the last look.
    """
    if _seen.configured:
        return True
    now = time.monotonic()
    if now < _seen.recheck_at:
        return False
    if configured_now():
        return True
    _seen.recheck_at = now + RECHECK_S
    return False


def configured_now() -> bool:
    """`configured`, asked of the OpenTelemetry API now (and the answer kept)."""
    api = _trace_api()
    if api is None:
        return False
    provider = api.get_tracer_provider()
    defaults = (api.ProxyTracerProvider, api.NoOpTracerProvider)
    # the exact type first: isinstance on these ABCs costs more than the rest of the check
    if type(provider) in defaults or isinstance(provider, defaults):
        return False
    _seen.configured = True
    return True


def _tracer() -> Any:
    from taskfleet._version import __version__

    return _trace_api().get_tracer("taskfleet", __version__)


def carrier_text() -> str:
    """The current context as the stored carrier ('' when there is nothing to propagate)."""
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return json.dumps(carrier, separators=(",", ":"), sort_keys=True) if carrier else ""


def _context_from(text: str | bytes | None) -> Any:
    """The context a stored carrier names; None for none or an unreadable one (a task's
    trace is a courtesy: it never stops the task from running)."""
    if not text or len(text) > MAX_CARRIER_CHARS:
        return None
    try:
        carrier = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(carrier, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in carrier.items()
    ):
        return None
    from opentelemetry import propagate

    return propagate.extract(carrier)


@contextmanager
def enqueue_span(queue: str, count: int) -> Iterator[Span]:
    """The producer's span around one enqueue call (one task or a batch)."""
    from opentelemetry.trace import SpanKind

    attributes: Mapping[str, Any] = {
        "messaging.system": "taskfleet",
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
        "messaging.batch.message_count": count,
    }
    with _tracer().start_as_current_span(
        f"send {queue}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        yield span


@contextmanager
def run_span(queue: str, task_id: str, attempt: int, carrier: str | bytes | None) -> Iterator[Span]:
    """The worker's span around one run of a handler, a child of the enqueue's span.

    An exception the handler raises is recorded on the span (and marks it an error) and
    goes on to the worker, which fails the attempt as usual.
    """
    from opentelemetry.trace import SpanKind

    attributes: Mapping[str, Any] = {
        "messaging.system": "taskfleet",
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": task_id,
        "taskfleet.task.attempt": attempt,
    }
    with _tracer().start_as_current_span(
        f"process {queue}",
        context=_context_from(carrier),
        kind=SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:
        yield span
