"""Dead tasks triaged on the dashboard, served for real on a real redis-server: the
newest counted by error (class and message) and reason, each count a filter; the dead
page filtered by reason, group, error and task name; retry and purge of the matching tasks through
the confirmed actions, behind the login and CSRF token."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.dashboard.triage import error_class
from taskfleet.producer.queue import Queue

from tests.dashboard_server import Served, serve
from tests.fixtures_redis import MakeBroker

TOKEN = "dashboard-token-0123456789abcdef"
SAME_SITE = {"Sec-Fetch-Site": "same-origin"}
TRACE = 'Traceback (most recent call last):\n  File "app.py", line 3, in run\n'


@pytest.fixture
def served(redis_url: str) -> Iterator[Served]:
    settings = DashboardSettings(
        redis_url=redis_url, sample_s=0.05, discover_s=0.05, read_only=False, token=TOKEN
    )
    with serve(settings) as s:
        yield s


def _dead(queue: Queue, make_broker: MakeBroker) -> dict[str, list[str]]:
    """Six dead tasks: three KeyError (two of group a), two TimeoutError, one ValueError."""
    errors = [
        ("a", TRACE + "KeyError: 'summary'"),
        ("a", TRACE + "KeyError: 'summary'"),
        ("b", TRACE + "KeyError: 'summary'"),
        ("b", TRACE + "TimeoutError: upstream took 30 s"),
        ("", TRACE + "TimeoutError: upstream took 30 s"),
        ("", "ValueError: <bad> input"),
    ]
    made = [
        queue.enqueue({"i": i}, max_attempts=1, group=g or None) for i, (g, _) in enumerate(errors)
    ]
    broker = make_broker("jobs")
    broker.register(10)
    by_error: dict[str, list[str]] = {}
    claimed = {t.id: t for _ in range(6) for t in broker.claim(1).tasks}
    for task_id, (_, error) in zip(made, errors, strict=True):
        task = claimed[task_id]
        assert broker.fail(task.id, task.token, error, False) == "dead"
        by_error.setdefault(error.splitlines()[-1], []).append(task_id)
    return by_error


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def _listed(body: str) -> set[str]:
    return set(re.findall(r'<td data-label="id"><a href="/queues/jobs/tasks/id/([^"]+)"', body))


def test_the_dead_page_counts_the_newest_by_error_and_reason_most_first(
    served: Served, queue: Queue, make_broker: MakeBroker
) -> None:
    _dead(queue, make_broker)
    page = served.get("/queues/jobs/tasks/dead").body
    triage = text_of(page.split('id="triage"', 1)[1].split("</table>", 1)[0])
    rows = re.findall(r"(\d+) (\w+) ([A-Za-z]+Error: [^ ]+(?: [^ ]+)*?) \w{8}", triage)
    assert [(n, e.split(":")[0]) for n, _, e in rows] == [
        ("3", "KeyError"),
        ("2", "TimeoutError"),
        ("1", "ValueError"),
    ]
    assert "&lt;bad&gt;" in page  # escaped
    assert error_class("KeyError: 'summary'") == "KeyError"
    assert error_class("no class here: at all") == "no class here: at all"


def test_the_dead_page_filters_by_error_class_message_group_and_reason(
    served: Served, queue: Queue, make_broker: MakeBroker
) -> None:
    by_error = _dead(queue, make_broker)
    keys = by_error["KeyError: 'summary'"]
    assert _listed(served.get("/queues/jobs/tasks/dead?error=KeyError").body) == set(keys)
    exact = "/queues/jobs/tasks/dead?error=TimeoutError%3A+upstream+took+30+s"
    assert _listed(served.get(exact).body) == set(by_error["TimeoutError: upstream took 30 s"])
    both = served.get("/queues/jobs/tasks/dead?error=KeyError&in_group=a").body
    assert len(_listed(both)) == 2 and "2 matching of the 6 dead tasks" in text_of(both)
    reason = queue.get(keys[0])
    assert reason is not None and reason.reason
    assert len(_listed(served.get(f"/queues/jobs/tasks/dead?reason={reason.reason}").body)) == 6
    assert _listed(served.get("/queues/jobs/tasks/dead?reason=nothing-like-it").body) == set()


def test_the_dead_page_filters_by_task_name_read_from_small_payloads_only(
    served: Served, queue: Queue, make_broker: MakeBroker
) -> None:
    made = [
        queue.enqueue({"i": 0}, task="summarise", max_attempts=1, group="a"),
        queue.enqueue({"i": 1}, task="summarise", max_attempts=1),
        queue.enqueue({"i": 2}, task="embed", max_attempts=1),
        queue.enqueue({"big": "x" * 5000}, task="summarise", max_attempts=1),
        queue.enqueue({"i": 4}, max_attempts=1),  # no name: the default handler
    ]
    broker = make_broker("jobs")
    broker.register(10)
    claimed = {t.id: t for _ in made for t in broker.claim(1).tasks}
    for task_id in made:
        assert broker.fail(task_id, claimed[task_id].token, "KeyError: 'x'", False) == "dead"
    named = served.get("/queues/jobs/tasks/dead?name=summarise").body
    assert _listed(named) == set(made[:2])  # the one over 4 KiB is not read for its name
    assert "2 matching of the 5 dead tasks" in text_of(named)
    assert "one over 4 KiB never matches" in text_of(named)
    both = served.get("/queues/jobs/tasks/dead?name=summarise&in_group=a").body
    assert _listed(both) == {made[0]}
    assert 'name="name" value="summarise"' in both  # the form keeps the filter
    assert _listed(served.get("/queues/jobs/tasks/dead?name=nothing").body) == set()


def test_retry_matching_sends_back_only_the_matching_tasks_once_confirmed(
    served: Served, queue: Queue, make_broker: MakeBroker
) -> None:
    by_error = _dead(queue, make_broker)
    login = served.post("/login", [("token", TOKEN), ("next", "/")], SAME_SITE)
    headers = {**SAME_SITE, "Cookie": login.headers["set-cookie"].split(";", 1)[0]}
    page = served.get("/queues/jobs/tasks/dead?error=KeyError", headers).body
    form = page.split('id="matching-actions"', 1)[1].split("</form>", 1)[0]
    fields = re.findall(r'name="(\w+)" value="([^"]*)"', form)
    assert sorted(v for k, v in fields if k == "id") == sorted(by_error["KeyError: 'summary'"])
    fields = [(k, html.unescape(v)) for k, v in fields]
    asked = served.post("/queues/jobs/actions", fields, headers)
    assert asked.status == 200 and "Retry 3 dead tasks?" in text_of(asked.body)
    done = served.post("/queues/jobs/actions", [*fields, ("confirm", "1")], headers)
    assert "3 of 3 sent back to pending" in text_of(done.body)
    assert queue.stats()["dead"] == 3
    anonymous = served.post("/queues/jobs/actions", [*fields, ("confirm", "1")], SAME_SITE)
    assert anonymous.status == 403
