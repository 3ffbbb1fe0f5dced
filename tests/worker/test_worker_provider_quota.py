"""Provider quotas with real worker processes (docs/quotas.md): a 429 met in one queue
pauses every queue's tasks that name the quota while the others run on; a killed
worker's concurrency reservation returns after its lease; a settlement is charged once."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from taskfleet import Queue, Quota

from tests.polling import wait_for
from tests.workers.harness import FAST, Fleet
from tests.workers.quota_handlers import GATE, STARTS

HANDLER = "tests.workers.quota_handlers:call"
EST = {"openai": {"requests": 1, "input_tokens": 300}}


@pytest.fixture
def openai(redis_url: str) -> Iterator[Quota]:
    quota = Quota("openai", redis_url=redis_url)
    yield quota
    quota.close()


def _starts(client: redis.Redis) -> list[str]:
    return [s.decode() for s in client.lrange(STARTS, 0, -1)]


def test_a_rate_limit_met_in_one_queue_pauses_the_quota_in_another_while_other_tasks_run(
    redis_url: str, redis_client: redis.Redis, openai: Quota, tmp_path: Path
) -> None:
    openai.configure(limits={"requests": 10_000}, period_s=60)
    a, b = Queue("qa", redis_url=redis_url), Queue("qb", redis_url=redis_url)
    fa, fb = Fleet(redis_url, "qa", tmp_path), Fleet(redis_url, "qb", tmp_path)
    try:
        fa.add(HANDLER, pod="pod-a").start()
        fb.add(HANDLER, pod="pod-b").start()
        limited = a.enqueue({"limited": 30}, quotas=EST)
        wait_for(lambda: f"qa:{limited}" in _starts(redis_client), timeout=10, what="the 429")
        wait_for(lambda: (openai.get() or openai).paused_until_ms > 0, timeout=10, what="pause")
        needing = b.enqueue({}, quotas=EST)
        plain = b.enqueue({})
        assert b.wait([plain], timeout=10)[plain].state == "done"
        assert f"qb:{needing}" not in _starts(redis_client)
        assert b.get(needing).state == "delayed"
        openai.resume()
        assert b.wait([needing], timeout=15)[needing].state == "done"
    finally:
        fa.close()
        fb.close()


def test_a_killed_workers_concurrency_reservation_returns_after_its_lease_and_is_charged_once(
    redis_url: str, redis_client: redis.Redis, openai: Quota, tmp_path: Path
) -> None:
    openai.configure(limits={"requests": 10_000}, period_s=3600, max_concurrency=1)
    a = Queue("qa", redis_url=redis_url)
    fleet = Fleet(redis_url, "qa", tmp_path)
    try:
        worker = fleet.add(HANDLER, pod="pod-a", args=[*FAST, "--lease-ttl", "2"]).start()
        held = a.enqueue({"hold": True}, quotas=EST)
        wait_for(lambda: f"qa:{held}" in _starts(redis_client), timeout=10, what="the hold")
        assert (openai.get() or openai).reserved == 1
        worker.signal(signal.SIGKILL)
        worker.wait()
        # the reservation outlives the worker until its lease ends, then returns
        wait_for(lambda: (openai.get() or openai).reserved == 0, timeout=10, what="release")
        use = openai.get()
        assert use is not None and use.units["requests"].used == 1  # charged once
        redis_client.rpush(GATE, "go")
        fleet.add(HANDLER, pod="pod-b", args=[*FAST, "--lease-ttl", "2"]).start()
        assert a.wait([held], timeout=15)[held].state == "done"
        use = openai.get()
        # the run taken back after the kill is a new provider call: one estimate more
        assert use is not None and use.units["requests"].used == 2 and use.reserved == 0
    finally:
        fleet.close()


def test_a_handler_settles_what_its_call_really_used(
    redis_url: str, openai: Quota, fleet: Fleet
) -> None:
    openai.configure(limits={"input_tokens": 100_000}, period_s=3600)
    q = Queue("jobs", redis_url=redis_url)
    fleet.add(HANDLER).start()
    tid = q.enqueue({"settle": {"input_tokens": 3412, "output_tokens": 655}}, quotas=EST)
    assert q.wait([tid], timeout=10)[tid].state == "done"
    use = openai.get()
    assert use is not None
    assert use.units["input_tokens"].used == 3412 and use.units["output_tokens"].used == 655


def test_a_reported_spent_quota_pauses_it_for_every_queue(
    redis_url: str, openai: Quota, fleet: Fleet
) -> None:
    openai.configure(limits={"requests": 100}, period_s=3600)
    q = Queue("jobs", redis_url=redis_url)
    fleet.add(HANDLER).start()
    tid = q.enqueue({"report": 30}, quotas=EST)
    assert q.wait([tid], timeout=10)[tid].state == "done"  # its own call succeeded
    use = openai.get()
    assert use is not None and use.paused_until_ms > 0


def test_two_queues_workers_sharing_a_quota_start_no_more_than_its_limit_together(
    redis_url: str, redis_client: redis.Redis, openai: Quota, tmp_path: Path
) -> None:
    openai.configure(limits={"requests": 4}, period_s=3600)
    a, b = Queue("qa", redis_url=redis_url), Queue("qb", redis_url=redis_url)
    fa, fb = Fleet(redis_url, "qa", tmp_path), Fleet(redis_url, "qb", tmp_path)
    try:
        fa.add(HANDLER, pod="pod-a").start()
        fb.add(HANDLER, pod="pod-b").start()
        ids = [q.enqueue({}, quotas=EST) for q in (a, b) for _ in range(6)]
        wait_for(lambda: len(_starts(redis_client)) >= 4, timeout=15, what="4 starts")

        def waiting() -> int:
            return sum(1 for q in (a, b) for t in q.list("delayed").tasks if t.id in ids)

        # every task left is held back by the quota, none started
        wait_for(lambda: waiting() == 8, timeout=15, what="8 tasks waiting for the quota")
        assert len(_starts(redis_client)) == 4
        use = openai.get()
        assert use is not None and use.units["requests"].used == 4
    finally:
        fa.close()
        fb.close()
