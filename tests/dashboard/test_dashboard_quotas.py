"""Provider quotas on the dashboard, served for real on a real redis-server: each quota's
limits, use per unit, running reservations and pause on /quotas; a badge on a queue whose
delayed tasks wait for a paused quota; pause and resume behind the login and CSRF token,
each one log line."""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Iterator

import pytest
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.providerquota import Quota
from taskfleet.producer.queue import Queue

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


@pytest.fixture
def openai(redis_url: str) -> Iterator[Quota]:
    with Quota("openai", redis_url=redis_url) as quota:
        quota.configure({"requests": 10, "input_tokens": 5000}, period_s=60, max_concurrency=4)
        yield quota


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def headers(served: Served) -> dict[str, str]:
    login = served.post("/login", [("token", TOKEN), ("next", "/")], SAME_SITE)
    return {**SAME_SITE, "Cookie": login.headers["set-cookie"].split(";", 1)[0]}


def csrf(served: Served, sent: dict[str, str]) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', served.get("/quotas", sent).body)
    assert found
    return found.group(1)


def listed(served: Served, sent: dict[str, str] | None = None) -> str:
    """The quotas page once the background discovery has found openai."""

    def found() -> str | None:
        page = served.get("/quotas", sent).body
        return page if 'id="quota-openai"' in page else None

    return wait_for(found, timeout=10, what="the quotas page to list openai")


def test_the_quotas_page_shows_limits_use_reservations_and_a_pause_with_its_reason(
    served: Served, openai: Quota, queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue({}, quotas={"openai": {"requests": 1, "input_tokens": 3000}})
    broker = make_broker("jobs")
    broker.register(2)
    assert len(broker.claim(1).tasks) == 1  # reserves its estimate
    page = listed(served)
    words = text_of(page)
    assert "window 1 min" in words and "1 of 4 running" in words
    row = text_of(page.split(">input_tokens</td>", 1)[1].split("</tr>", 1)[0])
    assert row.split()[:2] == ["3,000", "5,000"]
    assert "pause off" in words
    openai.pause(1800, reason="429 storm")
    paused = text_of(served.get("/quotas").body)
    assert "paused 30 min: 429 storm" in paused


def test_a_queue_whose_delayed_tasks_wait_for_a_paused_quota_has_a_badge(
    served: Served, openai: Quota, queue: Queue, make_broker: MakeBroker
) -> None:
    other = Queue("other", client=queue.client)
    other.enqueue({}, delay=3600)
    task_id = queue.enqueue({}, quotas={"openai": {"requests": 1}})
    openai.pause(600, reason="429 storm")
    broker = make_broker("jobs")
    broker.register(1)
    assert broker.claim(1).tasks == []  # the quota is paused: the task waits, delayed
    assert queue.get(task_id).state.value == "delayed"  # type: ignore[union-attr]

    def badges() -> str | None:
        page = served.get("/").body
        return page if 'href="/queues/other"' in page and "quota-paused" in page else None

    page = wait_for(badges, timeout=10, what="the queues page with both queues and a badge")
    jobs_row = page.split('href="/queues/jobs"', 1)[1].split("</td>", 1)[0]
    other_row = page.split('href="/queues/other"', 1)[1].split("</td>", 1)[0]
    assert "waits on openai (paused)" in text_of(jobs_row)
    assert "quota-paused" not in other_row
    openai.resume()
    assert "quota-paused" not in served.get("/").body


def test_a_quota_is_paused_and_resumed_from_the_page_after_login_and_each_is_logged(
    served: Served, openai: Quota, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "taskfleet.dashboard")
    listed(served)
    anonymous = served.post("/quotas", [("op", "resume"), ("name", "openai")], SAME_SITE)
    assert anonymous.status == 403
    sent = headers(served)
    form = [("csrf", csrf(served, sent)), ("op", "pause"), ("name", "openai")]
    paused = served.post("/quotas", [*form, ("seconds", "900"), ("reason", "bill")], sent)
    assert paused.status == 303 and paused.headers["location"] == "/quotas"
    use = openai.get()
    assert use is not None and use.reason == "bill" and use.paused_until_ms > 0
    assert "act-quota-resume" in served.get("/quotas", sent).body
    form = [("csrf", csrf(served, sent)), ("op", "resume"), ("name", "openai")]
    assert served.post("/quotas", form, sent).status == 303
    use = openai.get()
    assert use is not None and use.paused_until_ms == 0
    lines = [r.fields for r in caplog.records if r.getMessage() == "dashboard_action"]  # type: ignore[attr-defined]
    assert [(f["action"], f["quota"]) for f in lines] == [
        ("quota_pause", "openai"),
        ("quota_resume", "openai"),
    ]
    bad = [("csrf", csrf(served, sent)), ("op", "pause"), ("name", "nope"), ("seconds", "5")]
    refused = served.post("/quotas", bad, sent)
    assert refused.status == 400 and "no provider quota" in refused.body
