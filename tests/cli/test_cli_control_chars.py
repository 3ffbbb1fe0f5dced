"""Stored text is shown, not obeyed: a handler's error with terminal escape sequences (clear
the screen, set the window title, rewrite a line) is printed escaped by every human
output, and exactly by every JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig

from tests.fixtures_redis import MakeBroker
from tests.workers.harness import env_for, taskfleet

HOSTILE = "\x1b[2J\x1b]0;owned\x07\rboom\u202e\x9b"


@pytest.fixture
def dead_task(queue: Queue, make_broker: MakeBroker) -> str:
    queue.configure(QueueConfig(max_attempts=1))
    task_id = queue.enqueue({"x": 1})
    broker = make_broker("jobs")
    [task] = broker.claim(1).tasks
    broker.fail(task.id, task.token, f"RuntimeError: {HOSTILE}", retryable=False)
    return task_id


@pytest.mark.parametrize(
    "args",
    [["task", "jobs", "{id}"], ["ls", "jobs", "dead"], ["top", "--once"]],
    ids=["task", "ls", "top"],
)
def test_human_output_shows_control_characters_escaped(
    dead_task: str, redis_url: str, tmp_path: Path, args: list[str]
) -> None:
    argv = [a.replace("{id}", dead_task) for a in args]
    result = taskfleet(*argv, "--redis-url", redis_url, env=env_for(redis_url, tmp_path))
    assert result.returncode == 0, result.stderr
    for char in ("\x1b", "\x07", "\r", "\u202e", "\x9b"):
        assert char not in result.stdout, (argv, result.stdout)
    assert "\\x1b[2J" in result.stdout, result.stdout


def test_json_output_keeps_the_stored_text_exactly(
    dead_task: str, redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    shown = taskfleet("task", "jobs", dead_task, "--json", "--redis-url", redis_url, env=env)
    assert json.loads(shown.stdout)["error"] == f"RuntimeError: {HOSTILE}"
    listed = taskfleet("ls", "jobs", "dead", "--json", "--redis-url", redis_url, env=env)
    assert json.loads(listed.stdout)["tasks"][0]["error"] == f"RuntimeError: {HOSTILE}"
