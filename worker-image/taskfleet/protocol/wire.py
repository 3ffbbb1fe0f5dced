"""Script calls as bytes on the wire: EVALSHA packed once per script, sent on a pooled connection.

redis-py's ``execute_command`` packs every argument of every call and runs a layer of
per-call machinery (retry wrapper, observability hooks, response callbacks) around one
socket write and one read; for a single enqueue that was most of the client's time. Here
the fixed part of a script call (``EVALSHA <sha> <numkeys> <keys...>``) is encoded once per
script and key set; each call encodes only its arguments and sends the lot in one write on
a connection of the client's own pool (so URL options, auth, TLS and the database stay
redis-py's), which a sync client keeps between calls (``Connections``). The reply goes
through the connection's parser (hiredis where installed): error replies raise redis-py's
exceptions, ``NoScriptError`` included, as before.

A connection error is retried with the connection's own ``Retry`` policy, exactly as
redis-py retries any command; the callers' scripts are safe to send twice (ids and tokens
make a repeated call a no-op or a refusal).

Everything here is redis-py's public API (a pool's ``get_connection``, a connection's
``send_packed_command``, ``read_response``, ``retry``) but what ``redisadapter`` does: the
check of a kept connection (sync: on a private attribute; asyncio: a public call named
differently across redis-py versions) and the write of an asyncio call (a private one).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio

from taskfleet.protocol import redisadapter

Arg = str | int | float | bytes


def bulk(value: Arg) -> bytes:
    """One RESP bulk string, encoded as redis-py encodes arguments (str UTF-8, float repr)."""
    if value.__class__ is int:
        packed = _SMALL.get(value)
        if packed is not None:
            return packed
        data = b"%d" % value
    elif isinstance(value, str):
        if not value:
            return b"$0\r\n\r\n"
        data = value.encode()
    else:
        data = _other(value)
    return b"$%d\r\n%b\r\n" % (len(data), data)


#: The small ints every call repeats (counts, flags, bounds, priorities), packed once.
_SMALL: dict[int, bytes] = {n: b"$%d\r\n%d\r\n" % (len(b"%d" % n), n) for n in range(-1000, 1001)}


def _other(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool):  # redis-py refuses bools too: say which
        raise redis.DataError(f"invalid script argument {value!r}: convert it to int or str")
    if isinstance(value, int):
        return b"%d" % value
    if isinstance(value, float):
        return repr(value).encode()
    raise redis.DataError(f"invalid script argument of type {type(value).__name__}")


def packed_args(args: Sequence[Arg]) -> bytes:
    return b"".join([bulk(a) for a in args])


class Head:
    """``EVALSHA <sha> <numkeys> <keys...>`` encoded once; ``command`` adds a call's args."""

    __slots__ = ("_fixed", "_words")

    def __init__(self, sha: str, keys: Sequence[str]) -> None:
        self._words = 3 + len(keys)
        self._fixed = bulk("EVALSHA") + bulk(sha) + bulk(len(keys)) + packed_args(keys)

    def command(self, args: Sequence[Arg]) -> bytes:
        return b"*%d\r\n%b%b" % (self._words + len(args), self._fixed, packed_args(args))

    def command_packed(self, count: int, packed: bytes) -> bytes:
        """``command`` for ``count`` arguments already packed (``packed_args``)."""
        return b"*%d\r\n%b%b" % (self._words + count, self._fixed, packed)


def pooled(client: Any) -> bool:
    """Whether calls may go straight to a pooled connection: not for a client pinned to one
    connection (``single_connection_client``), whose lock redis-py keeps."""
    if isinstance(client, redis.asyncio.Redis):
        return not client.single_connection_client
    if isinstance(client, redis.Redis):
        return client.connection is None
    return False  # a cluster client: redis-py routes each call by its keys


#: Forks this process descends from (counted in each child): a kept connection knows a
#: child without a ``getpid`` system call per call.
_FORKS = [0]


def _forked() -> None:
    _FORKS[0] += 1


os.register_at_fork(after_in_child=_forked)


class Connections:
    """Connections of one sync client's pool, kept for script calls between calls.

    Taking a connection from redis-py's pool and giving it back costs more than the rest
    of a single enqueue's Python work together (locks, a fork check, deprecation and
    observability wrappers); kept here (a ``deque``: thread-safe without a lock), a call
    costs a ``pop``, the pool's own check that the server has not closed the connection
    meanwhile (one ``poll``), and an ``append``. As many are kept as calls ever ran at
    once; a forked child never uses its parent's. They stay the pool's: closing the
    client disconnects them, and the next call connects again.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._pool: Any = client.connection_pool  # untyped in some redis-py versions
        self._idle: deque[Any] = deque()
        self._forks = _FORKS[0]

    def call(self, command: bytes) -> Any:
        """Send one packed command; the parsed reply."""
        if self._forks != _FORKS[0]:  # a forked child: the parent's sockets are not ours
            self._idle, self._forks = deque(), _FORKS[0]
        conn, check = self._take()
        try:
            return conn.retry.call_with_retry(
                lambda: redisadapter.send_read_sync(conn, command), lambda _error: conn.disconnect()
            )
        finally:
            # clean either way: an error reply was read whole, and anything else that
            # broke off a call (a dropped socket, an interrupt) disconnected it
            self._idle.append((conn, check))

    def _take(self) -> tuple[Any, redisadapter.IdleCheck | None]:
        """A kept connection, checked as the pool checks it (``redisadapter.ready``)."""
        try:
            conn, check = self._idle.pop()
        except IndexError:
            return self._pool.get_connection(), None
        return conn, redisadapter.ready(conn, check)


class AsyncConnections:
    """``Connections`` for an asyncio client: connections of its pool kept between calls.

    Coroutines of one loop take turns on the ``deque`` (no lock: nothing awaits between
    the ``pop`` and its use), each on a connection of its own; a new one comes from the
    pool only when every kept one is busy. Each is checked as the pool checks it.
    """

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._pool: Any = client.connection_pool
        self._idle: deque[Any] = deque()

    async def call(self, command: bytes) -> Any:
        """Send one packed command; the parsed reply."""
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = await self._pool.get_connection()
        else:
            await redisadapter.ready_async(conn)
        try:
            return await conn.retry.call_with_retry(
                lambda: redisadapter.send_read(conn, command), lambda _error: conn.disconnect()
            )
        finally:
            self._idle.append(conn)
