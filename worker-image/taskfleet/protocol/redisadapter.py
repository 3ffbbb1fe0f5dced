"""The one module of taskfleet that touches redis-py's private attributes, for ``wire``.

Two, each for a measured speed-up of a script call, each with a public fallback:

- ``_sock`` of a sync connection (``redis.connection.AbstractConnection``): a connection
  ``wire.Connections`` keeps between calls is checked for a server-closed socket or
  unread bytes by a ``poll`` registered once per socket (``ready``). The public check,
  ``can_read()``, builds a poller on every call: 3-6 % of a single ``Queue.enqueue``
  (bench/journal/). Where a redis-py has no ``_sock``, ``can_read()`` is used.
- ``_writer`` of an asyncio connection (``redis.asyncio.connection.AbstractConnection``,
  an ``asyncio.StreamWriter``): a packed command is written to it directly (``send_read``).
  redis-py's ``send_packed_command`` wraps every write of a connection with a socket
  timeout (5 s unless the URL says otherwise) in ``asyncio.wait_for``, which on Python
  3.11 makes a task and two more turns of the event loop per call: a third of an
  ``AsyncQueue.enqueue``. Where there is no ``_writer``, ``send_packed_command`` is used.

A kept sync connection's plain socket (TCP or Unix, not TLS) with a timeout is also made
blocking, the timeout set in the kernel (``SO_RCVTIMEO`` / ``SO_SNDTIMEO``) instead: CPython
polls a socket with a timeout before each send and each receive, two system calls of a
single enqueue's five (bench/journal/). A read or write the kernel times out raises
redis-py's ``TimeoutError`` as before (``send_read_sync``); the one difference is that the
write timeout bounds each ``send`` the kernel makes rather than a whole ``sendall`` (a
command larger than the socket's buffer, sent while Redis reads it slowly, may take
longer in all).

``PRIVATES`` names them. tests/protocol/test_redisadapter.py checks that each exists and behaves
as used here on the installed redis-py, and ``make test-redis-py-range`` runs it with the
oldest and the newest redis-py the package allows; tests/protocol/test_redis_privates.py holds
every other module of the product to redis-py's public API.

Protocol layer: imports nothing of taskfleet.
"""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import sys
from typing import Any

import redis

__all__ = ["PRIVATES", "IdleCheck", "ready", "ready_async", "send_read", "send_read_sync"]

#: Every private attribute of redis-py used here: (the class that has it, the attribute).
PRIVATES: tuple[tuple[str, str], ...] = (
    ("redis.connection.AbstractConnection", "_sock"),
    ("redis.asyncio.connection.AbstractConnection", "_writer"),
)

_MISSING = object()


class IdleCheck:
    """A poller registered once for one socket: is anything readable where nothing is due?

    Made for a socket the first time it is kept, which is then given kernel timeouts
    (``kernel_timeouts``) where it can."""

    __slots__ = ("kernel", "pending", "poller", "sock")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.pending = getattr(sock, "pending", None)  # TLS: bytes decrypted above the socket
        self.poller = select.poll()
        self.poller.register(sock, select.POLLIN)
        self.kernel = kernel_timeouts(sock)

    def readable(self) -> bool:
        return bool((self.pending is not None and self.pending()) or self.poller.poll(0))


def ready(conn: Any, check: IdleCheck | None) -> IdleCheck | None:
    """Make a kept sync connection ready for its next call; the check to keep with it.

    One with data or EOF where no reply is due (the server closed it, or something was
    left unread) is disconnected, to start afresh on the next send: the check redis-py's
    pool makes, on a poller kept with the connection for as long as its socket lives.
    """
    sock = getattr(conn, "_sock", _MISSING)  # None: not connected (the send connects it)
    if sock is None:
        return None
    try:
        if sock is _MISSING:  # a redis-py that keeps its socket elsewhere: the public check
            if conn.can_read():
                conn.disconnect()
            return None
        if check is None or check.sock is not sock:
            check = IdleCheck(sock)
        if check.readable():
            conn.disconnect()
            return None
    except (redis.ConnectionError, OSError, ValueError):  # ValueError: a closed socket
        conn.disconnect()
        return None
    return check


def kernel_timeouts(sock: Any) -> bool:
    """Make a plain socket with a timeout blocking, its timeout kept by the kernel; whether
    it was (Linux only; TLS sockets and sockets without a timeout are left as they are)."""
    if type(sock) is not socket.socket or sys.platform != "linux":
        return False
    timeout = sock.gettimeout()
    if not timeout or timeout <= 0:
        return False
    whole = int(timeout)
    micros = min(999_999, max(round((timeout - whole) * 1e6), 0 if whole else 1))  # 0: never
    value = struct.pack("@ll", whole, micros)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
        sock.settimeout(None)
    except OSError:
        sock.settimeout(timeout)
        return False
    return True


def send_read_sync(conn: Any, command: bytes) -> Any:
    """Send one packed command on a sync connection; its reply, parsed.

    On a socket with kernel timeouts a timeout shows as ``EAGAIN``, which redis-py reports
    as a ``ConnectionError`` (it disconnected already): raised as the ``TimeoutError`` it
    raises for a socket timeout."""
    try:
        conn.send_packed_command([command])
    except redis.ConnectionError as exc:
        if isinstance(exc.__context__, BlockingIOError):
            raise redis.TimeoutError("Timeout writing to socket") from None
        raise
    try:
        return conn.read_response()
    except redis.ConnectionError as exc:
        if isinstance(exc.__context__, BlockingIOError):
            raise redis.TimeoutError("Timeout reading from socket") from None
        raise


async def ready_async(conn: Any) -> None:
    """Make a kept asyncio connection ready for its next call, as redis-py's pool does: one
    with data or EOF where no reply is due is disconnected (the next send connects it).

    The check is public, under two names: ``can_read`` from redis-py 8 on,
    ``can_read_destructive`` before (deprecated in 8, a warning there).
    """
    can_read = getattr(conn, "can_read", None) or conn.can_read_destructive
    try:
        if await can_read():
            await conn.disconnect()
    except (redis.ConnectionError, OSError):
        await conn.disconnect()


async def send_read(conn: Any, command: bytes) -> Any:
    """Send one packed command on an asyncio connection; its reply, parsed."""
    writer = getattr(conn, "_writer", None)
    if writer is None or conn.health_check_interval or not conn.is_connected:
        await conn.send_packed_command([command])
    else:
        await _write(conn, writer, command)
    return await conn.read_response()


async def _write(conn: Any, writer: asyncio.StreamWriter, command: bytes) -> None:
    """redis-py's ``send_packed_command`` without its per-call task.

    A write the kernel takes at once (a command of a few hundred bytes on a connection
    with no backlog) needs no wait; only a backlog is drained, under the connection's
    socket timeout. Failures end as redis-py's do (``TimeoutError`` or
    ``ConnectionError``), with one difference: the connection is aborted, not closed, so a
    backlog the caller was told failed is dropped with it instead of being flushed to
    Redis later (a command cut short is discarded by Redis). That holds on plain TCP; over
    TLS the TLS layer takes the write whole and the backlog lies below it, unseen here and
    by redis-py alike, so a timed-out write may still land. A connection class of
    redis-py's overriding ``send_packed_command`` is bypassed here (it still is used for a
    connection not yet connected or with health checks).
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
