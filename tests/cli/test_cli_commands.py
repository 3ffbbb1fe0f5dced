"""The ``taskfleet`` producer and inspection commands against a real Redis."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig

from tests.polling import wait_for
from tests.workers.harness import (
    REPO,
    WORKER_INTERVAL_S,
    WORKER_TIMEOUT_S,
    Fleet,
    env_for,
    taskfleet,
)


def test_enqueue_prints_one_id_per_task_and_stores_the_options(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    one = taskfleet(
        "enqueue", "q", "--payload", '{"n": 1}', "--priority", "5", "--max-attempts", "7",
        "--id", "task-1", env=env,
    )  # fmt: skip
    assert one.returncode == 0, one.stderr
    assert one.stdout == "task-1\n"
    many = taskfleet("enqueue", "q", "--payload", '{"n": 2}', "--count", "3", env=env)
    ids = many.stdout.split()
    assert many.returncode == 0 and len(set(ids)) == 3
    delayed = taskfleet("enqueue", "q", "--delay", "60", env=env)
    assert delayed.returncode == 0
    with Queue("q", redis_url=redis_url) as queue:
        task = queue.get("task-1")
        assert task is not None
        assert (task.payload, task.priority, task.max_attempts) == ({"n": 1}, 5, 7)
        assert all((t := queue.get(i)) is not None and t.payload == {"n": 2} for i in ids)
        stats = queue.stats()
    assert (stats["pending"], stats["delayed"]) == (4, 1)


def test_a_large_count_is_enqueued_in_chunks_so_no_one_script_call_blocks_redis_long(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        queue.client.config_resetstat()
        result = taskfleet("enqueue", "q", "--count", "2500", env=env)
        assert result.returncode == 0, result.stderr
        assert len(set(result.stdout.split())) == 2500
        assert queue.stats()["pending"] == 2500
        calls = queue.client.info("commandstats")
    scripts = sum(calls.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))
    assert scripts >= 3  # 1000 + 1000 + 500 (a first NOSCRIPT reply may add one)


def test_stats_shows_counts_as_text_and_as_json(redis_url: str, tmp_path: Path) -> None:
    with Queue("q", redis_url=redis_url) as queue:
        queue.enqueue_many([{"payload": {}} for _ in range(2)])
    env = env_for(redis_url, tmp_path)
    as_json = taskfleet("stats", "q", "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["pending"] == 2 and data["enqueued"] == 2
    for key in ("pending", "delayed", "running", "dead", "workers"):
        assert key in data
    text = taskfleet("stats", "q", env=env)
    assert text.returncode == 0
    assert any(line.split() == ["pending", "2"] for line in text.stdout.splitlines())


def test_task_shows_one_task_and_a_missing_one_is_exit_1(redis_url: str, tmp_path: Path) -> None:
    with Queue("q", redis_url=redis_url) as queue:
        queue.enqueue({"k": "v"}, task_id="t1")
    env = env_for(redis_url, tmp_path)
    shown = taskfleet("task", "q", "t1", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert (data["id"], data["state"], data["payload"]) == ("t1", "pending", {"k": "v"})
    text = taskfleet("task", "q", "t1", env=env)
    assert "pending" in text.stdout and '{"k": "v"}' in text.stdout
    missing = taskfleet("task", "q", "nope", env=env)
    assert missing.returncode == 1
    assert missing.stderr == "taskfleet: error: task 'nope' not found in queue 'q'\n"


def test_configure_sets_the_queue_settings_workers_only_read(
    queue: Queue, redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    done = taskfleet("configure", "jobs", "--lease-ttl", "12", "--set", "max_attempts=7", env=env)
    assert done.returncode == 0, done.stderr
    config = queue.config()
    assert (config.lease_ttl_s, config.max_attempts) == (12.0, 7)
    shown = taskfleet("configure", "jobs", "--json", env=env)
    assert json.loads(shown.stdout)["lease_ttl_s"] == 12.0
    back = taskfleet("configure", "jobs", "--set", "max_attempts=", env=env)
    assert back.returncode == 0 and queue.config().max_attempts == 3  # the default again
    for bad in ("nope=1", "lease_ttl_s=-1", "max_attempts"):
        refused = taskfleet("configure", "jobs", "--set", bad, env=env)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("taskfleet: error:")


@pytest.mark.parametrize("given", ["20", "0.5"], ids=["above-the-floor", "below-one-second"])
def test_the_deprecated_lease_ttl_option_sets_nothing_and_a_warning_names_the_queues(
    queue: Queue, redis_url: str, tmp_path: Path, given: str
) -> None:
    """One writer per value: the queue's config (written here as the operator would) sets
    the lease TTL; a worker's --lease-ttl is ignored, with a warning saying so, whatever
    its value (below the queue's floor too: it never refuses a start)."""
    queue.configure(QueueConfig(lease_ttl_s=40))
    log = tmp_path / "worker.log"
    argv = [sys.executable, "-m", "taskfleet", "worker", "--queue", "jobs", "--handler"]
    argv += ["tests.workers.handlers:sleep", "--log-format", "json", "--lease-ttl", given]
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, env=env_for(redis_url, tmp_path), cwd=REPO, stdout=out, stderr=out
        )
    try:

        def events() -> list[str]:
            return [json.loads(line)["event"] for line in log.read_text().splitlines()]

        wait_for(
            lambda: "worker_started" in events(),
            timeout=WORKER_TIMEOUT_S,
            interval=WORKER_INTERVAL_S,
            what=log.read_text,
        )
        (ignored,) = [
            record
            for record in map(json.loads, log.read_text().splitlines())
            if record["event"] == "lease_ttl_option_ignored"
        ]
        assert (ignored["level"], ignored["lease_ttl_s"], ignored["given_s"]) == (
            "warning",
            40,
            float(given),
        )
        assert "deprecated and ignored" in ignored["note"]
        assert queue.config().lease_ttl_s == 40.0
    finally:
        process.kill()
        process.wait()


def test_every_command_loads_on_demand_and_help_lists_them_all(tmp_path: Path) -> None:
    import click
    from taskfleet.cli import COMMANDS, cli

    context = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(context, name)
        assert command is not None and command.name == name, name
    assert cli.get_command(context, "no-such-command") is None
    shown = taskfleet("--help", env=env_for("redis://127.0.0.1:1/0", tmp_path))
    assert shown.returncode == 0, shown.stderr
    listed = shown.stdout.split("Commands:")[1]
    assert [line.split()[0] for line in listed.strip().splitlines()] == sorted(COMMANDS)
    unknown = taskfleet("frobnicate", env=env_for("redis://127.0.0.1:1/0", tmp_path))
    assert unknown.returncode == 2 and "No such command 'frobnicate'" in unknown.stderr


def test_a_worker_loads_neither_the_producer_nor_the_other_commands(
    fleet: Fleet, queue: Queue
) -> None:
    """The worker's start is on every burst's critical path: it imports only what it runs."""
    worker = fleet.add("tests.workers.handlers:loaded_modules", args=[]).start()
    prefixes = ["taskfleet.producer", "taskfleet.dashboard", "taskfleet.cli", "prometheus_client"]
    prefixes += ["pydantic"]
    task_id = queue.enqueue({"prefixes": prefixes})
    done = queue.wait([task_id], timeout=WORKER_TIMEOUT_S)[task_id]
    assert done.state == "done", worker.log_text()
    loaded = done.result
    assert not [m for m in loaded if m.startswith(("taskfleet.producer", "taskfleet.dashboard"))]
    assert not [m for m in loaded if m.startswith("prometheus_client")]  # no --metrics-port
    assert not [m for m in loaded if m.startswith("pydantic")]  # the producer's and operator's
    assert {m for m in loaded if m.startswith("taskfleet.cli.")} <= {
        "taskfleet.cli.logs",
        "taskfleet.cli.options",
        "taskfleet.cli.worker_commands",
    }


def test_show_lists_each_attempt_then_the_latest_traceback(
    redis_url: str, tmp_path: Path, make_broker: Any
) -> None:
    with Queue("q", redis_url=redis_url) as queue:
        queue.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0))
        queue.enqueue({}, task_id="t1", max_attempts=2)
    for pod in ("pod-one", "pod-two"):
        broker = make_broker("q", pod=pod)
        broker.register(1)
        [held] = wait_for(lambda b=broker: b.claim(1).tasks or None, what=f"{pod} claims")
        trace = "Traceback (most recent call last):\n"
        trace += f'  File "job.py", line 7, in run\nKeyError: {pod!r}'
        broker.fail(held.id, held.token, f"KeyError: {pod!r}", traceback=trace)
    text = taskfleet("show", "q", "t1", env=env_for(redis_url, tmp_path)).stdout
    lines = text.splitlines()
    start = lines.index("history:")
    rows = [line.split() for line in lines[start + 1 : start + 3]]
    assert [row[:3] for row in rows] == [["1", "failed", "pod-one"], ["2", "dead", "pod-two"]]
    assert rows[1][-2:] == ["KeyError:", "'pod-two'"]
    assert lines[start + 3] == "traceback of attempt 2:"
    assert lines[start + 5] == '    File "job.py", line 7, in run'
