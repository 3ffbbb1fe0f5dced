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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Where they were defined first: handlers and tests import them from here too.
from taskfleet.worker.context import TaskContext, context_for, current_task

__all__ = [
    "Handler",
    "HandlerLoadError",
    "TaskContext",
    "context_for",
    "current_task",
    "encode_result",
    "format_error",
    "load_handler",
    "put_app_dir_first",
    "resolve_handler",
]

#: How much of an exception's text is kept on the task; a traceback dump would bloat the hash.
MAX_ERROR_CHARS = 2000


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
    """``Type: message`` on one line, truncated: what a task records about a failed attempt."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not lose the outcome of the attempt
        message = "(the exception's message could not be read)"
    text = f"{type(exc).__name__}: {message}".replace("\n", " ").strip()
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    return text


#: One encoder for every result: ``json.dumps`` with options builds a new one per call.
_RESULT_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def encode_result(value: Any) -> str:
    """The handler's return value as JSON; raises TypeError/ValueError if it is not JSON data."""
    if value is None:
        return "null"
    try:
        return _RESULT_ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"handler result is not JSON-serialisable: {exc}") from None
