"""Names and numbers read from text: a name is the whole text (a trailing newline is no
part of a valid name), and a number is ASCII digits (``str.isdigit`` and ``int()`` also
take other scripts' digits, ``_`` separators and spaces)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from taskfleet.protocol.cron import parse_cron
from taskfleet.protocol.keys import QueueKeys, validate_queue_name
from taskfleet.protocol.schedules import validate_schedule_name
from taskfleet.protocol.tasknames import valid_task_name
from taskfleet_operator.settings import OperatorSettings, SettingsError

from tests.cli_output import assert_one_line_error
from tests.workers.harness import env_for, taskfleet

ARABIC_ONE = "\u0661"  # isdigit() and int() accept it


@pytest.mark.parametrize("name", ["jobs\n", "jobs\r\n", "\njobs"])
def test_a_queue_name_with_a_newline_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid queue name"):
        validate_queue_name(name)
    with pytest.raises(ValueError, match="invalid queue name"):
        QueueKeys(name)


def test_a_schedule_or_task_name_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(ValueError):
        validate_schedule_name("hourly\n")
    assert not valid_task_name("resize\n")


@pytest.mark.parametrize(
    "cron", [f"{ARABIC_ONE} * * * *", f"*/{ARABIC_ONE} * * * *", "\uff11 * * * *", "1_0 * * * *"]
)
def test_cron_refuses_digits_that_are_not_ascii(cron: str) -> None:
    with pytest.raises(ValueError, match="number"):
        parse_cron(cron)


@pytest.mark.parametrize(
    ("name", "value"),
    [("TASKFLEET_METRICS_PORT", "\u0668\u0660"), ("TASKFLEET_SWEEP_INTERVAL", ARABIC_ONE)],
)
def test_the_operator_refuses_settings_in_digits_that_are_not_ascii(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        OperatorSettings.from_env({name: value})


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue", "q", "--priority", ARABIC_ONE],
        ["enqueue", "q", "--cost", "1_0"],
        ["enqueue", "q", "--delay", ARABIC_ONE],
        ["enqueue", "q", "--max-attempts", " 2"],
        ["enqueue", "jobs\n"],
    ],
)
def test_the_cli_refuses_numbers_not_in_ascii_digits_and_stores_nothing(
    args: list[str], redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    result = taskfleet(*args, "--redis-url", redis_url, env=env_for(redis_url, tmp_path))
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result.stderr)
    assert redis_client.dbsize() == 0


def test_a_worker_refuses_a_concurrency_in_other_digits(redis_url: str, tmp_path: Path) -> None:
    result = taskfleet(
        "worker",
        "--queue",
        "q",
        "--handler",
        "tests.workers.handlers:sleep",
        "--concurrency",
        ARABIC_ONE,
        env=env_for(redis_url, tmp_path),
    )
    assert result.returncode == 2, result.stderr
    assert "not a valid integer" in assert_one_line_error(result.stderr)
