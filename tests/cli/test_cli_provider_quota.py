"""``taskfleet provider-quota configure|show|pause|resume``: a provider quota from the
command line, beside the per-queue ``taskfleet quota``; bad values refused with one
line, exit 2, nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from taskfleet import Quota

from tests.workers.harness import env_for, taskfleet


def test_a_provider_quota_is_configured_paused_shown_and_resumed(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    made = taskfleet(
        "provider-quota", "configure", "openai", "--limit", "requests=500",
        "--limit", "input_tokens=200000", "--period", "60", "--max-concurrency", "8", env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "input_tokens: 0 of 200000" in made.stdout
    paused = taskfleet(
        "provider-quota", "pause", "openai", "--for", "120", "--reason", "429", env=env
    )
    assert paused.returncode == 0 and "claims paused until" in paused.stdout, paused.stderr
    shown = json.loads(taskfleet("provider-quota", "show", "openai", "--json", env=env).stdout)
    assert shown["reason"] == "429" and shown["max_concurrency"] == 8
    assert shown["units"]["requests"] == {"limit": 500, "used": 0}
    assert taskfleet("provider-quota", "resume", "openai", env=env).returncode == 0
    with Quota("openai", redis_url=redis_url) as quota:
        use = quota.get()
    assert use is not None and use.paused_until_ms == 0 and use.period_ms == 60_000


@pytest.mark.parametrize(
    "argv",
    [
        ("configure", "openai"),
        ("configure", "openai", "--limit", "requests=x"),
        ("configure", "openai", "--limit", "Requests=1"),
        ("configure", "open ai", "--limit", "requests=1"),
        ("configure", "openai", "--limit", "requests=0"),
        ("configure", "openai", "--limit", "requests=1", "--period", "0"),
        ("pause", "openai", "--for", "10"),
        ("show", "openai"),
    ],
)
def test_bad_provider_quota_input_is_refused_with_one_line_and_nothing_stored(
    redis_url: str, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    result = taskfleet("provider-quota", *argv, env=env_for(redis_url, tmp_path))
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    with Quota("openai", redis_url=redis_url) as quota:
        assert quota.get() is None
