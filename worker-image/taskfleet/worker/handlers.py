"""Loading the user's task handler from a ``module:function`` reference.

The worker resolves the handler once, before it touches Redis, so a typo in a manifest
fails the pod at start with one clear line instead of failing every task later.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Where they were defined first: handlers and tests import them from here too.
from taskfleet.protocol import bounds
from taskfleet.protocol.numbers import NON_FINITE_ERROR, number_problem, value_problem
from taskfleet.worker.context import (
    TaskContext,
    Verdict,
    context_for,
    current_task,
    retry_asked,
    verdict_of,
)

__all__ = [
    "Handler",
    "HandlerLoadError",
    "ResultTooLarge",
    "TaskContext",
    "context_for",
    "current_task",
    "encode_result",
    "failure_of",
    "format_error",
    "format_traceback",
    "load_handler",
    "put_app_dir_first",
    "resolve_handler",
]

#: How much of an exception's text is kept on the task; a traceback dump would bloat the hash.
MAX_ERROR_CHARS = 2000
#: How much of a failure's traceback its attempt keeps: the last frames, where it was raised.
MAX_TRACEBACK_CHARS = 4096


class HandlerLoadError(ValueError):
    """The handler reference cannot be resolved to a callable (the message says why)."""


@dataclass(frozen=True)
class Handler:
    """A resolved handler and how it must be run."""

    ref: str
    func: Callable[[dict[str, Any]], Any]
    is_async: bool

    @classmethod
    def of(cls, ref: str, func: Callable[[dict[str, Any]], Any]) -> Handler:
        return cls(ref=ref, func=func, is_async=_is_async_callable(func))


def _is_async_callable(obj: Any) -> bool:
    if inspect.iscoroutinefunction(obj):
        return True
    # Instances with an ``async def __call__`` are handlers too.
    call = getattr(obj, "__call__", None)  # noqa: B004 - we need the bound method itself
    return call is not None and inspect.iscoroutinefunction(call)


def put_app_dir_first(directory: str | None = None) -> str:
    """Put ``directory`` (default: the current one) at the front of ``sys.path``, as
    ``python -m``, ``celery -A`` and ``rq worker`` do: a console script's ``sys.path[0]``
    is its own ``bin/``, so without this ``taskfleet worker --handler myapp.tasks:f`` run
    from the project folder would not find ``myapp``. Absolute, so a handler's
    ``os.chdir`` changes nothing, and forked or spawned children import from the same
    place. Returns the directory; raises ``HandlerLoadError`` if it is not one."""
    try:
        path = os.path.abspath(directory if directory else os.getcwd())
    except FileNotFoundError:  # the current directory was removed under us
        raise HandlerLoadError("the current directory no longer exists: set --app-dir") from None
    if not os.path.isdir(path):
        raise HandlerLoadError(f"--app-dir {directory!r} is not a directory")
    if not sys.path or sys.path[0] != path:
        sys.path.insert(0, path)
    return path


def load_handler(ref: str) -> Handler:
    """Import ``module:function`` (the function part may be dotted: ``mod:Class.method``)."""
    obj = resolve_handler(ref)
    if not callable(obj):
        raise HandlerLoadError(f"handler {ref!r} is a {type(obj).__name__}, not callable")
    return Handler.of(ref, obj)


def resolve_handler(ref: str) -> Any:
    """The object ``module:attribute`` names (a function, or a registry of them)."""
    module_name, sep, attr_path = ref.partition(":")
    if not sep or not module_name or not attr_path:
        raise HandlerLoadError(f"handler {ref!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise HandlerLoadError(
                f"handler module {module_name!r} not found: looked in "
                f"{os.path.abspath(sys.path[0]) if sys.path else '.'} first (the worker's "
                "--app-dir), then the installed packages"
            ) from None
        raise HandlerLoadError(
            f"handler module {module_name!r} failed to import: {format_error(exc)}"
        ) from None
    except Exception as exc:  # a broken user module must not produce a traceback
        raise HandlerLoadError(
            f"handler module {module_name!r} failed to import: {format_error(exc)}"
        ) from None
    obj: Any = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HandlerLoadError(
                f"handler {ref!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from None
    return obj


def format_error(exc: BaseException) -> str:
    """``Type: message`` on one line, truncated: what a task records about a failed attempt.

    Never raises, whatever the exception does: its ``__str__`` may raise anything (even
    ``SystemExit``), return a ``str`` subclass with hostile methods, or hold lone
    surrogates Redis could not be sent; the attempt's outcome must still be written.
    """
    name = _type_name(exc)
    try:
        # str.__str__ turns a str subclass into a plain str without calling its methods
        message = str.__str__(str(exc))[: MAX_ERROR_CHARS + 1]  # cut first: it may be huge
    except BaseException:  # a broken __str__ must not lose the outcome
        message = "(the exception's message could not be read)"
    # an exception without a message (raise ValueError) is stored as its type's name
    return _one_line(f"{name}: {message}" if message.strip() else name)


def format_traceback(exc: BaseException) -> str:
    """The exception's traceback, its last ``MAX_TRACEBACK_CHARS`` characters (the frames
    nearest the raise: the handler's file and line); '' when it cannot be read. Never raises."""
    try:
        text = "".join(traceback.format_exception(exc))
    except BaseException:  # a hostile __str__ or a broken frame must not lose the outcome
        return ""
    if len(text) > MAX_TRACEBACK_CHARS:
        text = "..." + text[-(MAX_TRACEBACK_CHARS - 3) :]
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _type_name(exc: BaseException) -> str:
    try:
        return str.__str__(type(exc).__name__)
    except BaseException:  # a metaclass may make __name__ raise
        return "Exception"


def _one_line(text: str) -> str:
    text = text.replace("\n", " ").strip()
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    # lone surrogates can't be encoded as UTF-8 for Redis: kept as escapes instead
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def failure_of(exc: BaseException) -> tuple[str, Verdict | None]:
    """What a handler's exception makes of its attempt: the error text and the verdict
    (``PermanentFailure``, ``RetryAfter``, a result too large); never raises.

    A ``RetryAfter`` whose ``delay`` is missing or not within 0..``MAX_DELAY_S`` (a
    subclass that skipped ``__init__``, a delay set to nan afterwards) is an ordinary
    failure, retried after the queue's backoff, and its error says so.
    """
    error = format_error(exc)
    try:
        # type(), not isinstance(): that would call a hostile __class__
        if issubclass(type(exc), ResultTooLarge):
            return error, Verdict(permanent=True)
        verdict = verdict_of(exc)
        if verdict is None and retry_asked(exc):
            error = _one_line(f"{error} (RetryAfter without a valid delay: retried after backoff)")
    except BaseException:  # nothing above should raise; the outcome must be written anyway
        verdict = None
    return error, verdict


class ResultTooLarge(ValueError):  # noqa: N818 - says what happened
    """A handler's result is over what Redis can store (``bounds.MAX_PAYLOAD_BYTES``)."""


#: One encoder for every result: ``json.dumps`` with options builds a new one per call.
_RESULT_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def encode_result(value: Any) -> str:
    """The handler's return value as JSON; raises TypeError/ValueError if it is not JSON
    data (and whatever a hostile object's methods raise: callers catch everything)."""
    if value is None:
        return "null"
    try:
        text = _RESULT_ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        # a NaN or an infinity: name where it is (the encoder does not say)
        nan = isinstance(exc, ValueError) and str(exc).startswith(NON_FINITE_ERROR)
        problem = value_problem(value, "result") if nan else None
        raise TypeError(problem or f"handler result is not JSON-serialisable: {exc}") from None
    problem = number_problem(value, text.encode(), "result")
    if problem is not None:
        raise TypeError(problem)
    # ASCII JSON (ensure_ascii): its length is its size. Redis refuses a larger string.
    if len(text) > bounds.MAX_PAYLOAD_BYTES:
        raise ResultTooLarge(
            f"handler result is {len(text)} bytes, over the {bounds.MAX_PAYLOAD_BYTES} any "
            "task may store"
        )
    return text
