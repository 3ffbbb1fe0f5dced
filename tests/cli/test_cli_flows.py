"""``taskfleet enqueue --after``, ``taskfleet flow`` (a flow as JSON) and the tree
``taskfleet task`` prints, through the CLI's own process."""

from __future__ import annotations

import json
from pathlib import Path

from taskfleet.producer.queue import Queue
from taskfleet.protocol.states import TaskState

from tests.workers.harness import env_for, taskfleet


def test_a_flow_from_json_and_after_from_the_command_line(redis_url: str, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    source = tmp_path / "flow.json"
    pages = [{"payload": {"page": i}, "task_id": f"p{i}"} for i in range(2)]
    merge = {"payload": {}, "task": "merge", "task_id": "merge"}
    source.write_text(json.dumps({"chord": [{"group": pages}, merge]}))
    done = taskfleet("flow", "q", str(source), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["p0", "p1", "merge"]
    late = taskfleet("enqueue", "q", "--after", "merge", "--on-dep-fail", "ignore", env=env)
    assert late.returncode == 0, late.stderr
    shown = taskfleet("task", "q", late.stdout.strip(), env=env)
    assert shown.returncode == 0, shown.stderr
    tree = shown.stdout.split("flow tree:\n", 1)[1]
    assert tree.splitlines() == [
        f"  {late.stdout.strip()}  waiting 1 left",
        "    merge  waiting 2 left",
        "      p0  pending",
        "      p1  pending",
    ]
    with Queue("q", redis_url=redis_url) as queue:
        task = queue.get("merge")
        assert task is not None and task.state is TaskState.WAITING
    # the flow it belongs to: the flow's first task, and the flow's state
    lines = dict(line.split(None, 1) for line in shown.stdout.split("flow tree:")[0].splitlines())
    assert lines["flow"] == "p0"
    assert lines["flow_state"] == "running  open=4 done=0 dead=0 cancelled=0"
    cancelled = taskfleet("cancel", "q", "p0", "p1", late.stdout.strip(), env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    stats = taskfleet("stats", "q", "--json", env=env)
    assert json.loads(stats.stdout)["flows_failed"] == 1  # merge ended dead by its policy


def test_bad_flows_and_unknown_dependencies_exit_2_storing_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    source = tmp_path / "flow.json"
    source.write_text('{"chain": [{"payload": {}}, {"payload": {}, "after": ["nope"]}]}')
    refused = taskfleet("flow", "q", str(source), env=env)
    assert refused.returncode == 2, refused.stderr
    assert "waits for 'nope'" in refused.stderr
    source.write_text('{"chain": {"payload": {}}}')
    assert taskfleet("flow", "q", str(source), env=env).returncode == 2
    source.write_text('{"chain": [{"group": []}]}')
    empty = taskfleet("flow", "q", str(source), env=env)
    assert empty.returncode == 2, empty.stderr
    assert empty.stderr.strip().splitlines() == [
        "taskfleet: error: the flow has no task: give chain / group at least one part"
    ]
    unknown = taskfleet("enqueue", "q", "--after", "nope", env=env)
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.stats()["enqueued"] == 0


def test_ls_lists_the_tasks_waiting_for_their_dependencies(redis_url: str, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    first = taskfleet("enqueue", "q", "--id", "first", env=env)
    assert first.returncode == 0, first.stderr
    later = taskfleet("enqueue", "q", "--after", "first", "--group", "t1", env=env).stdout.strip()
    listed = taskfleet("ls", "q", "waiting", "--group", "t1", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    tasks = json.loads(listed.stdout)["tasks"]
    assert [(t["id"], t["state"], t["after"]) for t in tasks] == [(later, "waiting", ["first"])]
