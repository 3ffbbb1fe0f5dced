"""redis-py's private attributes that ``protocol/redisadapter.py`` uses exist and behave as
it needs, on the installed redis-py: this fails loudly the day a redis-py release renames
or changes one (the adapter would fall back to the slower public path in silence).

``make test-redis-py-range`` (tests/redis_py_range.sh) runs this module with the oldest and
the newest redis-py the package allows; ``TASKFLEET_EXPECT_REDIS_PY`` then names the
version that must be the one imported.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import os
import socket
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.connection
from taskfleet.protocol import redisadapter
from taskfleet.protocol.redisadapter import PRIVATES, IdleCheck, ready, send_read

from tests.polling import wait_for

PING = b"*1\r\n$4\r\nPING\r\n"


def test_the_redis_py_under_test_is_the_one_imported() -> None:
    expected = os.environ.get("TASKFLEET_EXPECT_REDIS_PY")
    if expected is None:
        pytest.skip("set by tests/redis_py_range.sh")
    assert redis.__version__ == expected


@pytest.mark.parametrize(("owner", "attribute"), PRIVATES)
def test_every_private_named_is_set_by_its_class(owner: str, attribute: str) -> None:
    """Each owner exists and its constructor sets the attribute (not connected: None)."""
    module, _, name = owner.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    connection = {
        "redis.connection.AbstractConnection": redis.connection.Connection,
        "redis.asyncio.connection.AbstractConnection": redis.asyncio.Connection,
    }[owner]()
    assert isinstance(connection, cls)
    assert getattr(connection, attribute, "missing") is None


def test_a_sync_connections_socket_is_the_connected_one_and_gone_once_disconnected(
    redis_url: str,
) -> None:
    with redis.Redis.from_url(redis_url) as client:
        conn: Any = client.connection_pool.get_connection()  # no command name: redis-py 5.3+
        try:
            sock = conn._sock
            assert isinstance(sock, socket.socket)
            assert sock.getpeername()[1] == client.connection_pool.connection_kwargs["port"]
            conn.send_packed_command([PING])
            assert conn.read_response() == b"PONG"
            conn.disconnect()
            assert conn._sock is None
        finally:
            client.connection_pool.release(conn)


def test_a_kept_sync_connection_is_checked_on_a_poller_kept_with_its_socket(
    redis_url: str, redis_client: redis.Redis
) -> None:
    with redis.Redis.from_url(redis_url) as client:
        conn: Any = client.connection_pool.get_connection()
        try:
            check = ready(conn, None)
            assert isinstance(check, IdleCheck) and check.sock is conn._sock
            assert ready(conn, check) is check, "one poller for as long as the socket lives"

            conn.send_packed_command([PING])  # a reply nobody read: not to be reused as is
            wait_for(lambda: ready(conn, check) is None, what="the unread reply to be seen")
            assert conn._sock is None, "disconnected, to start afresh"

            conn.connect()
            check = ready(conn, None)
            assert check is not None and check.sock is conn._sock
            assert redis_client.client_kill_filter(_type="normal", skipme=True) >= 1
            wait_for(lambda: ready(conn, check) is None, what="the closed socket to be seen")
            assert conn._sock is None
            conn.send_packed_command([PING])  # the next send connects again
            assert conn.read_response() == b"PONG"
        finally:
            client.connection_pool.release(conn)


def test_a_kept_plain_socket_gets_its_timeout_from_the_kernel_and_times_out_as_before(
    redis_url: str,
) -> None:
    """A kept connection's TCP socket with a timeout is made blocking, the same timeout set
    as SO_RCVTIMEO / SO_SNDTIMEO (no poll before each send and receive); a reply that does
    not come in time raises redis-py's TimeoutError and drops the connection, as before."""
    with redis.Redis.from_url(f"{redis_url}?socket_timeout=0.25") as client:
        conn: Any = client.connection_pool.get_connection()
        try:
            check = ready(conn, None)
            assert check is not None and check.kernel is (sys.platform == "linux")
            if not check.kernel:
                pytest.skip("kernel timeouts are set on Linux only")
            sock = conn._sock
            assert sock.gettimeout() is None, "blocking: CPython polls no more"
            size = struct.calcsize("@ll")
            for option in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
                whole, micros = struct.unpack(
                    "@ll", sock.getsockopt(socket.SOL_SOCKET, option, size)
                )
                assert whole == 0 and abs(micros - 250_000) < 20_000, "the kernel's clock ticks"
            assert redisadapter.send_read_sync(conn, PING) == b"PONG"
            blocked = b"*3\r\n$5\r\nBLPOP\r\n$7\r\nnothing\r\n$1\r\n0\r\n"
            with pytest.raises(redis.TimeoutError, match="Timeout reading"):
                redisadapter.send_read_sync(conn, blocked)
            assert conn._sock is None, "dropped: its late reply is never read as another's"
            assert redisadapter.send_read_sync(conn, PING) == b"PONG"  # connects again
            assert conn._sock.gettimeout() == 0.25, "a new socket: CPython's timeout again"
            check = ready(conn, check)
            assert check is not None and check.kernel and conn._sock.gettimeout() is None
        finally:
            client.connection_pool.release(conn)


def test_only_a_plain_socket_with_a_timeout_is_given_kernel_timeouts() -> None:
    with socket.socket() as plain:
        assert not redisadapter.kernel_timeouts(plain), "no timeout: left blocking"
        assert plain.gettimeout() is None
        plain.settimeout(0)
        assert not redisadapter.kernel_timeouts(plain), "non-blocking: left so"
        assert plain.gettimeout() == 0

    class Wrapped(socket.socket):  # as ssl.SSLSocket is: its own send and receive
        pass

    with Wrapped() as wrapped:
        wrapped.settimeout(1.0)
        assert not redisadapter.kernel_timeouts(wrapped)
        assert wrapped.gettimeout() == 1.0


def test_without_a_socket_attribute_the_public_check_is_used() -> None:
    class Stand:
        def __init__(self, unread: bool) -> None:
            self.unread, self.dropped = unread, False

        def can_read(self) -> bool:
            return self.unread

        def disconnect(self) -> None:
            self.dropped = True

    clean, dirty = Stand(False), Stand(True)
    assert ready(clean, None) is None and not clean.dropped
    assert ready(dirty, None) is None and dirty.dropped


def test_an_asyncio_connections_writer_takes_a_packed_command_without_send_packed_command(
    redis_url: str,
) -> None:
    """With a socket timeout (redis-py's default) the write goes to ``_writer`` itself."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url, socket_timeout=5)
        conn: Any = await client.connection_pool.get_connection()
        try:
            writer = conn._writer
            assert isinstance(writer, asyncio.StreamWriter)
            assert conn.is_connected and not conn.health_check_interval

            async def refuse(*_args: object, **_kwargs: object) -> None:
                raise AssertionError("send_packed_command was used")

            conn.send_packed_command = refuse
            assert await send_read(conn, PING) == b"PONG"
            del conn.send_packed_command

            await conn.disconnect()
            assert conn._writer is None
            assert await send_read(conn, PING) == b"PONG"  # not connected: redis-py's send
            assert isinstance(conn._writer, asyncio.StreamWriter) and conn._writer is not writer
        finally:
            await client.connection_pool.release(conn)
            await client.aclose()

    asyncio.run(main())


def test_a_kept_asyncio_connection_with_an_unread_reply_or_closed_by_the_server_is_dropped(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """``ready_async``: the public check under this redis-py's name for it."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        conn: Any = await client.connection_pool.get_connection()
        try:
            await redisadapter.ready_async(conn)
            assert conn.is_connected, "a clean connection is kept as it is"
            await conn.send_packed_command([PING])  # a reply nobody read
            await _until_dropped(conn)
            await conn.connect()
            assert redis_client.client_kill_filter(_type="normal", skipme=True) >= 1
            await _until_dropped(conn)
            assert await send_read(conn, PING) == b"PONG"
        finally:
            await client.connection_pool.release(conn)
            await client.aclose()

    asyncio.run(main())


async def _until_dropped(conn: Any) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while conn.is_connected:
        assert loop.time() < deadline, "the kept connection's check did not drop it"
        await redisadapter.ready_async(conn)
        await asyncio.sleep(0.01)


def test_before_redis_py_8_the_check_has_its_older_name() -> None:
    class Stand:
        def __init__(self) -> None:
            self.dropped = False

        async def can_read_destructive(self) -> bool:
            return True

        async def disconnect(self) -> None:
            self.dropped = True

    stand = Stand()
    asyncio.run(redisadapter.ready_async(stand))
    assert stand.dropped


def test_without_a_writer_attribute_redis_pys_send_is_used() -> None:
    class Stand:
        health_check_interval = 0
        is_connected = True

        def __init__(self) -> None:
            self.sent: list[object] = []

        async def send_packed_command(self, command: object) -> None:
            self.sent.append(command)

        async def read_response(self) -> bytes:
            return b"PONG"

    stand = Stand()
    assert asyncio.run(send_read(stand, PING)) == b"PONG"
    assert stand.sent == [[PING]]


def test_the_adapter_names_every_private_it_touches() -> None:
    """Every ``._name`` and ``getattr(x, "_name")`` the adapter reads of a redis-py object
    is in ``PRIVATES`` (the adapter's own helpers aside)."""
    tree = ast.parse(Path(redisadapter.__file__).read_text())
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            if not node.attr.startswith("__") and ast.unparse(node.value) != "self":
                used.add(node.attr)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr":
            name = node.args[1]
            if isinstance(name, ast.Constant) and str(name.value).startswith("_"):
                used.add(str(name.value))
    assert used == {attribute for _, attribute in PRIVATES}
