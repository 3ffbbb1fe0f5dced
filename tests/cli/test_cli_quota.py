"""``taskfleet quota show|pause|resume|budget``: the claim pause and the budget from the
command line; bad values refused with one line, exit 2, nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

from taskfleet.producer.queue import Queue

from tests.workers.harness import env_for, taskfleet


def test_quota_pause_resume_budget_and_show(redis_url: str, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    paused = taskfleet("quota", "pause", "q", "--for", "120", "--reason", "provider 429", env=env)
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("claims paused until ")
    shown = taskfleet("quota", "show", "q", "--json", env=env)
    state = json.loads(shown.stdout)
    assert state["paused"] and state["reason"] == "provider 429"
    assert 100_000 < state["pause_left_ms"] <= 120_000
    assert taskfleet("quota", "resume", "q", env=env).returncode == 0
    budget = taskfleet("quota", "budget", "q", "--day", "500", "--month", "none", env=env)
    assert budget.returncode == 0, budget.stderr
    assert "budget per day" in budget.stdout and "0 of 500 spent" in budget.stdout
    with Queue("q", redis_url=redis_url) as queue:
        quota = queue.quota()
    assert not quota.paused
    assert (quota.day_limit, quota.month_limit, quota.month_override) == (500, 0, True)


def test_bad_budget_values_are_refused_with_one_line(redis_url: str, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    for argv in (("--day", "-5"), ("--month", "lots"), ()):
        result = taskfleet("quota", "budget", "q", *argv, env=env)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.client.exists(queue.keys.quota) == 0


def test_a_pause_of_no_time_is_refused_with_one_line(redis_url: str, tmp_path: Path) -> None:
    """``--for 0`` would pause nothing yet count a pause and say "paused": refused."""
    env = env_for(redis_url, tmp_path)
    for seconds in ("0", "-1", "nan"):
        result = taskfleet("quota", "pause", "q", "--for", seconds, env=env)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "--for" in result.stderr
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.client.exists(queue.keys.quota) == 0
