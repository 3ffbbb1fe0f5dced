"""The rate charts from the queue's own per-minute counts, on a real redis-server: each
completed batch and each failure counted in its minute's hash (one HINCRBY a call, an
hour's expiry); a dashboard started later draws the last hour from them at once."""

from __future__ import annotations

import html
import re

from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import run
from taskfleet.protocol.keys import QueueKeys

from tests.dashboard_server import serve
from tests.fixtures_redis import MakeBroker
from tests.polling import wait_for


def test_completions_and_failures_are_counted_in_their_minute_which_expires_after_an_hour(
    queue: Queue, make_broker: MakeBroker
) -> None:
    ids = [queue.enqueue({"i": i}, max_attempts=1) for i in range(4)]
    broker = make_broker("jobs")
    broker.register(4)
    claimed = {t.id: t for t in broker.claim(4).tasks}
    before = run(queue.client, queue.reads.clock()) // 60_000
    assert broker.complete_many([(i, claimed[i].token, None) for i in ids[:3]]) == [1, 1, 1]
    assert broker.fail(ids[3], claimed[ids[3]].token, "ValueError: no", False) == "dead"
    after = run(queue.client, queue.reads.clock()) // 60_000
    history = run(queue.client, queue.reads.rate_history(after, 2))
    assert sum(c for _, c, _ in history) == 3 and sum(f for _, _, f in history) == 1
    minute = next(m for m, c, _ in history if c)
    assert before <= minute <= after
    ttl = queue.client.ttl(QueueKeys("jobs").rate(minute))
    assert 3800 < ttl <= 3900


def test_a_dashboard_started_later_draws_the_last_hour_from_the_queues_own_counts(
    redis_url: str, queue: Queue
) -> None:
    queue.enqueue({})  # the queue exists (its counters) for the discovery
    now = run(queue.client, queue.reads.clock()) // 60_000
    for ago, completed in ((50, 1200), (30, 600), (10, 60)):
        queue.client.hset(QueueKeys("jobs").rate(now - ago), "completed", completed)
    settings = DashboardSettings(redis_url=redis_url, sample_s=0.05, discover_s=0.05)
    with serve(settings) as served:

        def chart() -> str | None:
            page = served.get("/queues/jobs").body
            found = re.search(r'<svg class="chart"[^>]*aria-label="([^"]+)"', page)
            return html.unescape(found.group(1)) if found else None

        label = wait_for(chart, timeout=10, what="the queue page's chart")
    # 1,200 completed in one minute, 50 minutes before the dashboard started: 20/s
    assert "peak 20.0/s, per minute, over the last hour" in label
