"""`taskfleet top` against a real redis-server: the snapshot it reads, and the live view
run in a real terminal (tmux), redrawn as the queue changes and quit with q."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import run
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import WORKER_LEVEL

from tests.needs import need
from tests.polling import wait_for

TMUX = shutil.which("tmux")


def taskfleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskfleet", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def busy_queue(queue: Queue, make_broker: Callable[..., Any]) -> None:
    """3 pending, 1 running on pod-a, 1 dead with a reason."""
    for i in range(3):
        queue.enqueue({"i": i})
    broker = make_broker(queue.name, pod="pod-a")
    broker.register(4)
    queue.enqueue({"doomed": True}, priority=10, max_attempts=1)
    queue.enqueue({"held": True}, priority=9)
    doomed, _held = broker.claim(2).tasks
    assert broker.fail(doomed.id, doomed.token, "ValueError: no such file") == "dead"


def test_a_snapshot_shows_depths_the_oldest_ready_task_workers_and_the_dead(
    queue: Queue, redis_url: str, make_broker: Callable[..., Any]
) -> None:
    busy_queue(queue, make_broker)
    with Queue("other", redis_url=redis_url) as other_queue:
        other_queue.enqueue({})

    result = taskfleet("top", "--json", "--redis-url", redis_url)

    assert result.returncode == 0, result.stderr
    views = {v["name"]: v for v in json.loads(result.stdout)}
    assert sorted(views) == ["jobs", "other"]  # found without naming them
    jobs = views["jobs"]
    assert (jobs["counts"]["pending"], jobs["counts"]["running"], jobs["counts"]["dead"]) == (
        3,
        1,
        1,
    )
    assert jobs["oldest_pending_s"] is not None and jobs["oldest_pending_s"] >= 0
    [worker] = jobs["workers"]
    assert worker["pod"] == "pod-a" and worker["slots"] == 4
    assert worker["level"] == WORKER_LEVEL
    [dead] = jobs["dead"]
    assert "no such file" in dead["error"]


def test_a_frame_flags_a_live_0_1_worker_under_its_queues_workers(
    queue: Queue, redis_url: str, make_broker: Callable[..., Any]
) -> None:
    make_broker(queue.name, pod="pod-new").register(2)
    now_ms = run(queue.client, queue.reads.clock())
    # A 0.1.x worker's record, as it writes it: no "level".
    written_by_0_1 = {"incarnation": "i", "heartbeat_ms": now_ms, "inflight": 0, "concurrency": 1}
    queue.client.hset(QueueKeys(queue.name).workers, "pod-old", json.dumps(written_by_0_1))

    result = taskfleet("top", queue.name, "--once", "--redis-url", redis_url)

    assert result.returncode == 0, result.stderr
    rows = {line.split()[1]: line for line in result.stdout.splitlines() if "pod-" in line}
    assert "1 (0.1.x)" in rows["pod-old"] and "(0.1.x)" not in rows["pod-new"]
    assert "worker pod-old runs taskfleet 0.1.x (level 1)" in " ".join(result.stdout.split())


def test_a_bad_queue_name_is_one_line_and_exit_2(redis_url: str) -> None:
    result = taskfleet("top", "no spaces", "--once", "--redis-url", redis_url)
    assert result.returncode == 2
    assert result.stderr.startswith("taskfleet: error: invalid queue name 'no spaces'")
    assert "Traceback" not in result.stderr


@pytest.fixture
def tmux() -> Iterator[Callable[..., str]]:
    """Runs ``tmux -L <private server> ARGS`` (a server of its own, killed afterwards)."""
    need(TMUX, "needs tmux (make deps)")
    server = f"taskfleet-test-{secrets.token_hex(3)}"

    def run(*args: str) -> str:
        done = subprocess.run(
            [TMUX, "-L", server, *args], check=False, capture_output=True, text=True, timeout=10
        )
        return done.stdout if done.returncode == 0 else ""

    yield run
    subprocess.run(
        [TMUX, "-L", server, "kill-server"], check=False, capture_output=True, timeout=10
    )


def test_the_live_view_redraws_as_the_queue_changes_and_q_quits(
    queue: Queue, redis_url: str, make_broker: Callable[..., Any], tmux: Callable[..., str]
) -> None:
    busy_queue(queue, make_broker)
    command = f"{sys.executable} -m taskfleet top jobs --interval 0.2 --redis-url {redis_url}"
    tmux("new-session", "-d", "-x", "120", "-y", "40", "-s", "top", command)

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", "top")

    def row(pending: int) -> bool:
        """The queue table shows ``pending`` for jobs (cells between the box lines)."""
        for line in screen().splitlines():
            cells = [cell.strip() for cell in line.split("│")]
            if len(cells) > 2 and cells[1:3] == ["jobs", str(pending)]:
                return True
        return False

    wait_for(lambda: row(3), timeout=15, what=lambda: f"3 pending shown:\n{screen()}")
    assert "pod-a" in screen() and "1/4" in screen()  # the worker and what it holds
    assert "no such file" in screen()  # the dead task's error

    queue.enqueue_many([{"payload": {"more": i}} for i in range(4)])
    wait_for(lambda: row(7), timeout=15, what=lambda: f"7 pending shown:\n{screen()}")

    tmux("send-keys", "-t", "top", "q")
    wait_for(
        lambda: not tmux("list-sessions"),
        timeout=10,
        what=lambda: f"top to quit on q:\n{screen()}",
    )


def test_a_workers_held_slots_show_in_top_and_in_taskfleet_workers(
    queue: Queue, redis_url: str, make_broker: Callable[..., Any]
) -> None:
    queue.enqueue({})
    broker = make_broker(queue.name, pod="pod-held")
    broker.register(2)
    broker.beat({}, inflight=0, held=2)  # two calls given up on still run

    snapshot = json.loads(taskfleet("top", "--json", "--redis-url", redis_url).stdout)
    [worker] = snapshot[0]["workers"]
    assert (worker["holds"], worker["held"], worker["slots"]) == (0, 2, 2)
    frame = taskfleet("top", queue.name, "--once", "--redis-url", redis_url).stdout
    [row] = [line for line in frame.splitlines() if "pod-held" in line]
    assert row.replace("│", " ").split()[:3] == ["pod-held", "0/2", "2"], frame
    listed = taskfleet("workers", queue.name, "--redis-url", redis_url).stdout
    assert "holds 0/2  held 2" in listed, listed
    [row] = json.loads(taskfleet("workers", queue.name, "--json", "--redis-url", redis_url).stdout)
    assert (row["inflight"], row["held"]) == (0, 2)
