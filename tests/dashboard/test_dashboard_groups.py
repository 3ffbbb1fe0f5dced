"""A grouped queue's pending tasks on the dashboard, served for real on a real
redis-server: the pending page lists every group's tasks in the order the claim serves
them (``Queue.list``'s), with a group column and a page per group; the queue page's
oldest ready task is read across groups."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.queue import Queue

from tests.dashboard_server import Served, serve


@pytest.fixture
def served(redis_url: str) -> Iterator[Served]:
    settings = DashboardSettings(redis_url=redis_url, sample_s=0.05, discover_s=0.05, page_size=5)
    with serve(settings) as s:
        yield s


def _three_groups(queue: Queue) -> None:
    for group, count in (("t1", 4), ("t2", 3), ("t3@x.io", 2)):
        queue.enqueue_many([{"payload": {"i": i}, "group": group} for i in range(count)])


def _listed(body: str) -> list[str]:
    return re.findall(r'<td data-label="id"><a href="/queues/jobs/tasks/id/([^"]+)"', body)


def test_the_pending_page_of_a_queue_with_three_groups_lists_them_as_queue_list_does(
    served: Served, queue: Queue
) -> None:
    _three_groups(queue)
    expected = [t.id for t in queue.list("pending", limit=100).tasks]
    first = served.get("/queues/jobs/tasks/pending").body
    second = served.get("/queues/jobs/tasks/pending?page=2").body
    assert _listed(first) + _listed(second) == expected
    assert "9 tasks; page 1 of 2" in first and "next to run first, across groups" in first
    assert "<th>group</th>" in first
    assert '<a href="/queues/jobs/tasks/pending?group=t3%40x.io">t3@x.io</a>' in first + second


def test_a_groups_own_pending_page_lists_only_its_tasks_and_pages_within_it(
    served: Served, queue: Queue
) -> None:
    _three_groups(queue)
    own = [t.id for t in queue.list("pending", group="t1", limit=100).tasks]
    body = served.get("/queues/jobs/tasks/pending?group=t1").body
    assert _listed(body) == own
    assert "4 tasks; page 1 of 1" in body and "of group" in body
    bad = served.get("/queues/jobs/tasks/pending?group=no%20spaces")
    assert bad.status == 400 and "group must be" in bad.body
    assert served.get("/queues/jobs/tasks/dead?group=t1").status == 400


def test_the_queue_page_shows_the_oldest_ready_task_across_groups_and_links_each_group(
    served: Served, queue: Queue
) -> None:
    _three_groups(queue)
    body = served.get("/queues/jobs").body
    line = re.search(r"oldest ready task waits <span[^>]*>([^<]+)<", body)
    assert line is not None and line.group(1).strip() != "-"
    assert 'href="/queues/jobs/tasks/pending?group=t1"' in body
