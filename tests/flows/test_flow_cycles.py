"""Flows that can never hang: dependency cycles refused where they could be made, and
every walk over a flow bounded whatever Redis holds (a cycle written by hand, a deep
chain). Real redis-server, the CLI in its own process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis
from taskfleet import DependencyCycle, FlowTooLarge, Queue, TaskState
from taskfleet.producer import flowcontrol
from taskfleet.protocol.control_ops import CancelOutcome

from tests.fixtures_redis import MakeBroker
from tests.workers.harness import env_for, taskfleet

#: A walk that never ends is cut here: the fixed walk takes well under a second.
WALK_DEADLINE_S = 10.0


def _hand_written_cycle(queue: Queue) -> None:
    """a -> b -> c -> a: c waits for b, b for a, and a, rewritten by hand, for c (each
    with its link back), all three `waiting` with a dependency left."""
    queue.enqueue_many(
        [
            {"payload": {}, "task_id": "a", "max_attempts": 1},
            {"payload": {}, "task_id": "b", "after": ["a"]},
            {"payload": {}, "task_id": "c", "after": ["b"]},
        ]
    )
    client = queue.client
    client.zrem(queue.keys.pending, "a")
    client.hset(
        queue.keys.task("a"),
        mapping={"state": "waiting", "after": json.dumps(["c"]), "deps_left": 1},
    )
    client.hset(queue.keys.task("c"), "by:a", 1)


def test_cancel_and_retry_flow_end_on_a_cycle_written_by_hand(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        _hand_written_cycle(queue)
        for start in "abc":
            outcomes = queue.cancel_flow(start, branch=start == "b")
            assert set(outcomes) <= {"a", "b", "c"}
        states = [t.state for t in (queue.get(i) for i in "abc") if t is not None]
        assert states == [TaskState.CANCELLED] * 3
        tree = taskfleet("task", "q", "a", env=env, timeout=WALK_DEADLINE_S)
        assert tree.returncode == 0, tree.stderr
        assert tree.stdout.count("  c  ") + tree.stdout.count("  b  ") <= 4
        retried = taskfleet("retry", "q", "c", "--flow", env=env, timeout=WALK_DEADLINE_S)
        assert retried.returncode == 0, retried.stderr
        cancelled = taskfleet(
            "cancel", "q", "a", "--flow", "--json", env=env, timeout=WALK_DEADLINE_S
        )
        assert cancelled.returncode == 0, cancelled.stderr
        assert sum(json.loads(cancelled.stdout).values()) == 3


def test_a_walk_past_its_bound_is_refused_with_one_line_and_nothing_changed(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.enqueue({}, task_id="root")
    queue.enqueue_many([{"payload": {}, "task_id": f"t{i}", "after": ["root"]} for i in range(30)])
    monkeypatch.setattr(flowcontrol, "MAX_FLOW_TASKS", 20)
    with pytest.raises(FlowTooLarge, match="has more than 20 tasks: nothing was changed"):
        queue.cancel_flow("root")
    assert queue.stats()["waiting"] == 30
    assert queue.cancel_flow("t0", branch=True) == {"t0": CancelOutcome.CANCELLED}


def test_a_chain_of_5000_tasks_is_shown_cancelled_and_retried_from_the_command_line(
    redis_url: str, tmp_path: Path
) -> None:
    n = 5000
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        queue.enqueue_many(
            [
                {"payload": {}, "task_id": f"t{i}", **({"after": [f"t{i - 1}"]} if i else {})}
                for i in range(n)
            ]
        )
    runs: list[subprocess.CompletedProcess[str]] = [
        taskfleet("task", "q", f"t{n - 1}", env=env),
        taskfleet("cancel", "q", "t0", "--flow", "--json", env=env),
        taskfleet("retry", "q", f"t{n - 1}", "--flow", "--json", env=env),
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "recursion" not in run.stdout + run.stderr
    assert json.loads(runs[1].stdout) == {"cancelled": n}
    assert "(200 tasks at most)" not in runs[0].stdout
    assert "  ..." in runs[0].stdout


def _snapshot(client: redis.Redis) -> dict[bytes, Any]:
    """Every key of the database with its type and content (nothing stored: equal)."""
    out: dict[bytes, Any] = {}
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        if kind == b"hash":
            out[key] = client.hgetall(key)
        elif kind == b"set":
            out[key] = client.smembers(key)
        elif kind == b"zset":
            out[key] = client.zrange(key, 0, -1, withscores=True)
        elif kind == b"string":
            out[key] = client.get(key)
        else:
            out[key] = kind
    return out


@pytest.mark.parametrize(
    ("child", "culprit"),
    [
        ({"payload": {}, "task_id": "c", "after": ["split"]}, "c"),  # waits for its parent
        ({"payload": {}, "task_id": "c", "after": ["merge"]}, "c"),  # for what waits on it
        ({"payload": {}, "task_id": "c", "after": ["publish"]}, "c"),  # ... transitively
        ({"payload": {}, "task_id": "merge", "after": ["split"]}, "merge"),  # waits on it
        ({"payload": {}, "task_id": "split"}, "split"),  # the parent itself
    ],
)
def test_a_child_that_would_close_a_cycle_through_its_parent_is_refused_and_nothing_stored(
    queue: Queue,
    make_broker: MakeBroker,
    redis_client: redis.Redis,
    child: dict[str, Any],
    culprit: str,
) -> None:
    queue.enqueue({}, task_id="split")
    queue.enqueue({}, task_id="merge", after=["split"])
    queue.enqueue({}, task_id="publish", after=["merge"])
    [run] = make_broker("jobs").claim(1).tasks
    before = _snapshot(redis_client)
    items = [{"payload": {"page": 0}, "task_id": "page-0"}, child]
    with pytest.raises(DependencyCycle, match=f"task '{culprit}' would close a dependency cycle"):
        queue.add_children("split", run.token, items)
    assert _snapshot(redis_client) == before
    # the same children without the cycle are taken, and the flow ends
    assert queue.add_children("split", run.token, items[:1]) == ["page-0"]


def test_children_that_wait_for_other_tasks_or_each_other_are_accepted(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue({}, task_id="fetch")
    queue.enqueue({}, task_id="split")
    queue.enqueue({}, task_id="merge", after=["split"])
    broker = make_broker("jobs")
    runs = {t.id: t for t in broker.claim(2).tasks}
    items = [
        {"payload": {}, "task_id": "p0", "after": ["fetch"]},
        {"payload": {}, "task_id": "p1", "after": ["p0"]},
    ]
    assert queue.add_children("split", runs["split"].token, items) == ["p0", "p1"]
    # added again by a run started over: no new wait, no check, nothing changes
    assert queue.add_children("split", runs["split"].token, items) == ["p0", "p1"]
    task = queue.get("split")
    assert task is not None and task.after == ["p0", "p1"]


def test_a_flow_nested_5000_levels_deep_is_refused_with_one_line_not_python_s_words(
    redis_url: str, tmp_path: Path
) -> None:
    n = 5000
    source = tmp_path / "deep.json"
    source.write_text('{"chain": [{"payload": {}}, ' * n + '{"payload": {}}' + "]}" * n)
    run = taskfleet("flow", "q", str(source), env=env_for(redis_url, tmp_path))
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        "taskfleet: error: the flow nests more than 402 levels of arrays and objects deep "
        "(chains and groups at most 100 levels, a payload 200)"
    ]
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.stats()["pending"] == 0


def test_a_child_adding_its_own_parent_whose_run_was_retried_is_refused(
    queue: Queue, make_broker: MakeBroker
) -> None:
    """doc added split; doc's run failed and waits to run again (delayed), still waiting
    for split: split may not add doc as a child."""
    queue.enqueue({}, task_id="doc")
    broker = make_broker("jobs")
    [doc] = broker.claim(1).tasks
    queue.add_children("doc", doc.token, [{"payload": {}, "task_id": "split"}])
    [split] = broker.claim(1).tasks
    assert broker.fail("doc", doc.token, "boom", retry_after_ms=60_000) is TaskState.DELAYED
    with pytest.raises(DependencyCycle, match="task 'doc' would close a dependency cycle"):
        queue.add_children("split", split.token, [{"payload": {}, "task_id": "doc"}])
    task = queue.get("split")
    assert task is not None and task.after == []


def test_tasks_of_one_call_waiting_for_each_other_are_refused_as_a_cycle_nothing_stored(
    queue: Queue, redis_url: str, tmp_path: Path
) -> None:
    with pytest.raises(DependencyCycle, match="task 'a' waits for 'b', a later task of the same"):
        queue.enqueue_many(
            [
                {"payload": {}, "task_id": "a", "after": ["b"]},
                {"payload": {}, "task_id": "b", "after": ["a"]},
            ]
        )
    source = tmp_path / "cycle.json"
    source.write_text(
        json.dumps(
            {
                "chain": [
                    {"payload": {}, "task_id": "x", "after": ["y"]},
                    {"payload": {}, "task_id": "y"},
                ]
            }
        )
    )
    run = taskfleet("flow", "jobs", str(source), env=env_for(redis_url, tmp_path))
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        "taskfleet: error: task 'x' waits for 'y', a later task of the same call: a task "
        "waits only for earlier ones (no cycle can be stored); put it first"
    ]
    assert queue.stats()["pending"] == queue.stats()["waiting"] == 0
