"""``taskfleet ls / cancel / retry / purge / workers`` against a real Redis: text and
--json output, and one clear error with its exit code for a wrong queue or id."""

from __future__ import annotations

import json
from pathlib import Path

from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import run
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import WORKER_LEVEL
from taskfleet.protocol.states import TaskState

from tests.fixtures_redis import MakeBroker
from tests.workers.harness import env_for, taskfleet


def _dead(queue: Queue, make_broker: MakeBroker, n: int, reason: str = "") -> list[str]:
    ids = [queue.enqueue({"n": i}) for i in range(n)]
    broker = make_broker(queue.name)
    for task in broker.claim(n).tasks:
        broker.fail(task.id, task.token, "ValueError: bad", retryable=False, reason=reason)
    return ids


def test_ls_lists_a_state_with_filters_and_pages(
    redis_url: str, tmp_path: Path, make_broker: MakeBroker
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        failed = _dead(queue, make_broker, 2)
        permanent = _dead(queue, make_broker, 1, reason="permanent")
        pending = queue.enqueue({"n": 9})
        # newest first; tasks that died in the same millisecond by id, highest first
        finished = {i: queue.get(i).finished_at for i in [*failed, *permanent]}  # type: ignore[union-attr]
    newest_first = sorted(finished, key=lambda i: (finished[i], i), reverse=True)
    text = taskfleet("ls", "q", "dead", env=env)
    assert text.returncode == 0, text.stderr
    assert [line.split()[0] for line in text.stdout.splitlines()] == newest_first
    assert "reason=permanent" in text.stdout
    only = taskfleet("ls", "q", "dead", "--reason", "permanent", "--json", env=env)
    data = json.loads(only.stdout)
    assert [t["id"] for t in data["tasks"]] == permanent and data["cursor"] is None
    paged = taskfleet("ls", "q", "dead", "--limit", "2", "--json", env=env)
    assert json.loads(paged.stdout)["cursor"] == "2"
    rest = taskfleet("ls", "q", "dead", "--limit", "2", "--cursor", "2", "--json", env=env)
    assert [t["id"] for t in json.loads(rest.stdout)["tasks"]] == newest_first[2:]
    assert taskfleet("ls", "q", "pending", env=env).stdout.split()[0] == pending


def test_cancel_says_what_it_did_to_each_task_and_fails_for_an_unknown_id(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        task_id = queue.enqueue({})
        ok = taskfleet("cancel", "q", task_id, "--json", env=env)
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout) == {task_id: "cancelled"}
        again = taskfleet("cancel", "q", task_id, env=env)
        assert again.returncode == 0 and "cancelled already" in again.stdout
        missing = taskfleet("cancel", "q", "nope", env=env)
        assert missing.returncode == 1
        assert missing.stderr == "taskfleet: error: task 'nope' not found in queue 'q'\n"
        task = queue.get(task_id)
        assert task is not None and task.state is TaskState.CANCELLED


def test_promote_runs_a_delayed_task_now_and_fails_for_one_not_delayed(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        later = queue.enqueue({}, delay=3600)
        ok = taskfleet("promote", "q", later, "--json", env=env)
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout) == {later: True}
        task = queue.get(later)
        assert task is not None and task.state is TaskState.PENDING
        again = taskfleet("promote", "q", later, env=env)
        assert again.returncode == 1
        assert again.stdout == f"{later}  not delayed: unchanged\n"
        assert again.stderr == f"taskfleet: error: task {later!r} of queue 'q' is not delayed\n"
        bare = taskfleet("promote", "q", env=env)
        assert bare.returncode == 2
        assert "name the delayed tasks to promote" in bare.stderr


def test_retry_replays_dead_tasks_by_id_filter_or_all(
    redis_url: str, tmp_path: Path, make_broker: MakeBroker
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        failed = _dead(queue, make_broker, 3)
        permanent = _dead(queue, make_broker, 1, reason="permanent")
        one = taskfleet("retry", "q", failed[0], "--max-attempts", "9", env=env)
        assert one.returncode == 0, one.stderr
        assert one.stdout == "1 dead task(s) back (pending, or waiting for their dependencies)\n"
        task = queue.get(failed[0])
        assert task is not None and (task.state, task.max_attempts) == (TaskState.PENDING, 9)
        by_reason = taskfleet("retry", "q", "--reason", "permanent", "--json", env=env)
        assert json.loads(by_reason.stdout) == {"retried": 1, "skipped": {}, "ended_again": {}}
        assert taskfleet("retry", "q", "--all", env=env).stdout.startswith("2 dead")
        assert queue.stats()["dead"] == 0 and permanent
        nothing = taskfleet("retry", "q", env=env)
        assert nothing.returncode == 2 and "task ids, --all, or a filter" in nothing.stderr
        unknown = taskfleet("retry", "q", "nope", env=env)
        assert unknown.returncode == 1 and "'nope' not found" in unknown.stderr


def test_purge_deletes_finished_tasks_of_one_state_only(
    redis_url: str, tmp_path: Path, make_broker: MakeBroker
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        dead = _dead(queue, make_broker, 2)
        pending = queue.enqueue({})
        result = taskfleet("purge", "q", "--dead", "--json", env=env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"state": "dead", "deleted": 2}
        assert all(queue.get(i) is None for i in dead) and queue.get(pending) is not None
        bare = taskfleet("purge", "q", env=env)
        assert bare.returncode == 2 and "--done, --dead or --cancelled" in bare.stderr


def test_workers_shows_who_holds_what(
    redis_url: str, tmp_path: Path, make_broker: MakeBroker
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        task_id = queue.enqueue({})
        broker = make_broker("q", "pod-a", "inc-1")
        broker.register(4)
        broker.claim(1)
        broker.heartbeat({}, inflight=1, draining=True)
    result = taskfleet("workers", "q", "--json", env=env)
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert (row["pod"], row["holds"], row["draining"], row["concurrency"]) == (
        "pod-a",
        [task_id],
        True,
        4,
    )
    assert row["heartbeat_age_s"] >= 0
    text = taskfleet("workers", "q", env=env)
    assert text.stdout.startswith("pod-a  draining  beat") and "holds 1/4" in text.stdout


def test_workers_shows_each_workers_level_and_flags_a_live_0_1_worker(
    redis_url: str, tmp_path: Path, make_broker: MakeBroker
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        make_broker("q", "pod-new", "inc-1").register(2)
        now_ms = run(queue.client, queue.reads.clock())
        # A 0.1.x worker's record, as it writes it: no "level".
        written_by_0_1 = {"incarnation": "inc-0", "heartbeat_ms": now_ms, "inflight": 0,
                          "concurrency": 1, "draining": False}  # fmt: skip
        queue.client.hset(QueueKeys("q").workers, "pod-old", json.dumps(written_by_0_1))
    result = taskfleet("workers", "q", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert {row["pod"]: row["level"] for row in json.loads(result.stdout)} == {
        "pod-new": WORKER_LEVEL,
        "pod-old": 1,
    }
    lines = taskfleet("workers", "q", env=env).stdout.splitlines()
    assert f"level {WORKER_LEVEL}  holds" in lines[0] and "(0.1.x)" not in lines[0]
    assert lines[1].startswith("pod-old  alive") and "level 1 (0.1.x)  holds" in lines[1]
    assert lines[2] == (
        "worker pod-old runs taskfleet 0.1.x (level 1): flows, groups, claim pauses and "
        "spend budgets are not served by it; upgrade it (docs/upgrade.md)"
    )


def test_a_wrong_queue_is_one_error_line_with_its_exit_code(redis_url: str, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    for args in (["ls", "nosuch", "dead"], ["cancel", "nosuch", "x"], ["workers", "nosuch"],
                 ["retry", "nosuch", "--all"], ["purge", "nosuch", "--done"]):  # fmt: skip
        result = taskfleet(*args, env=env)
        assert result.returncode == 1, args
        assert result.stderr.startswith("taskfleet: error: queue 'nosuch' not found at ")
        assert len(result.stderr.splitlines()) == 1
    bad = taskfleet("ls", "no{such}", "dead", env=env)
    assert bad.returncode == 2 and "invalid queue name" in bad.stderr
    state = taskfleet("ls", "q", "asleep", env=env)
    assert state.returncode == 2


def test_list_and_show_are_other_names_of_ls_and_task(redis_url: str, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        ids = [queue.enqueue({"n": i}) for i in range(3)]
    for alias, name, args in (
        ("list", "ls", ["q", "pending", "--json"]),
        ("show", "task", ["q", ids[1], "--json"]),
    ):
        by_alias, by_name = taskfleet(alias, *args, env=env), taskfleet(name, *args, env=env)
        assert by_alias.returncode == 0, by_alias.stderr
        assert json.loads(by_alias.stdout) == json.loads(by_name.stdout)
    listed = json.loads(taskfleet("list", "q", "pending", "--json", env=env).stdout)
    assert [t["id"] for t in listed["tasks"]] == ids
    helped = taskfleet("--help", env=env).stdout
    assert "  ls " in helped and "  list " not in helped  # each command once in the help
