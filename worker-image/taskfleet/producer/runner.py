"""How a call of the producer API runs: a plan of steps, driven by a sync or an async runner.

Every public call of ``Queue`` and ``AsyncQueue`` is written once, by feature
(``enqueueing``, ``control``, ``scheduling``, ``grouping``, ``flowcontrol``, ``quotas``,
``reading``, ``operating``), as a **plan**: a generator that yields each step (a read, a
script call, a pause) and receives its reply. It does no I/O. ``sync`` and ``asyncs``
turn a plan into a method of the sync or the asyncio API; ``facade`` lists the plans and
checks that each runner offers every one, so the two APIs cannot drift apart.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis.asyncio

from taskfleet.protocol.calls import (
    Call,
    Scan,
    run,
    run_all,
    run_all_async,
    run_async,
    scan,
    scan_async,
)
from taskfleet.protocol.connect import Durability, SyncClient
from taskfleet.protocol.control_ops import ControlOps
from taskfleet.protocol.durable import run_and_wait, run_and_wait_async
from taskfleet.protocol.errors import NotReplicated
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.queue_ops import Ops
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.schedule_ops import ScheduleOps
from taskfleet.protocol.scripts import AsyncScripts, Op, SyncScripts

__all__ = [
    "Emit",
    "Keys",
    "Plan",
    "QueueBase",
    "Sleep",
    "Together",
    "Write",
    "async_stream",
    "asyncs",
    "sync",
    "sync_stream",
    "taking",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
S = TypeVar("S")

#: A call's plan: yields ``Call``, ``Op``, ``Write``, ``Together``, ``Keys``, ``Sleep``
#: (and ``Emit`` in a stream), receives each reply, returns the call's answer.
Plan = Generator[Any, Any, R]


@dataclass(slots=True)  # not frozen: built on every enqueue, and a frozen one costs more
class Write:
    """An enqueue's script call: it waits for replicas when the queue's durability asks."""

    op: Op[list[bool]]
    task_ids: list[str]


@dataclass(frozen=True, slots=True)
class Together:
    """Reads sent in one round trip (a pipeline); the reply is the list of their answers."""

    calls: tuple[Call[Any], ...]


@dataclass(frozen=True, slots=True, eq=False)
class Keys:
    """The next (at most) ``batch`` keys ``scan`` finds; ``[]`` once it has found all."""

    scan: Scan[Any]
    batch: int


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds`` (a poll's interval)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Emit:
    """A value a streaming call (``follow``) hands its caller now."""

    value: Any


def _socket_timeout(client: Any) -> float | None:
    pool = getattr(client, "connection_pool", None)  # a cluster client has one per node
    value = pool.connection_kwargs.get("socket_timeout") if pool is not None else None
    return float(value) if value else None


class QueueBase:
    """What a plan reads of its queue: the name, the protocol's builders for its keys,
    and how long its client waits on a socket (a blocking pop must answer first)."""

    name: str
    keys: QueueKeys
    ops: Ops
    schedule_ops: ScheduleOps
    control_ops: ControlOps
    reads: QueueReads
    durability: Durability
    socket_timeout: float | None

    def _bind(self, name: str, client: Any, durability: Durability) -> None:
        self.name = name
        self.keys = QueueKeys(name)
        self.ops = Ops(self.keys)
        self.schedule_ops = ScheduleOps(self.keys)
        self.control_ops = ControlOps(self.keys)
        self.reads = QueueReads(self.keys)
        self.durability = durability
        self.socket_timeout = _socket_timeout(client)


def taking(
    encoder: Callable[P, T],
) -> Callable[[Callable[[S, T], R]], Callable[Concatenate[S, P], R]]:
    """A plan that takes ``encoder``'s arguments and receives what it returns: the
    arguments are written once, in ``encoder`` (``help`` and ``inspect`` show them)."""

    def decorate(fn: Callable[[S, T], R]) -> Callable[Concatenate[S, P], R]:
        def call(target: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return fn(target, encoder(*args, **kwargs))

        functools.update_wrapper(call, fn)
        call.__taking__ = (fn, encoder)  # type: ignore[attr-defined]  # for sync's one call
        first = next(iter(inspect.signature(fn).parameters.values()))
        params = inspect.signature(encoder).parameters.values()
        returns = inspect.signature(fn).return_annotation
        call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [first, *params], return_annotation=returns
        )
        return call

    return decorate


def _as_method(call: Any, plan: Callable[..., Any], returns: str | None = None) -> None:
    """``call`` documented as ``plan`` is, as a method: ``self`` first, and the plan's
    answer (or ``returns``) as what it returns."""
    functools.update_wrapper(call, plan)
    call.__plan__ = plan
    signature = inspect.signature(plan)
    first, *rest = signature.parameters.values()
    answer = signature.return_annotation
    if returns is None and isinstance(answer, str) and answer.startswith("Plan["):
        returns = answer[len("Plan[") : -1]
    call.__signature__ = signature.replace(
        parameters=[first.replace(name="self"), *rest],
        return_annotation=answer if returns is None else returns,
    )


# -- the sync runner ---------------------------------------------------------------------


class SyncRunner(QueueBase):
    client: SyncClient
    _scripts: SyncScripts


def _write(runner: SyncRunner, step: Write) -> list[bool]:
    durability = runner.durability
    if not durability.waits:
        return runner._scripts.run(step.op)
    created, acked = run_and_wait(runner._scripts, step.op, durability)
    if acked < durability.replicas:
        raise NotReplicated(acked, durability.replicas, durability.timeout_ms, step.task_ids)
    return created


def _reply(runner: SyncRunner, step: Any, scans: dict[int, Iterator[Any]]) -> Any:
    """What ``step`` answers, run on ``runner``'s client."""
    if isinstance(step, Write):
        return _write(runner, step)
    if isinstance(step, Op):
        return runner._scripts.run(step)
    if isinstance(step, Call):
        return run(runner.client, step)
    if isinstance(step, Together):
        return run_all(runner.client, step.calls)
    if isinstance(step, Keys):
        found = scans.setdefault(id(step.scan), scan(runner.client, step.scan))
        return [key for _, key in zip(range(step.batch), found, strict=False)]
    if isinstance(step, Sleep):
        time.sleep(step.seconds)
        return None
    raise TypeError(f"not a step of this plan: {step!r}")


def drive(runner: SyncRunner, plan: Plan[R]) -> R:
    """The answer of ``plan``, run on ``runner``'s client."""
    scans: dict[int, Iterator[Any]] = {}
    try:
        step = next(plan)
        while True:
            if step.__class__ is Write and not runner.durability.waits:  # an enqueue: first
                step = plan.send(runner._scripts.run(step.op))
            else:
                step = plan.send(_reply(runner, step, scans))
    except StopIteration as stop:
        value: R = stop.value
        return value


def sync(plan: Callable[Concatenate[Any, P], Plan[R]]) -> Callable[Concatenate[Any, P], R]:
    """``plan`` as a method of the sync API (``Queue``)."""

    taken = getattr(plan, "__taking__", None)
    if taken is None:

        def call(self: SyncRunner, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return drive(self, plan(self, *args, **kwargs))

    else:  # the arguments straight to their encoder: an enqueue crosses one call less
        fn: Callable[[Any, Any], Plan[R]] = taken[0]
        encoder: Callable[..., Any] = taken[1]

        def call(self: SyncRunner, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return drive(self, fn(self, encoder(*args, **kwargs)))

    _as_method(call, plan)
    return call


def sync_stream(
    plan: Callable[Concatenate[Any, P], Plan[None]], item: type[T]
) -> Callable[Concatenate[Any, P], Iterator[T]]:
    """``plan`` as a method of the sync API that yields what the plan emits (``item``s)."""

    def call(self: SyncRunner, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        steps = plan(self, *args, **kwargs)
        scans: dict[int, Iterator[Any]] = {}
        reply: Any = None
        while True:
            try:
                step = steps.send(reply)
            except StopIteration:
                return
            if isinstance(step, Emit):
                yield step.value
                reply = None
            else:
                reply = _reply(self, step, scans)

    _as_method(call, plan, f"Iterator[{item.__name__}]")
    return call


# -- the asyncio runner ------------------------------------------------------------------


class AsyncRunner(QueueBase):
    client: redis.asyncio.Redis
    _scripts: AsyncScripts


async def _write_async(runner: AsyncRunner, step: Write) -> list[bool]:
    durability = runner.durability
    if not durability.waits:
        return await runner._scripts.run(step.op)
    created, acked = await run_and_wait_async(runner._scripts, step.op, durability)
    if acked < durability.replicas:
        raise NotReplicated(acked, durability.replicas, durability.timeout_ms, step.task_ids)
    return created


async def _reply_async(runner: AsyncRunner, step: Any, scans: dict[int, AsyncIterator[Any]]) -> Any:
    """``_reply`` on the asyncio client."""
    if isinstance(step, Write):
        return await _write_async(runner, step)
    if isinstance(step, Op):
        return await runner._scripts.run(step)
    if isinstance(step, Call):
        return await run_async(runner.client, step)
    if isinstance(step, Together):
        return await run_all_async(runner.client, step.calls)
    if isinstance(step, Keys):
        found = scans.setdefault(id(step.scan), scan_async(runner.client, step.scan))
        out: list[Any] = []
        while len(out) < step.batch:
            try:
                out.append(await anext(found))
            except StopAsyncIteration:
                break
        return out
    if isinstance(step, Sleep):
        await asyncio.sleep(step.seconds)
        return None
    raise TypeError(f"not a step of this plan: {step!r}")


async def drive_async(runner: AsyncRunner, plan: Plan[R]) -> R:
    """``drive`` on an asyncio client."""
    scans: dict[int, AsyncIterator[Any]] = {}
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as stop:
            value: R = stop.value
            return value
        if step.__class__ is Write and not runner.durability.waits:  # an enqueue: first
            reply = await runner._scripts.run(step.op)
        else:
            reply = await _reply_async(runner, step, scans)


def asyncs(
    plan: Callable[Concatenate[Any, P], Plan[R]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """``plan`` as a coroutine method of the asyncio API (``AsyncQueue``)."""

    taken = getattr(plan, "__taking__", None)
    if taken is None:

        async def call(self: AsyncRunner, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return await drive_async(self, plan(self, *args, **kwargs))

    else:  # as ``sync``: the arguments straight to their encoder
        fn: Callable[[Any, Any], Plan[R]] = taken[0]
        encoder: Callable[..., Any] = taken[1]

        async def call(self: AsyncRunner, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return await drive_async(self, fn(self, encoder(*args, **kwargs)))

    _as_method(call, plan)
    return call


def async_stream(
    plan: Callable[Concatenate[Any, P], Plan[None]], item: type[T]
) -> Callable[Concatenate[Any, P], AsyncIterator[T]]:
    """``plan`` as an async-iterator method of the asyncio API (of ``item``s)."""

    async def call(self: AsyncRunner, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        steps = plan(self, *args, **kwargs)
        scans: dict[int, AsyncIterator[Any]] = {}
        reply: Any = None
        while True:
            try:
                step = steps.send(reply)
            except StopIteration:
                return
            if isinstance(step, Emit):
                yield step.value
                reply = None
            else:
                reply = await _reply_async(self, step, scans)

    _as_method(call, plan, f"AsyncIterator[{item.__name__}]")
    return call
