"""Named tasks on a real cluster: a TaskQueue's `handlers` reach its pods, each name runs
its own handler, an unknown name goes dead naming itself, and producers wait without
polling."""

from __future__ import annotations

from collections.abc import Callable

import redis
from taskfleet import Queue, Task

from e2e.lib.fleet import Fleet
from e2e.lib.ledger import SAMPLE_HANDLER

pytest_plugins = ["e2e.lib.fixtures"]


def test_a_taskqueue_with_handlers_runs_each_name_with_its_handler_and_fails_unknown_ones(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(
        "named",
        replicas=1,
        handlers={"echo": "taskfleet.samples:echo", "fail": "taskfleet.samples:fail"},
        maxAttempts=1,
    )
    args = fleet.container()["args"]
    handlers = [args[i + 1] for i, arg in enumerate(args) if arg == "--handler"]
    assert handlers == [
        SAMPLE_HANDLER,
        "echo=taskfleet.samples:echo",
        "fail=taskfleet.samples:fail",
    ]
    fleet.wait_ready(1)

    def run(_: redis.Redis) -> dict[str, Task]:

        with Queue(fleet.queue.queue, fleet.forward.url) as queue:
            ids = {
                "echo": queue.enqueue({"n": 1}, task="echo"),
                "fail": queue.enqueue({"message": "no"}, task="fail"),
                "rotate": queue.enqueue({}, task="rotate"),
                "plain": queue.enqueue({"seconds": 0, "record_key": fleet.queue.record_key}),
            }
            finished = queue.wait(list(ids.values()), timeout=60)
            return {name: finished[task_id] for name, task_id in ids.items()}

    tasks = fleet.forward.call(run, timeout=120)
    echo, fail, rotate, plain = (tasks[k] for k in ("echo", "fail", "rotate", "plain"))
    assert (echo.state, echo.result, echo.name) == ("done", {"n": 1}, "echo")
    assert (fail.state, fail.error) == ("dead", "RuntimeError: no")
    assert (rotate.state, rotate.reason) == ("dead", "unknown task")
    assert "'rotate'" in (rotate.error or "")
    assert plain.state == "done"
