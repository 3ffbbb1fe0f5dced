"""A Redis restart mid-run: the worker survives, reconnects, logs once, loses nothing."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import redis.asyncio
import redis.exceptions
from taskfleet.producer.queue import Queue
from taskfleet.worker.broker import Broker, ClaimedTask
from taskfleet.worker.gate import RedisGate
from taskfleet.worker.lifecycle import Lifecycle
from taskfleet.worker.outbox import Outbox
from taskfleet.worker.runs import Outcome, Run

from tests.fixtures_redis import RedisServerFactory, free_port
from tests.polling import wait_for
from tests.workers.harness import FAST, WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet

T = TypeVar("T")


def test_workers_ride_out_a_redis_restart_and_every_task_gets_done(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server = redis_server_factory(persistent=True)
    fleet = Fleet(server.url, "jobs", tmp_path)
    try:
        with Queue("jobs", redis_url=server.url) as queue:
            ids = queue.enqueue_many([{"payload": {"seconds": 0.05}} for _ in range(60)])
        workers = [
            fleet.add(
                "tests.workers.handlers:sleep", pod=f"pod-{i}", args=[*FAST, "--concurrency", "3"]
            ).start()
            for i in range(2)
        ]

        def done() -> int:
            with Queue("jobs", redis_url=server.url) as queue:
                return queue.stats()["done"]

        wait_for(
            lambda: done() >= 10,
            timeout=WORKER_TIMEOUT_S,
            interval=WORKER_INTERVAL_S,
            what="some tasks done before the restart",
        )
        server.restart()
        wait_for(
            lambda: done() == len(ids),
            timeout=30,
            interval=WORKER_INTERVAL_S,
            what="every task done",
        )

        with Queue("jobs", redis_url=server.url) as queue:
            stats = queue.stats()
            assert stats["dead"] == 0 and stats["pending"] == 0 and stats["running"] == 0
            tasks = [queue.get(task_id) for task_id in ids]
        assert all(task is not None and task.state == "done" for task in tasks)
        outages = 0
        for worker in workers:
            worker.signal(signal.SIGTERM)
            assert worker.wait() == 0
            unreachable = sum(e["event"] == "redis_unreachable" for e in worker.events())
            reachable = sum(e["event"] == "redis_reachable" for e in worker.events())
            # One line per outage, not one per retry (a worker idle at the instant of the
            # restart may not notice it at all).
            assert unreachable == reachable <= 1, worker.log_text()
            outages += unreachable
        assert outages >= 1
    finally:
        fleet.close()


def test_an_outage_longer_than_the_lease_loses_nothing_and_logs_once(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server = redis_server_factory(persistent=True)
    fleet = Fleet(server.url, "jobs", tmp_path)
    try:
        with Queue("jobs", redis_url=server.url) as queue:
            ids = queue.enqueue_many([{"payload": {"seconds": 0.3}} for _ in range(16)])
        worker = fleet.add(
            "tests.workers.handlers:sleep", args=[*FAST, "--concurrency", "4"]
        ).start()

        def running() -> int:
            with Queue("jobs", redis_url=server.url) as queue:
                return queue.stats()["running"]

        wait_for(
            lambda: running() > 0,
            timeout=WORKER_TIMEOUT_S,
            interval=WORKER_INTERVAL_S,
            what="tasks running before the outage",
        )
        server.stop()
        worker.wait_event("redis_unreachable")
        # The scenario, not a wait on a condition: stay down past several lease TTLs (1 s),
        # while the worker's handlers finish and its backoff grows.
        time.sleep(2.5)
        server.start()
        worker.wait_event("redis_reachable", timeout=15)

        def done() -> int:
            with Queue("jobs", redis_url=server.url) as queue:
                return queue.stats()["done"]

        wait_for(
            lambda: done() == len(ids), timeout=30, interval=WORKER_INTERVAL_S, what=worker.log_text
        )
        with Queue("jobs", redis_url=server.url) as queue:
            stats = queue.stats()
        assert stats["dead"] == 0 and stats["pending"] == 0 and stats["running"] == 0
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
        assert sum(e["event"] == "redis_unreachable" for e in worker.events()) == 1
    finally:
        fleet.close()


def test_outcomes_left_at_shutdown_with_redis_down_are_retried_with_backoff_not_in_a_loop() -> None:
    """At shutdown the loops are closed, so only the gate paces the retries of the last
    flush: a handful of writes per second against a server that is gone, not thousands."""
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there

    async def writes_while_flushing_at_shutdown(window_s: float) -> tuple[int, int]:
        client = redis.asyncio.Redis.from_url(url)
        broker = Broker("q", client, "p", "i")
        calls = 0

        async def write(batch: list[Outcome]) -> None:
            nonlocal calls
            calls += 1
            items = [(o.run.task.id, o.run.task.token, o.result) for o in batch]
            await broker.complete_many(items)
            batch.clear()

        async def reconnect() -> None:
            await client.connection_pool.disconnect()
            await client.ping()

        gate = RedisGate(reconnect, lambda: None, backoff_base=0.1, backoff_max=0.2)
        lifecycle = Lifecycle()
        lifecycle.request_drain()
        lifecycle.close()  # as at shutdown: the background loops are done
        outbox = Outbox(write, gate, lifecycle)
        task = ClaimedTask("t", "tok", {}, 1, 3, None, 0, 0, 1)
        outbox.add(Outcome(Run(task, claimed_at=0.0), result="{}"))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(outbox.flush(), timeout=window_s)
        await gate.close()
        await client.aclose()
        return calls, len(outbox)

    calls, unwritten = asyncio.run(writes_while_flushing_at_shutdown(1.0))
    assert unwritten == 1, "nothing can have been written"
    # Backoff 0.05-0.2 s between probes: a handful of writes in a second, not thousands.
    assert 1 <= calls <= 20, calls


async def _answered(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``'s result from a server that answers. A busy machine may take longer than
    a 0.5 s reply timeout (connecting, loading the scripts), so a timeout is retried with a
    fresh call up to the tests' deadline."""
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    while True:
        try:
            return await call()
        except redis.exceptions.TimeoutError:
            if time.monotonic() > deadline:
                raise


def test_a_hung_redis_is_an_outage_once_a_call_goes_unanswered_for_the_reply_timeout(
    redis_server_factory: RedisServerFactory,
) -> None:
    """SIGSTOP: the server keeps its connections open but answers nothing (as across a
    partition without resets). Script calls and the blocking wait both end in a
    ``redis.exceptions.TimeoutError``, which the worker treats as an outage."""
    server = redis_server_factory()

    async def scenario() -> tuple[str, str]:
        client = redis.asyncio.Redis.from_url(server.url)
        broker = Broker("q", client, "p", "i", reply_timeout=0.5)
        try:
            # connections open while the server answers
            await _answered(lambda: broker.register(1))
            await _answered(lambda: broker.wait_for_work(0.01))
            assert server.process is not None
            server.process.send_signal(signal.SIGSTOP)
            try:
                errors = []
                for call in (broker.claim(1), broker.wait_for_work(0.2)):
                    try:
                        await asyncio.wait_for(call, timeout=10.0)  # the test's own bound
                    except redis.exceptions.TimeoutError as exc:
                        errors.append(str(exc))
                    else:
                        raise AssertionError("a call to a stopped server returned")
            finally:
                server.process.send_signal(signal.SIGCONT)
            # The timed-out connections were dropped: the next call gets its own reply.
            assert (await _answered(lambda: broker.claim(1))).tasks == []
            return errors[0], errors[1]
        finally:
            await broker.close()
            await client.aclose()

    script_error, wait_error = asyncio.run(scenario())
    assert script_error == "no reply from Redis within 0.5 s"
    assert wait_error == "no reply from Redis within 0.7 s"  # its own 0.2 s wait + 0.5 s


def test_calls_a_hung_redis_runs_late_cost_no_task_an_attempt_a_loss_or_a_stale_write(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    """SIGSTOP Redis while workers are busy, past their reply timeout, then SIGCONT:
    Redis runs the claims and completions they gave up on. The workers undo those claims
    and their retried completions are recognised: every task runs once, none is lost."""
    server = redis_server_factory(persistent=True)
    fleet = Fleet(server.url, "jobs", tmp_path)
    try:
        with Queue("jobs", redis_url=server.url) as queue:
            ids = queue.enqueue_many([{"payload": {"seconds": 0.01}} for _ in range(3000)])
        # A lease far longer than the stop: nothing may expire, so any loss is a phantom's.
        args = ["--heartbeat-interval", "1", "--lease-ttl", "60", "--concurrency", "4"]
        workers = [
            fleet.add("tests.workers.handlers:sleep", pod=f"pod-{i}", args=args).start()
            for i in range(2)
        ]
        client = redis.Redis.from_url(server.url)

        def done() -> int:
            return int(client.zcard("tf:{jobs}:done"))

        wait_for(
            lambda: done() >= 100,
            timeout=WORKER_TIMEOUT_S,
            interval=WORKER_INTERVAL_S,
            what="tasks flowing before the stop",
        )
        assert server.process is not None
        server.process.send_signal(signal.SIGSTOP)
        try:
            # past the workers' reply timeout (idle wait 1 s + 2 s): every call in flight
            # is given up on
            for worker in workers:
                worker.wait_event("redis_unreachable", timeout=15)
        finally:
            server.process.send_signal(signal.SIGCONT)
        wait_for(
            lambda: done() == len(ids),
            timeout=60,
            interval=WORKER_INTERVAL_S,
            what="every task done",
        )
        with Queue("jobs", redis_url=server.url) as queue:
            stats = queue.stats()
        assert (stats["lost"], stats["stale"], stats["dead"]) == (0, 0, 0), stats
        ran = [e.decode().split(":")[1] for e in client.lrange("test:events", 0, -1)]
        starts = [e for e in ran if e]  # start and end per run
        assert len(starts) == 2 * len(ids), "a task ran twice, or not at all"
        for worker in workers:
            worker.signal(signal.SIGTERM)
            assert worker.wait() == 0, worker.log_text()
        client.close()
    finally:
        fleet.close()
