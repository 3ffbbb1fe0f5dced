"""A queue's schedules and flows on the dashboard, served for real on a real
redis-server: /queues/Q/schedules lists each schedule's cron, zone, next and last fire
and whether it is paused; pause, resume and run now behind the login and CSRF token;
/queues/Q/flows lists the flows not ended, each linked to its first task's page (which
draws the flow's tree)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.flows import chain, chord, group
from taskfleet.producer.queue import Queue

from tests.dashboard_server import Served, serve

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


def test_the_schedules_page_lists_cron_zone_next_fire_and_paused(
    served: Served, queue: Queue
) -> None:
    queue.schedule("nightly", "0 3 * * *", {"v": 1}, tz="Europe/Paris", group="tenant-1")
    queue.schedule("yearly", "0 0 1 1 *", {}, paused=True)
    page = text_of(served.get("/queues/jobs/schedules").body)
    assert "nightly 0 3 * * * Europe/Paris in " in page
    assert re.search(r"yearly 0 0 1 1 \* UTC - never paused 0 0 -", page), page
    assert "2 schedules" in page
    assert 'href="/queues/jobs/schedules"' in served.get("/queues/jobs").body


def test_pause_resume_and_run_now_act_once_logged_in_with_the_csrf_token(
    served: Served, queue: Queue
) -> None:
    queue.schedule("nightly", "0 3 * * *", {"v": 1}, priority=7)
    form = [("name", "nightly"), ("op", "pause")]
    assert served.post("/queues/jobs/schedules", form, SAME_SITE).status == 403
    login = served.post("/login", [("token", TOKEN), ("next", "/")], SAME_SITE)
    headers = {**SAME_SITE, "Cookie": login.headers["set-cookie"].split(";", 1)[0]}
    page = served.get("/queues/jobs/schedules", headers).body
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found
    csrf = [("csrf", found.group(1))]
    assert served.post("/queues/jobs/schedules", form, headers).status == 403  # no token
    assert served.post("/queues/jobs/schedules", csrf + form, headers).status == 303
    stored = queue.get_schedule("nightly")
    assert stored is not None and stored.paused
    assert "Resume" in served.get("/queues/jobs/schedules", headers).body
    resume = [*csrf, ("name", "nightly"), ("op", "resume")]
    assert served.post("/queues/jobs/schedules", resume, headers).status == 303
    stored = queue.get_schedule("nightly")
    assert stored is not None and not stored.paused
    run_now = [*csrf, ("name", "nightly"), ("op", "run")]
    assert served.post("/queues/jobs/schedules", run_now, headers).status == 303
    (task,) = queue.list("pending").tasks
    assert task.payload == {"v": 1} and task.priority == 7
    missing = [*csrf, ("name", "nope"), ("op", "run")]
    gone = served.post("/queues/jobs/schedules", missing, headers)
    assert gone.status == 400 and "no schedule" in gone.body


def test_the_flows_page_lists_flows_not_ended_linked_to_their_tree(
    served: Served, queue: Queue
) -> None:
    pages = group(*({"payload": {"page": i}, "task_id": f"p{i}"} for i in range(3)))
    queue.enqueue_flow(
        chain(
            {"payload": {}, "task_id": "fetch"}, chord(pages, {"payload": {}, "task_id": "merge"})
        )
    )
    body = served.get("/queues/jobs/flows").body
    assert 'href="/queues/jobs/tasks/id/fetch"' in body
    assert "1 flow not ended" in text_of(body)
    assert re.search(r'data-label="open">5<', body), body
    tree = served.get("/queues/jobs/tasks/id/fetch").body
    assert 'href="/queues/jobs/tasks/id/p0"' in tree  # its dependants, on the tree
