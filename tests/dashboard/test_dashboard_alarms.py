"""A queue's health alarms on the dashboard: pending with no live worker, silent workers,
the next task waiting too long, dead tasks piling up; in colour on the queues page and
the queue's page (served for real on a real redis-server), with the thresholds of the
alert rules in manifests/monitoring/ (read from them here)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from taskfleet.dashboard import alarms
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.overview import QueueView, WorkerView
from taskfleet.producer.queue import Queue

from tests.dashboard_fixtures import older_worker
from tests.dashboard_server import Served, serve
from tests.polling import wait_for

RULES = Path(__file__).resolve().parents[2] / "manifests/monitoring/rules/taskfleet.rules.yml"


@pytest.fixture
def served(redis_url: str) -> Iterator[Served]:
    settings = DashboardSettings(redis_url=redis_url, sample_s=0.05, discover_s=0.05)
    with serve(settings) as s:
        yield s


def _rule(name: str) -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    found = [r["expr"] for g in groups for r in g["rules"] if r.get("alert") == name]
    assert found, f"no alert rule {name}"
    return str(found[0])


def test_the_alarms_use_the_alert_rules_thresholds() -> None:
    assert f"taskfleet_queue_oldest_pending_age_seconds > {alarms.OLDEST_READY_S}" in _rule(
        "TaskfleetOldestTaskTooOld"
    )
    window = f"[{alarms.DEAD_WINDOW_S // 60}m]) > {alarms.DEAD_RISE}"
    assert window in _rule("TaskfleetDeadTasksGrowing")
    assert "taskfleet_queue_workers_alive == 0" in _rule("TaskfleetNoLiveWorkers")
    assert "taskfleet_queue_workers - taskfleet_queue_workers_alive > 0" in _rule(
        "TaskfleetWorkersLost"
    )


def _view(pending: int, workers: list[WorkerView], oldest: float | None) -> QueueView:
    return QueueView("q", 1_000_000, {"pending": pending}, {}, oldest, workers=workers)


def test_each_condition_raises_its_alarm_and_a_healthy_queue_none() -> None:
    live = WorkerView("p1", 0, 4, 1.0, False)
    silent = WorkerView("p2", 0, 4, 900.0, False, alive=False)
    assert alarms.alarms(_view(5, [live], 12.0)) == []
    assert [a.alert for a in alarms.alarms(_view(5, [], None))] == ["TaskfleetNoLiveWorkers"]
    assert [a.level for a in alarms.alarms(_view(5, [silent], 700.0))] == [
        "critical",
        "warning",
        "warning",
    ]
    assert "12 min" in alarms.alarms(_view(1, [live], 720.0))[0].text
    rise = alarms.dead_rise([(0, 5), (300_000, 10), (600_000, 17)], 600_000)
    assert rise == (12, 600.0)
    assert alarms.alarms(_view(0, [live], None), rise)[0].alert == "TaskfleetDeadTasksGrowing"
    # past the window, and a counter that went down, count nothing
    assert alarms.dead_rise([(0, 50), (600_000, 0), (1_000_000, 3)], 1_000_000 + 60_000) == (
        3,
        400.0,
    )
    assert alarms.dead_rise([(0, 1)], 0) is None


def test_pending_with_no_live_worker_and_a_silent_worker_are_shown_in_colour(
    served: Served, queue: Queue
) -> None:
    queue.enqueue({})
    older_worker(queue, "pod-gone", beat_ago_ms=3_600_000)
    page = served.get("/queues/jobs").body
    assert 'class="banner alarm" id="alarms"' in page
    assert re.search(r'alarm-critical"[^>]*>1 task pending and no live worker<', page)
    assert "1 worker silent" in page
    assert 'class="alarm-text">0 alive of 1</a>' in page

    def on_the_overview() -> str | None:
        body = served.get("/").body
        return body if "no live worker" in body else None

    body = wait_for(on_the_overview, what="the alarm on the queues page")
    assert 'class="alarmed-critical"' in body and "badge alarm health" in body
    workers = served.get("/queues/jobs/workers").body
    assert '<tr class="silent">' in workers
