"""The running and waiting pages for long jobs, served for real on a real redis-server:
each running task's name, group, progress bar and message, elapsed time and lease left;
each waiting task's dependencies (linked) and how many are left; a large payload never
read for its name."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import pytest
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.queue import Queue
from taskfleet.protocol.control_ops import Report

from tests.dashboard_server import Served, serve
from tests.fixtures_redis import MakeBroker


@pytest.fixture
def served(redis_url: str) -> Iterator[Served]:
    settings = DashboardSettings(redis_url=redis_url, sample_s=0.05, discover_s=0.05)
    with serve(settings) as s:
        yield s


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def test_a_running_task_shows_name_group_progress_message_elapsed_and_lease_left(
    served: Served, queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"doc": 7}, task="summarise", group="tenant-3")
    big = queue.enqueue({"blob": "x" * 10_000}, task="bulk")
    broker = make_broker("jobs")
    broker.register(4)
    claimed = {t.id: t for t in broker.claim(2).tasks}
    progress = json.dumps({"done": 3, "total": 4, "message": "embedding <chunk> 3"})
    assert broker.report([Report(task_id, claimed[task_id].token, progress)]) == [True]
    page = served.get("/queues/jobs/tasks/running").body
    row = page.split(f'title="{task_id}"', 1)[1].split("</tr>", 1)[0]
    words = text_of(row)
    assert "summarise" in words and "tenant-3" in words
    assert '<progress max="1" value="0.75">' in row and "75%" in words
    assert "embedding <chunk> 3" in words and "&lt;chunk&gt;" in row
    assert re.search(r'data-label="elapsed">\d+ (ms|s)<', row), row
    assert re.search(r'data-label="lease left"><span class="">\d+ s', row), row
    big_row = page.split(f'title="{big}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-label="name" class="name">…<' in big_row  # too big to read for its name


def test_a_waiting_task_shows_what_it_waits_for_and_how_many_are_left(
    served: Served, queue: Queue
) -> None:
    deps = [queue.enqueue({"i": i}, task_id=f"dep-{i}") for i in range(5)]
    queue.enqueue({}, task_id="report", after=deps)
    page = served.get("/queues/jobs/tasks/waiting").body
    row = page.split('title="report"', 1)[1].split("</tr>", 1)[0]
    assert [d for d in deps[:3] if f'href="/queues/jobs/tasks/id/{d}"' in row] == deps[:3]
    assert "and 2 more" in text_of(row) and "(5 of 5 left)" in text_of(row)
