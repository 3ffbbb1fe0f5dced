"""Plain Redis commands described as values, and the one place that sends them.

A read of a queue's state, and each of the few writes that are no script (the config
hash, a purge, a pop of a list), is a ``Call``: the commands to send, each a command name
and its arguments, and ``decode``, which reads their replies into typed values. Like a
script's ``Op`` (``scripts.py``) it holds no client and does no I/O: the builders
(``reads``, ``lists``, ``store``) spell every key and field, and a caller only chooses the
round trips: ``run`` on a sync client (one command: one call; several: one pipeline),
``run_async`` on an asyncio one, ``run_all`` / ``run_all_async`` for several calls (and
script ops) in one pipeline.

Replies are what redis-py gives for the command name (its response callbacks apply: a
dict for HGETALL, a set for SMEMBERS, a tuple for TIME); the decoders take the plain RESP
forms too (a flat list for a hash), so they hold for any client and either protocol.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis.asyncio
from redis.cluster import RedisCluster

from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.scripts import Op, SyncScripts

__all__ = [
    "Arg",
    "Call",
    "Command",
    "Scan",
    "add_to",
    "call",
    "one",
    "run",
    "run_all",
    "run_all_async",
    "run_async",
    "scan",
    "scan_async",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
Arg = str | int | float | bytes
#: One command: its name, then its arguments (``("HGET", key, field)``).
Command = tuple[Arg, ...]
#: Keys per SCAN step.
SCAN_COUNT = 1000


@dataclass(frozen=True, slots=True)
class Call(Generic[T_co]):
    """Commands to send together and how to read their replies (one per command)."""

    commands: tuple[Command, ...]
    decode: Callable[[Sequence[Any]], T_co]
    #: MULTI/EXEC around the commands: a write no reader may see half done.
    transaction: bool = False
    #: For a command of no key (TIME): a key of the queue whose server must answer it
    #: (on a cluster, the node of that key's slot; a pipeline there refuses such commands).
    route: str | None = None


def one(command: Command, parse: Callable[[Any], T], *, route: str | None = None) -> Call[T]:
    """A call of one command whose reply ``parse`` reads."""
    return Call((command,), lambda replies: parse(replies[0]), route=route)


def call(commands: Sequence[Command], decode: Callable[[Sequence[Any]], T]) -> Call[T]:
    """A call of several commands (none: it decodes ``[]`` without a round trip)."""
    return Call(tuple(commands), decode)


def add_to(pipe: Any, item: Call[Any]) -> None:
    """Queue ``item``'s commands on a pipeline (sync or asyncio: queueing is the same)."""
    if item.route is not None or item.transaction:
        raise ValueError("a routed or transactional call runs alone (run / run_async)")
    for command in item.commands:
        pipe.execute_command(*command)


def _execute(client: SyncClient, command: Command, route: str | None) -> Any:
    if route is not None and isinstance(client, RedisCluster):
        node = client.get_node_from_key(route)  # type: ignore[no-untyped-call]
        execute: Callable[..., Any] = client.get_redis_connection(node).execute_command
    else:
        execute = client.execute_command
    return execute(*command)


def run(client: SyncClient, item: Call[T]) -> T:
    """Send ``item`` on a sync client: a lone command as such, several in one pipeline."""
    if not item.commands:
        return item.decode([])
    if len(item.commands) == 1 and not item.transaction:
        return item.decode([_execute(client, item.commands[0], item.route)])
    if item.route is not None:
        raise ValueError("a routed call sends one command")
    pipe = client.pipeline(transaction=item.transaction)
    for command in item.commands:
        pipe.execute_command(*command)
    return item.decode(pipe.execute())


async def run_async(client: redis.asyncio.Redis, item: Call[T]) -> T:
    """``run`` on an asyncio client (a single server, or a client pinned to the queue's
    slot: ``connect.connect_queue_async``, so a routed call needs nothing more)."""
    execute: Callable[..., Any] = client.execute_command
    if not item.commands:
        return item.decode([])
    if len(item.commands) == 1 and not item.transaction:
        return item.decode([await execute(*item.commands[0])])
    pipe = client.pipeline(transaction=item.transaction)
    for command in item.commands:
        pipe.execute_command(*command)
    return item.decode(await pipe.execute())


def _split(
    items: Sequence[Call[Any] | Op[Any]],
    replies: Sequence[Any],
    scripts: SyncScripts | None = None,
) -> list[Any]:
    """Each item's value from its replies. With ``scripts``, the pipeline ran with
    ``raise_on_error=False``: an error reply of a call is raised here, in order (as the
    pipeline would have raised the first), and a script op's reply goes to
    `SyncScripts.reply` (which runs the op again when the server had lost its script)."""
    out: list[Any] = []
    at = 0
    for item in items:
        if isinstance(item, Op):
            if scripts is not None:
                out.append(scripts.reply(item, replies[at]))
            else:
                out.append(item.decode(replies[at]))
            at += 1
        else:
            n = len(item.commands)
            mine = replies[at : at + n]
            if scripts is not None:
                for raw in mine:
                    if isinstance(raw, Exception):
                        raise raw
            out.append(item.decode(mine))
            at += n
    return out


def run_all(client: SyncClient, items: Sequence[Call[Any] | Op[Any]]) -> list[Any]:
    """Several calls (and script ops) in one pipeline, one round trip; each one's value.

    No round trip when none has a command. A script op goes as EVALSHA of the scripts
    registered on ``client`` (``SyncScripts``); one the server lost is loaded and that op
    run again alone (a NOSCRIPT reply: it never ran)."""
    if not any(isinstance(i, Op) or i.commands for i in items):
        return [i.decode([]) for i in items if not isinstance(i, Op)]
    pipe = client.pipeline(transaction=False)
    scripts: SyncScripts | None = None
    for item in items:
        if isinstance(item, Op):
            scripts = scripts or SyncScripts.for_client(client)
            scripts.add_to(pipe, item)
        else:
            add_to(pipe, item)
    if scripts is None:
        return _split(items, pipe.execute())
    return _split(items, pipe.execute(raise_on_error=False), scripts)


async def run_all_async(client: redis.asyncio.Redis, items: Sequence[Call[Any]]) -> list[Any]:
    """``run_all`` on an asyncio client (calls only)."""
    if not any(i.commands for i in items):
        return [i.decode([]) for i in items]
    pipe = client.pipeline(transaction=False)
    for item in items:
        add_to(pipe, item)
    return _split(items, await pipe.execute())


@dataclass(frozen=True, slots=True)
class Scan(Generic[T]):
    """Keys matching ``pattern`` anywhere in the keyspace (every master of a cluster),
    each read by ``decode`` (None: not one of ours, skipped)."""

    pattern: str
    decode: Callable[[bytes | str], T | None]


def scan(client: SyncClient, keys: Scan[T], count: int = SCAN_COUNT) -> Iterator[T]:
    """What ``keys`` finds, in steps of ``count`` keys (never one blocking KEYS)."""
    for key in client.scan_iter(match=keys.pattern, count=count):
        found = keys.decode(key)
        if found is not None:
            yield found


async def scan_async(
    client: redis.asyncio.Redis, keys: Scan[T], count: int = SCAN_COUNT
) -> AsyncIterator[T]:
    """``scan`` on an asyncio client."""
    async for key in client.scan_iter(match=keys.pattern, count=count):
        found = keys.decode(key)
        if found is not None:
            yield found
