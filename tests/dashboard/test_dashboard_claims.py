"""What holds a queue's claims back, on the dashboard served for real against a real
redis-server: a claim pause (the queue's or a group's) with its reason and time left on
the queue page and as a badge on the overview, rate-limit use and budget spent; pause and
resume from the page behind the login, the CSRF token and the same-origin check, each one
log line."""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Iterator

import pytest
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.groups import GroupSettings

from tests.dashboard_server import Served, serve
from tests.fixtures_redis import MakeBroker
from tests.polling import wait_for

TOKEN = "dashboard-token-0123456789abcdef"
SAME_SITE = {"Sec-Fetch-Site": "same-origin"}


@pytest.fixture
def served(redis_url: str) -> Iterator[Served]:
    settings = DashboardSettings(
        redis_url=redis_url, sample_s=0.05, discover_s=0.05, read_only=False, token=TOKEN
    )
    with serve(settings) as s:
        yield s


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def _logged_in(served: Served) -> tuple[dict[str, str], str]:
    reply = served.post("/login", [("token", TOKEN), ("next", "/")], SAME_SITE)
    assert reply.status == 303
    headers = {**SAME_SITE, "Cookie": reply.headers["set-cookie"].split(";", 1)[0]}
    page = served.get("/queues/jobs", headers).body
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no form on the queue page"
    return headers, found.group(1)


def test_a_claim_pause_with_its_reason_shows_on_the_queue_page_and_the_overview(
    served: Served, queue: Queue
) -> None:
    queue.enqueue({})
    queue.pause_claims(1800, reason="OpenAI <429> storm")
    page = text_of(served.get("/queues/jobs").body)
    assert "Claims paused for 29 min" in page or "Claims paused for 30 min" in page
    assert "OpenAI <429> storm" in page
    assert "&lt;429&gt;" in served.get("/queues/jobs").body  # escaped

    def badge() -> str | None:
        body = served.get("/").body
        return body if "claim-paused" in body else None

    body = wait_for(badge, what="the overview's badge")
    assert "OpenAI &lt;429&gt; storm" in body and "claims paused" in text_of(body)
    queue.resume_claims()
    assert "claim-pause" not in served.get("/queues/jobs").body


def test_a_groups_own_pause_shows_its_group_reason_and_time_left(
    served: Served, queue: Queue
) -> None:
    queue.enqueue_many([{"payload": {}, "group": "tenant-7"}, {"payload": {}, "group": "b"}])
    queue.pause_claims(600, reason="tenant over quota", group="tenant-7")
    page = text_of(served.get("/queues/jobs").body)
    assert re.search(r"Group tenant-7 paused for (9|10) min .*tenant over quota", page), page
    assert "Claims paused" not in page  # the queue itself is not

    # the overview finds queues by a scan it refreshes: the badge once it lists the queue
    def listed() -> str | None:
        text = text_of(served.get("/").body)
        return text if "jobs" in text else None

    overview = wait_for(listed, what="the overview to list the queue")
    assert "1 group paused" in overview, overview


def test_rate_limit_use_and_budget_spent_are_shown(
    served: Served, queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(rate_limit_tasks=50, rate_limit_period_s=60, budget_day=3))
    queue.enqueue_many([{"payload": {"i": i}} for i in range(5)])
    worker = make_broker("jobs")
    got = worker.claim(3).tasks
    assert len(got) == 3
    page = text_of(served.get("/queues/jobs").body)
    assert "rate limit (tasks) 3 of 50 per 1 min" in page
    assert "budget today 3 of 3 spent" in page
    assert "Budget spent" in page


def test_pause_and_resume_from_the_page_need_the_login_and_the_csrf_token(
    served: Served, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    queue.set_group("g1", GroupSettings())
    form = [("op", "pause"), ("seconds", "300"), ("reason", "deploy window")]
    anonymous = served.post("/queues/jobs/claims", form, SAME_SITE)
    assert anonymous.status == 403 and not queue.quota().paused
    headers, csrf = _logged_in(served)
    forged = served.post("/queues/jobs/claims", [("csrf", "x" * 20), *form], headers)
    assert forged.status == 403 and not queue.quota().paused
    elsewhere = served.post(
        "/queues/jobs/claims", [("csrf", csrf), *form], {**headers, "Sec-Fetch-Site": "cross-site"}
    )
    assert elsewhere.status == 403 and not queue.quota().paused
    bad = served.post("/queues/jobs/claims", [("csrf", csrf), ("op", "pause")], headers)
    assert bad.status == 400 and "seconds must be" in bad.body and not queue.quota().paused
    with caplog.at_level(logging.INFO, logger="taskfleet.dashboard"):
        done = served.post("/queues/jobs/claims", [("csrf", csrf), *form], headers)
    assert done.status == 303 and done.headers["location"] == "/queues/jobs"
    state = queue.quota()
    assert state.paused and state.reason == "deploy window" and state.pause_left_ms > 290_000
    lines = [r for r in caplog.records if r.getMessage() == "dashboard_action"]
    assert lines and lines[-1].fields["action"] == "pause_claims"  # type: ignore[attr-defined]
    assert "Resume claims" in served.get("/queues/jobs", headers).body
    group = [("csrf", csrf), ("op", "pause"), ("seconds", "60"), ("group", "g1")]
    assert served.post("/queues/jobs/claims", group, headers).status == 303
    assert queue.quota(group="g1").paused
    resumed = served.post("/queues/jobs/claims", [("csrf", csrf), ("op", "resume")], headers)
    assert resumed.status == 303 and not queue.quota().paused
    assert queue.quota(group="g1").paused  # a group's own pause is its own
