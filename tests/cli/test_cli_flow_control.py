"""``taskfleet cancel --flow / --branch``, ``taskfleet retry --flow / --branch``, and what
``taskfleet retry`` says of a dependant its dead dependency ends again, through the CLI's
own process."""

from __future__ import annotations

import json
from pathlib import Path

from taskfleet.producer.queue import Queue
from taskfleet.protocol.states import TaskState

from tests.fixtures_redis import MakeBroker
from tests.workers.harness import env_for, taskfleet


def _chain(queue: Queue) -> None:
    queue.enqueue_many(
        [
            {"payload": {}, "task_id": "a", "max_attempts": 1},
            {"payload": {}, "task_id": "b", "after": ["a"]},
            {"payload": {}, "task_id": "c", "after": ["b"]},
        ]
    )


def test_cancel_and_retry_a_flow_from_the_command_line(redis_url: str, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        _chain(queue)
        branch = taskfleet("cancel", "q", "b", "--branch", "--json", env=env)
        assert branch.returncode == 0, branch.stderr
        assert json.loads(branch.stdout) == {"cancelled": 2}
        flow = taskfleet("cancel", "q", "c", "--flow", env=env)
        assert flow.returncode == 0, flow.stderr
        assert flow.stdout.splitlines() == [
            "1  cancelled (it will not run)",
            "2  cancelled already",
        ]
        retried = taskfleet("retry", "q", "a", "--flow", env=env)
        assert retried.returncode == 0, retried.stderr
        assert retried.stdout.splitlines() == [
            "3 dead or cancelled task(s) of the flow back (pending, or waiting for their "
            "dependencies)"
        ]
        states = [t.state for t in (queue.get(i) for i in "abc") if t is not None]
        assert states == [TaskState.PENDING, TaskState.WAITING, TaskState.WAITING]


def test_flow_flags_refuse_bad_input_with_one_line_and_exit_2(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        _chain(queue)
    cases = [
        (("cancel", "q", "a", "b", "--flow"), "--flow takes exactly one task id, not 2"),
        (("cancel", "q", "a", "--branch", "--group", "g"), "--branch acts on one task's branch"),
        (("cancel", "q", "nope", "--flow"), "task 'nope' not found in queue 'q'"),
        (("retry", "q", "--flow"), "--flow takes exactly one task id, not 0"),
        (("retry", "q", "a", "--branch", "--all"), "not with --all or filters"),
        (("retry", "q", "a", "--flow", "--max-attempts", "3"), "not with --max-attempts"),
        (("retry", "q", "nope", "--branch"), "task 'nope' not found in queue 'q'"),
    ]
    for args, words in cases:
        refused = taskfleet(*args, env=env)
        assert refused.returncode == 2, (args, refused.stderr)
        assert refused.stderr.count("\n") == 1 and words in refused.stderr, refused.stderr
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.stats()["cancelled_total"] == 0


def test_retry_says_when_a_dependency_still_dead_ends_the_task_again(
    redis_url: str, tmp_path: Path, make_broker: MakeBroker
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        _chain(queue)
        broker = make_broker("q")
        [run] = broker.claim(1).tasks
        broker.fail("a", run.token, "boom", retryable=False)
    again = taskfleet("retry", "q", "b", env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "0 dead task(s) back (pending, or waiting for their dependencies)"
    ]
    assert again.stderr.splitlines() == [
        "taskfleet: b ended again at once: dependency a ended dead; retry that one first, "
        "or the whole flow with --flow"
    ]
    shown = taskfleet("retry", "q", "b", "--json", env=env)
    assert json.loads(shown.stdout) == {
        "ended_again": {"b": "dependency a ended dead"},
        "retried": 0,
        "skipped": {},
    }
