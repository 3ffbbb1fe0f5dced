"""The Lua scripts of the queue protocol, run: ``Op`` values on a sync or an async client.

Each state change is one script, sent as the text committed in ``bundle/<name>.lua``
(built from ``lua/`` by ``python -m taskfleet.protocol.bundle``; read here, never
assembled). Its arguments are declared once in ``signatures``: an op builder
(``queue_ops``, ``control_ops``, ``schedule_ops``, ...) makes the script's argument tuple
by name and sends it as is.

Calls are described by :class:`Op` values: the script, its keys and arguments, and a
decoder that turns the reply into Python values and return codes into exceptions. The
same ``Op`` runs on a sync client (:class:`SyncScripts`, producers and the operator) or
an async one (:class:`AsyncScripts`, the worker), so encoding and decoding exist once.
Scripts are registered once per client and called with EVALSHA packed by ``wire``;
a script the server lost (a restarted Redis) is loaded again and the call resent.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis
import redis.asyncio
from redis.commands.core import AsyncScript, Script
from redis.exceptions import NoScriptError

from taskfleet.protocol import wire
from taskfleet.protocol.bundle import NAMES, source
from taskfleet.protocol.connect import SyncClient

T = TypeVar("T")
Arg = str | int | float | bytes

#: Packed call heads kept per client (one per script and queue); past it they are rebuilt.
HEADS_CACHED = 1024


@dataclass(frozen=True, slots=True)
class Op(Generic[T]):
    """One script call: what to run and how to read the reply."""

    script: str
    keys: Sequence[str]
    args: Sequence[Arg]
    decode: Callable[[Any], T]
    packed: bytes | None = None  # wire.packed_args(args), when known for less: _packed_one
    #: The op to send instead when this one answers [0], having stored nothing: a lean
    #: script's way of leaving a call to the whole one (enqueue_plain's idle workers).
    fallback: Callable[[], Op[T]] | None = None

    def instead(self, raw: Any) -> Op[T] | None:
        """The op to send now that this one answered ``raw``, if it stored nothing."""
        if self.fallback is not None and isinstance(raw, list) and raw == [0]:
            return self.fallback()
        return None


class _Commands:
    """Script calls packed for the wire (``wire``), the fixed head of each cached."""

    def __init__(self, scripts: dict[str, Any]) -> None:
        self._scripts = scripts
        self._heads: dict[tuple[str, tuple[str, ...]], wire.Head] = {}

    def command(self, op: Op[Any]) -> bytes:
        keys = op.keys if isinstance(op.keys, tuple) else tuple(op.keys)
        head = self._heads.get((op.script, keys))
        if head is None:
            if len(self._heads) >= HEADS_CACHED:  # a client serving very many queues
                self._heads.clear()
            head = self._heads[(op.script, keys)] = wire.Head(self._scripts[op.script].sha, keys)
        if op.packed is not None:
            return head.command_packed(len(op.args), op.packed)
        return head.command(op.args)


class SyncScripts:
    """The scripts registered on one sync client (``for_client``: once per client)."""

    def __init__(self, client: SyncClient) -> None:
        self.client = client
        self._scripts = {name: client.register_script(source(name)) for name in NAMES}
        self._commands = _Commands(self._scripts)
        self._pooled = wire.pooled(client)
        self._connections = (
            wire.Connections(client) if self._pooled and isinstance(client, redis.Redis) else None
        )

    @classmethod
    def for_client(cls, client: SyncClient) -> SyncScripts:
        scripts = _SYNC.get(client)
        if scripts is None:
            scripts = _SYNC[client] = cls(client)
        return scripts

    def run(self, op: Op[T]) -> T:
        # One EVALSHA, packed here and sent on a pooled connection (``wire``): a single
        # enqueue is mostly this call. A server that lost its scripts (restart, SCRIPT
        # FLUSH) gets the script loaded again and the same call sent once more.
        if self._connections is None:
            return self._run_on_client(op)
        command = self._commands.command(op)
        try:
            raw = self._connections.call(command)
        except NoScriptError:
            self.client.script_load(self._scripts[op.script].script)
            raw = self._connections.call(command)
        if op.fallback is not None and (other := op.instead(raw)) is not None:
            return self.run(other)
        return op.decode(raw)

    def _run_on_client(self, op: Op[T]) -> T:
        script = self._scripts[op.script]
        keys = op.keys
        execute: Callable[..., Any] = self.client.execute_command
        try:
            raw = execute("EVALSHA", script.sha, len(keys), *keys, *op.args)
        except NoScriptError:
            script.sha = self.client.script_load(script.script)
            raw = execute("EVALSHA", script.sha, len(keys), *keys, *op.args)
        if (other := op.instead(raw)) is not None:
            return self._run_on_client(other)
        return op.decode(raw)

    def script(self, name: str) -> Script:
        """The registered script ``name`` (its ``sha`` and ``script`` text)."""
        return self._scripts[name]

    def add_to(self, pipe: redis.client.Pipeline, op: Op[Any]) -> None:
        """Queue ``op`` on a pipeline of this client as a bare EVALSHA: no SCRIPT EXISTS
        round trip before the pipeline, as redis-py sends for a `Script` on one. Run the
        pipeline with ``raise_on_error=False`` and read each reply with `reply`, which
        runs an op again alone when the server had lost its script."""
        keys = op.keys
        queue: Callable[..., Any] = pipe.execute_command
        queue("EVALSHA", self._scripts[op.script].sha, len(keys), *keys, *op.args)

    def reply(self, op: Op[T], raw: Any) -> T:
        """``op``'s value from its reply in a pipeline (`add_to`): a lost script
        (NOSCRIPT: the script never ran) loaded and the op run again; another error
        raised; a lean script's "not mine" answered by the op it names."""
        if isinstance(raw, NoScriptError):
            self.client.script_load(self._scripts[op.script].script)
            return self.run(op)
        if isinstance(raw, Exception):
            raise raw
        if (other := op.instead(raw)) is not None:
            return self.run(other)
        return op.decode(raw)


class AsyncScripts:
    """The scripts registered on one asyncio client (``for_client``: once per client)."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.client = client
        self._scripts = {name: client.register_script(source(name)) for name in NAMES}
        self._commands = _Commands(self._scripts)
        self._pooled = wire.pooled(client)
        self._connections = wire.AsyncConnections(client) if self._pooled else None

    @classmethod
    def for_client(cls, client: redis.asyncio.Redis) -> AsyncScripts:
        scripts = _ASYNC.get(client)
        if scripts is None:
            scripts = _ASYNC[client] = cls(client)
        return scripts

    async def run(self, op: Op[T]) -> T:
        """``SyncScripts.run`` on the asyncio client: the same packed call, awaited."""
        if self._connections is None:
            raw = await self._scripts[op.script](keys=op.keys, args=op.args)
        else:
            command = self._commands.command(op)
            try:
                raw = await self._connections.call(command)
            except NoScriptError:
                await self.client.script_load(self._scripts[op.script].script)
                raw = await self._connections.call(command)
        if op.fallback is not None and (other := op.instead(raw)) is not None:
            return await self.run(other)
        return op.decode(raw)

    def script(self, name: str) -> AsyncScript:
        """The registered script ``name`` (its ``sha`` and ``script`` text)."""
        return self._scripts[name]


# Weak by key, yet each entry's scripts are bound to their client (redis-py's Script keeps
# it), so an entry keeps its client alive: a client closed for good is `release`d.
_SYNC: weakref.WeakKeyDictionary[SyncClient, SyncScripts] = weakref.WeakKeyDictionary()
_ASYNC: weakref.WeakKeyDictionary[redis.asyncio.Redis, AsyncScripts] = weakref.WeakKeyDictionary()


def release(client: SyncClient | redis.asyncio.Redis) -> None:
    """Forget ``client``'s scripts, so a client closed for good can be freed: without
    this, every client a process ever ran a script on stays in memory (its pool, parser
    buffers and scripts, about 60 KB), e.g. one per TaskQueue the operator served."""
    if isinstance(client, redis.asyncio.Redis):
        _ASYNC.pop(client, None)
    else:
        _SYNC.pop(client, None)
