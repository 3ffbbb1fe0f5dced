"""What a handler forks and leaves running ends with its worker, even a process that
ignores SIGTERM: it would otherwise be an orphan nobody stops."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from taskfleet.producer.queue import Queue

from tests.polling import wait_for
from tests.workers.harness import Fleet


def running(pid: int) -> bool:
    """The process exists and is no zombie (a zombie has ended, only unreaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def test_a_process_a_handler_left_that_ignores_sigterm_ends_when_the_worker_exits(
    fleet: Fleet, queue: Queue
) -> None:
    task_id = queue.enqueue({"seconds": 120})
    worker = fleet.add("tests.workers.breaking:leave_child").start()
    [task] = queue.wait([task_id], timeout=15).values()
    orphan = task.result["child"]  # type: ignore[index]
    try:
        assert running(orphan)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.log_text()
        wait_for(lambda: not running(orphan), timeout=10, what=f"orphan {orphan} to end")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(orphan, signal.SIGKILL)
