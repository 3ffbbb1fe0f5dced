"""Script calls packed for the wire: the same bytes redis-py would send, the same replies,
errors and reloads, on the client's own pooled connections."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import ssl
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.connection import Encoder
from redis.retry import Retry
from taskfleet import AsyncQueue, Queue
from taskfleet.producer.encoding import encode_task
from taskfleet.protocol.calls import run_all
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import InvalidPayload, TaskExists
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.queue_ops import Ops
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.scripts import AsyncScripts
from taskfleet.protocol.wire import Head, bulk, packed_args

from tests.fixtures_redis import RedisServerFactory, free_port
from tests.polling import wait_for


@pytest.mark.parametrize(
    "value",
    [
        "",
        "plain",
        "ünï\0code",
        0,
        -7,
        1000,
        1001,
        -1000,
        -1001,
        2**70,
        0.1,
        1e300,
        -0.0,
        math.pi,
        b"\xff\x00raw",
    ],
)
def test_an_argument_is_packed_exactly_as_redis_py_encodes_it(value: str | int | float) -> None:
    encoded = Encoder("utf-8", "strict", False).encode(value)
    assert bulk(value) == b"$%d\r\n%b\r\n" % (len(encoded), encoded)


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_an_argument_redis_py_would_refuse_is_refused_with_its_type(value: object) -> None:
    with pytest.raises(redis.DataError, match="invalid script argument"):
        bulk(value)  # type: ignore[arg-type]


def test_a_packed_call_is_the_command_redis_py_packs() -> None:
    keys = ("k1", "k2")
    args = (1, "two", 3.5)
    packed = Head("a" * 40, keys).command(args)
    words = ["EVALSHA", "a" * 40, 2, *keys, *args]
    assert packed == b"*%d\r\n" % len(words) + packed_args(words)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"priority": 7},
        {"priority": -1000, "task_id": "ünï code"},
        {"cost": 2},
        {"cost": 0},
        {"delay": 1.5},
        {"deadline": 30},
        {"max_attempts": 1},
        {"timeout": 2},
        {"group": "tenant-1"},
        {"after": ["a"], "on_dep_fail": "ignore"},
        {"task": "send"},
    ],
)
def test_a_single_enqueue_packed_at_once_is_the_generic_packing(options: dict[str, object]) -> None:
    ops = Ops(QueueKeys("jobs"))
    task = encode_task({"to": "ünï"}, **options)  # type: ignore[arg-type]
    op = ops.enqueue([task], "0123456789abcdef")
    shortcut = not options.keys() - {"priority", "task_id", "task"}
    assert (op.packed is not None) == shortcut
    if op.packed is not None:
        assert op.packed == packed_args(op.args)
    assert ops.enqueue([task], "0123456789abcdef", trace="t").packed is None  # with a trace
    assert ops.enqueue([task, task]).packed is None


def test_a_script_call_survives_a_script_flush_and_a_killed_connection(
    redis_url: str, redis_client: redis.Redis
) -> None:
    queue = Queue("jobs", redis_url)
    first = queue.enqueue({"n": 1})
    redis_client.script_flush()  # NOSCRIPT on the next call: loaded again, call resent
    second = queue.enqueue({"n": 2})
    redis_client.client_kill_filter(_type="normal", skipme=True)  # the pooled socket dies
    third = queue.enqueue({"n": 3})
    assert queue.stats()["pending"] == 3
    assert all(queue.get(i) is not None for i in (first, second, third))
    queue.close()


def _script_exists_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_script|exists", {}).get("calls", 0))


def test_script_ops_in_a_pipeline_send_no_script_exists_and_run_once_after_a_script_flush(
    redis_client: redis.Redis,
) -> None:
    """run_all's script ops go as bare EVALSHAs (no SCRIPT EXISTS round trip first); one
    the server lost answers NOSCRIPT, having run nothing, and is loaded and run once."""
    keys = QueueKeys("pipelined-after-flush")
    ops = Ops(keys)
    first = ops.enqueue([encode_task({"n": 1}, task_id="a")])
    assert run_all(redis_client, [first]) == [[True]]
    before = _script_exists_calls(redis_client)
    redis_client.script_flush()
    created, stats, again = run_all(
        redis_client,
        [
            ops.enqueue([encode_task({"n": 2}, task_id="b")]),
            QueueReads(keys).stats(),
            ops.enqueue([encode_task({"n": 1}, task_id="a")]),
        ],
    )
    # "b" created once (a second run would answer False), "a" refused as existing.
    assert created == [True] and again == [False]
    assert stats["pending"] == 1  # read in the pipeline, before the lost script ran again
    assert redis_client.zcard(keys.pending) == 2
    assert _script_exists_calls(redis_client) == before


def test_an_error_reply_in_a_pipeline_with_script_ops_reaches_the_caller(
    redis_client: redis.Redis,
) -> None:
    keys = QueueKeys("pipelined-errors")
    redis_client.set(keys.stats, "not a hash")  # the read and the script both meet it
    ops = Ops(keys)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        run_all(redis_client, [QueueReads(keys).stats(), ops.enqueue([encode_task({})])])
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        run_all(redis_client, [ops.enqueue([encode_task({})])])


def test_script_errors_reach_the_caller_as_the_library_errors(redis_url: str) -> None:
    queue = Queue("jobs", redis_url)
    queue.enqueue({"n": 1}, task_id="same")
    with pytest.raises(TaskExists):
        queue.enqueue({"n": 2}, task_id="same")
    with pytest.raises(InvalidPayload, match="max_payload_bytes"):
        queue.enqueue({"blob": "x" * (1 << 21)})
    # the connection is clean after an error reply: the next call reads its own reply
    assert queue.enqueue({"n": 1}, task_id="same") == "same"
    queue.close()


def test_a_client_pinned_to_one_connection_runs_scripts_through_redis_py(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, single_connection_client=True)
    queue = Queue("jobs", client=client)
    client.script_flush()
    task_id = queue.enqueue({"n": 1})
    assert queue.get(task_id) is not None
    client.close()


def test_the_asyncio_client_packs_the_same_calls_and_reloads_flushed_scripts(
    redis_url: str, redis_client: redis.Redis
) -> None:
    keys = QueueKeys("jobs")
    ops = Ops(keys)

    async def main() -> list[bool]:
        client = redis.asyncio.Redis.from_url(redis_url)
        scripts = AsyncScripts.for_client(client)
        created = await scripts.run(ops.enqueue([encode_task({"n": 1}, task_id="a")]))
        redis_client.script_flush()
        created += await scripts.run(ops.enqueue([encode_task({"n": 2}, task_id="b")]))
        created += await scripts.run(ops.enqueue([encode_task({"n": 2}, task_id="b")]))
        await client.aclose()
        return created

    assert asyncio.run(main()) == [True, True, False]
    assert redis_client.zcard(keys.pending) == 2


def test_threads_enqueueing_at_once_each_get_their_own_reply(redis_url: str) -> None:
    queue = Queue("jobs", redis_url)

    def produce(thread: int) -> list[tuple[str, str]]:
        pairs = []
        for i in range(200):
            wanted = f"t{thread}-{i}"
            pairs.append((wanted, queue.enqueue({"i": i}, task_id=wanted)))
        return pairs

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = [pair for pairs in pool.map(produce, range(8)) for pair in pairs]
    assert all(wanted == got for wanted, got in results)
    assert queue.stats()["pending"] == 1600
    queue.close()


def test_a_forked_child_enqueues_on_its_own_connections_and_the_parent_goes_on(
    redis_url: str,
) -> None:
    queue = Queue("jobs", redis_url)
    queue.enqueue({"who": "parent"})  # the parent has a connection kept now
    pid = os.fork()
    if pid == 0:  # the child: exit status says whether its enqueue worked
        try:
            queue.enqueue({"who": "child"}, task_id="from-child")
            kept = list(queue._scripts._connections._idle)
            # never the parent's socket: a reply meant for one could reach the other
            code = 0 if kept and all(conn.pid == os.getpid() for conn, _ in kept) else 3
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert queue.enqueue({"who": "parent"}, task_id="after-fork") == "after-fork"
    assert queue.get("from-child") is not None
    assert queue.stats()["pending"] == 3
    queue.close()


def test_an_async_call_cancelled_at_any_point_leaves_the_next_call_its_own_reply(
    redis_url: str,
) -> None:
    async def main() -> int:
        async with AsyncQueue("jobs", redis_url) as queue:
            await queue.enqueue({})
            for i in range(24):
                call = asyncio.ensure_future(queue.enqueue({}, task_id=f"cut-{i}"))
                for _ in range(i % 6):  # cut before the send, after it, during the read...
                    await asyncio.sleep(0)
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await call
                assert await queue.enqueue({"i": i}, task_id=f"next-{i}") == f"next-{i}"
                task = await queue.get(f"next-{i}")
                assert task is not None and task.payload == {"i": i}
            return (await queue.stats())["pending"]

    assert asyncio.run(main()) >= 25


def test_an_async_write_redis_does_not_take_times_out_and_stores_nothing(
    redis_server_factory: RedisServerFactory,
) -> None:
    """A command larger than the sockets' buffers to a stopped Redis: the write backlog is
    drained under the client's socket timeout, then the connection is dropped (Redis
    discards the half-read command) and the next call starts afresh."""
    server = redis_server_factory()
    big = 48 * 1024 * 1024  # above loopback's largest send + receive buffers
    with Queue("big", redis_url=server.url) as queue:
        queue.configure(QueueConfig(max_payload_bytes=2 * big))

    async def main() -> tuple[dict[str, int], bool]:
        async with AsyncQueue("big", f"{server.url}?socket_timeout=0.5") as queue:
            await queue.enqueue({}, task_id="before")
            assert server.process is not None
            server.process.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(redis.TimeoutError):
                    await queue.enqueue({"blob": "x" * big}, task_id="big")
            finally:
                server.process.send_signal(signal.SIGCONT)
            assert await queue.enqueue({}, task_id="after") == "after"
            return await queue.stats(), await queue.get("big") is None

    stats, big_absent = asyncio.run(main())
    assert big_absent and stats["pending"] == 2
    with redis.Redis.from_url(server.url) as client:
        # A closed (not aborted) connection would still be flushing the command now.
        wait_for(
            lambda: client.info("clients")["connected_clients"] == 1,
            timeout=10,
            what="the timed-out connection to be gone",
        )
        assert client.exists(QueueKeys("big").task("big")) == 0, "a failed write landed later"


def test_a_sync_write_redis_does_not_take_times_out_and_stores_nothing(
    redis_server_factory: RedisServerFactory,
) -> None:
    """The same on a kept sync connection (its socket's timeout kept by the kernel): the
    write times out as redis-py's TimeoutError, the connection is dropped, nothing lands."""
    server = redis_server_factory()
    big = 48 * 1024 * 1024  # above loopback's largest send + receive buffers
    assert server.process is not None
    # no retry: the error is the kept connection's own, not a reconnection's
    client = redis.Redis.from_url(server.url, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
    with client, Queue("big", client=client) as queue:
        queue.configure(QueueConfig(max_payload_bytes=2 * big))
        queue.enqueue({}, task_id="before")
        queue.enqueue({}, task_id="kept")  # on the kept connection, checked once
        server.process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(redis.TimeoutError):
                queue.enqueue({"blob": "x" * big}, task_id="big")
        finally:
            server.process.send_signal(signal.SIGCONT)
        assert queue.enqueue({}, task_id="after") == "after"
        assert queue.get("big") is None and queue.stats()["pending"] == 3
    with redis.Redis.from_url(server.url) as client:
        wait_for(
            lambda: client.info("clients")["connected_clients"] == 1,
            timeout=10,
            what="the timed-out connections to be gone",
        )
        assert client.exists(QueueKeys("big").task("big")) == 0, "a failed write landed later"


def test_a_sync_call_to_a_stopped_redis_times_out_and_the_next_call_reads_its_own_reply(
    redis_server_factory: RedisServerFactory,
) -> None:
    """The reply of a call that timed out is never read as the next call's: the
    connection it was due on is dropped, and the next call starts on a fresh one."""
    server = redis_server_factory()
    assert server.process is not None
    with Queue("jobs", f"{server.url}?socket_timeout=0.3") as queue:
        queue.enqueue({}, task_id="before")
        server.process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(redis.TimeoutError):
                queue.enqueue({}, task_id="stuck")  # redis-py's Retry: each try times out
        finally:
            server.process.send_signal(signal.SIGCONT)
        # a reply read one call late would say "created" twice
        assert queue.enqueue_result({}, task_id="after").created
        assert not queue.enqueue_result({}, task_id="after").created
        stuck = queue.get("stuck")  # sent, so Redis may have run it once it woke
        assert stuck is None or stuck.payload == {}
        assert queue.stats()["pending"] == 2 + (stuck is not None)


def test_an_error_reply_is_raised_and_leaves_the_connection_clean(
    redis_url: str, redis_client: redis.Redis
) -> None:
    queue = Queue("jobs", redis_url)
    queue.enqueue({"n": 1})
    redis_client.delete(queue.keys.pending)
    redis_client.set(queue.keys.pending, "not a sorted set")  # ZADD: WRONGTYPE
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        queue.enqueue({"n": 2})
    redis_client.delete(queue.keys.pending)
    task_id = queue.enqueue({"n": 3})  # its own reply, on the kept connection
    assert queue.get(task_id) is not None
    [(conn, _check)] = queue._scripts._connections._idle
    assert conn._sock is not None, "an error reply does not drop the connection"
    queue.close()


def test_over_tls_a_kept_connection_the_server_closed_is_replaced_and_replies_stay_in_step(
    tmp_path: Path, redis_server_factory: RedisServerFactory
) -> None:
    """rediss://: the kept connection's check also asks the TLS layer for bytes it holds;
    a connection the server closed meanwhile is found and replaced before the call."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt"),
            *("ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    tls_port = free_port()
    server = redis_server_factory(
        persistent=False,
        extra_args=[
            *("--tls-port", str(tls_port), "--tls-cert-file", str(cert)),
            *("--tls-key-file", str(key), "--tls-ca-cert-file", str(cert)),
            *("--tls-auth-clients", "no"),
        ],
    )
    url = f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={cert}"
    # no retries: a dead connection the check missed would fail the call, not be redone
    client = redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0))
    with Queue("jobs", client=client) as queue:
        assert queue.enqueue_result({}, task_id="a").created
        [(conn, _check)] = queue._scripts._connections._idle
        assert isinstance(conn._sock, ssl.SSLSocket)
        with server.admin() as admin:
            assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
        assert not queue.enqueue_result({}, task_id="a").created  # replies in step
        assert queue.enqueue_result({}, task_id="b").created
        assert queue.stats()["pending"] == 2
    client.close()


def test_a_kept_connection_the_server_closed_is_replaced_before_the_call(
    redis_url: str, redis_client: redis.Redis
) -> None:
    client = redis.Redis.from_url(redis_url, retry=Retry(NoBackoff(), 0))  # no redo
    with Queue("jobs", client=client) as queue:
        assert queue.enqueue_result({}, task_id="a").created
        assert redis_client.client_kill_filter(_type="normal", skipme=True) >= 1
        assert not queue.enqueue_result({}, task_id="a").created
        assert queue.enqueue_result({}, task_id="b").created
    client.close()
