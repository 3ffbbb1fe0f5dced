"""Handlers that break the error path: what they raise or return is built from a recipe in
the payload, so a test (or a hypothesis strategy) describes a hostile object as JSON and a
real worker process meets the real thing.

``payload["raise"]``: an exception recipe (``build_exception``); ``payload["return"]``: a
return-value recipe (``build_result``); ``payload["cancel_self"]``: an async handler
cancels its own task (``asyncio.current_task().cancel()``) and awaits. ``sync_breaker``
and ``async_breaker`` are the same handler run on a thread and on the loop.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, NoReturn

from taskfleet import PermanentFailure, RetryAfter

#: Exception classes a recipe may derive from, by name.
BASES: dict[str, type[BaseException]] = {
    "Exception": Exception,
    "ValueError": ValueError,
    "RetryAfter": RetryAfter,
    "PermanentFailure": PermanentFailure,
    "SystemExit": SystemExit,
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
    "CancelledError": asyncio.CancelledError,
    "RecursionError": RecursionError,
    "BaseException": BaseException,
}

#: What a hostile method raises, by name.
RAISES: dict[str, type[BaseException]] = {
    "ValueError": ValueError,
    "SystemExit": SystemExit,
    "KeyboardInterrupt": KeyboardInterrupt,
    "RecursionError": RecursionError,
    "GeneratorExit": GeneratorExit,
    "CancelledError": asyncio.CancelledError,
}

#: Delays a recipe may set on the instance after construction (text for non-JSON floats).
DELAYS: dict[str, Any] = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "negative": -5.0,
    "huge": 1e300,
    "text": "soon",
    "bool": True,
    "zero": 0,
}


def _raiser(name: str) -> Any:
    kind = RAISES[name]

    def method(self: Any, *args: Any) -> NoReturn:
        raise kind("raised by a hostile method")

    return method


def build_exception(recipe: dict[str, Any]) -> BaseException:
    """An instance of a fresh subclass of ``recipe["base"]`` with the asked-for faults."""
    base = BASES[recipe.get("base", "Exception")]
    namespace: dict[str, Any] = {}
    if recipe.get("skip_init"):
        namespace["__init__"] = lambda self, *args: None  # super().__init__ never runs
    for dunder in ("str", "repr"):
        if recipe.get(dunder):
            namespace[f"__{dunder}__"] = _raiser(recipe[dunder])
    if recipe.get("class"):
        namespace["__class__"] = property(_raiser(recipe["class"]))
    if recipe.get("args"):
        namespace["args"] = property(_raiser(recipe["args"]))
    if recipe.get("traceback"):
        namespace["__traceback__"] = property(_raiser(recipe["traceback"]))
    if recipe.get("str_subclass"):
        namespace["__str__"] = lambda self: _HostileText("text with hostile methods")
    kind = type(str(recipe.get("name", "Hostile")), (base,), namespace)
    # a lone surrogate can't travel in a payload: the recipe asks for one by flag
    message = ("\ud800 " if recipe.get("surrogate") else "") + str(recipe.get("message", ""))
    if base is RetryAfter and not recipe.get("skip_init"):
        exc = kind(float(recipe.get("init_delay", 0)), message)
    else:
        exc = kind(message)
    if "delay" in recipe:
        exc.__dict__["delay"] = DELAYS[recipe["delay"]]
    return exc


class _HostileText(str):
    """What a ``__str__`` may return: a str whose every method raises."""

    __slots__ = ()

    def replace(self, *args: Any, **kwargs: Any) -> NoReturn:  # type: ignore[override]
        raise SystemExit("hostile str.replace")

    def __format__(self, spec: str) -> NoReturn:
        raise SystemExit("hostile str.__format__")

    def strip(self, *args: Any) -> NoReturn:  # type: ignore[override]
        raise SystemExit("hostile str.strip")


class _HostileDict(dict[str, Any]):
    def __init__(self, raises: str) -> None:
        super().__init__(a=1)
        self.raises = raises

    def items(self) -> NoReturn:  # type: ignore[override]
        raise RAISES[self.raises]("hostile items()")

    def keys(self) -> NoReturn:  # type: ignore[override]
        raise RAISES[self.raises]("hostile keys()")


class _HostileFloat(float):
    def __repr__(self) -> NoReturn:
        raise SystemExit("hostile float repr")


def build_result(recipe: dict[str, Any]) -> Any:
    """A return value that is not JSON data, or whose serialisation raises."""
    kind = recipe.get("kind")
    if kind == "object":
        return object()
    if kind == "nan":
        return {"x": math.nan}
    if kind == "dict":
        return _HostileDict(recipe.get("raises", "SystemExit"))
    if kind == "float":
        return [_HostileFloat(1.5)]
    if kind == "deep":
        value: Any = []
        for _ in range(int(recipe.get("depth", 100_000))):
            value = [value]
        return value
    if kind == "circular":
        loop: list[Any] = []
        loop.append(loop)
        return loop
    if kind == "surrogate":
        return {"text": "\ud800 lone"}
    if kind == "text":
        return "x" * int(recipe.get("size", 10))
    return recipe.get("value")


def _break(payload: dict[str, Any]) -> Any:
    if "raise" in payload:
        raise build_exception(payload["raise"])
    return build_result(payload.get("return", {}))


def sync_breaker(payload: dict[str, Any]) -> Any:
    return _break(payload)


async def async_breaker(payload: dict[str, Any]) -> Any:
    if payload.get("cancel_self"):
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # its own task: the worker never asked for this cancellation
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    return _break(payload)


def leave_child(payload: dict[str, Any]) -> dict[str, int]:
    """Fork a process that ignores SIGTERM and sleeps, and return without waiting for it:
    when the worker exits it would be an orphan. Returns its pid."""
    import os
    import signal
    import time

    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(float(payload.get("seconds", 120)))
        os._exit(0)
    return {"child": child}
