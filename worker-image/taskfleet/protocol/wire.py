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
"""

from __future__ import annotations

import asyncio
import os
import select
from collections import deque
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio

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


def pooled(client: Any) -> bool:
    """Whether calls may go straight to a pooled connection: not for a client pinned to one
    connection (``single_connection_client``), whose lock redis-py keeps."""
    if isinstance(client, redis.asyncio.Redis):
        return not client.single_connection_client
    if isinstance(client, redis.Redis):
        return client.connection is None
    return False  # a cluster client: redis-py routes each call by its keys


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
        self._pid = os.getpid()

    def call(self, command: bytes) -> Any:
        """Send one packed command; the parsed reply."""
        if self._pid != os.getpid():  # a forked child: the parent's sockets are not ours
            self._idle, self._pid = deque(), os.getpid()
        conn, check = self._take()
        try:
            return conn.retry.call_with_retry(
                lambda: _send_read(conn, command), lambda _error: conn.disconnect()
            )
        finally:
            # clean either way: an error reply was read whole, and anything else that
            # broke off a call (a dropped socket, an interrupt) disconnected it
            self._idle.append((conn, check))

    def _take(self) -> tuple[Any, _Check | None]:
        """A kept connection, checked: one with data or EOF where no reply is due (the
        server closed it, or something was left unread) is disconnected, to start afresh.

        The check is the one the pool makes (a ``poll`` of the socket), on a poller kept
        with the connection for as long as its socket lives, not one built per call.
        """
        try:
            conn, check = self._idle.pop()
        except IndexError:
            return self._pool.get_connection(), None
        sock = conn._sock  # every redis-py connection has one (None: not connected)
        if sock is None:  # disconnected: the next send connects it
            return conn, None
        try:
            if check is None or check.sock is not sock:
                check = _Check(sock)
            if check.readable():
                conn.disconnect()
                return conn, None
        except (redis.ConnectionError, OSError, ValueError):  # ValueError: a closed socket
            conn.disconnect()
            return conn, None
        return conn, check


class _Check:
    """A poller registered once for one socket: is anything readable where nothing is due?"""

    __slots__ = ("pending", "poller", "sock")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.pending = getattr(sock, "pending", None)  # TLS: bytes decrypted above the socket
        self.poller = select.poll()
        self.poller.register(sock, select.POLLIN)

    def readable(self) -> bool:
        return bool((self.pending is not None and self.pending()) or self.poller.poll(0))


def _send_read(conn: Any, command: bytes) -> Any:
    conn.send_packed_command([command])
    return conn.read_response()


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
            try:
                if await conn.can_read():  # data or EOF where no reply is due
                    await conn.disconnect()
            except (redis.ConnectionError, OSError):
                await conn.disconnect()
        try:
            return await conn.retry.call_with_retry(
                lambda: _send_read_async(conn, command), lambda _error: conn.disconnect()
            )
        finally:
            self._idle.append(conn)


async def _send_read_async(conn: Any, command: bytes) -> Any:
    writer = getattr(conn, "_writer", None)
    if writer is None or conn.health_check_interval or not conn.is_connected:
        await conn.send_packed_command([command])
    else:
        await _write(conn, writer, command)
    return await conn.read_response()


async def _write(conn: Any, writer: asyncio.StreamWriter, command: bytes) -> None:
    """redis-py's ``send_packed_command`` without its per-call task.

    With a ``socket_timeout`` (redis-py's default is 5 s), redis-py wraps every write in
    ``asyncio.wait_for``, which makes a task and two more turns of the event loop per
    command: a third of an ``AsyncQueue.enqueue``. A write the kernel takes at once (a
    command of a few hundred bytes on a connection with no backlog) needs no wait; only a
    backlog is drained, under the same timeout. Failures end as redis-py's do
    (``TimeoutError`` or ``ConnectionError``), with one difference: the connection is
    aborted, not closed, so a backlog the caller was told failed is dropped with it
    instead of being flushed to Redis later (a command cut short is discarded by Redis).
    That holds on plain TCP; over TLS the TLS layer takes the write whole and the backlog
    lies below it, unseen here and by redis-py alike, so a timed-out write may still land.
    A connection class of redis-py's overriding ``send_packed_command`` is bypassed here
    (it still is used for a connection not yet connected or with health checks).
    """
    try:
        writer.write(command)
        if writer.transport.get_write_buffer_size():
            async with asyncio.timeout(conn.socket_timeout or None):
                await writer.drain()
    except TimeoutError:  # asyncio.timeout's (a builtin, an OSError): before OSError
        await _abort(conn, writer)
        raise redis.TimeoutError("Timeout writing to socket") from None
    except OSError as exc:
        await _abort(conn, writer)
        raise redis.ConnectionError(f"Error while writing to socket: {exc}") from exc
    except BaseException:  # cancelled mid-write: what went out is unknown, start afresh
        await _abort(conn, writer)
        raise


async def _abort(conn: Any, writer: asyncio.StreamWriter) -> None:
    writer.transport.abort()
    await conn.disconnect(nowait=True)
