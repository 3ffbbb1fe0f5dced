"""Bad input to the ``taskfleet`` command: one clear line on stderr, non-zero exit, no harm."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig

from tests.cli_output import assert_one_line_error
from tests.polling import wait_for
from tests.workers.harness import REPO, WORKER_INTERVAL_S, env_for, taskfleet

H = "tests.workers.handlers"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["enqueue", "q", "--payload", "{not json"], "not valid JSON"),
        (["enqueue", "q", "--payload", "[1, 2]"], "must be a JSON object"),
        (["enqueue", "q", "--payload", '{"a": NaN}'], "--payload is not valid JSON: NaN"),
        (["enqueue", "q", "--payload", '{"a": -Infinity}'], "--payload is not valid JSON"),
        (["enqueue", "q", "--priority", "high"], "'high' is not a valid integer"),
        (["enqueue", "q", "--id", "x", "--count", "2"], "can't be combined"),
        (["enqueue", "q", "--count", "0"], "--count"),
        (["enqueue", "q", "--count", "1000001"], "1<=x<=1000000"),
        (["worker", "--queue", "q", "--handler", "no_such_module_xyz:f"], "not found"),
        (["worker", "--queue", "q", "--handler", f"{H}:no_such_function"], "no attribute"),
        (["worker", "--queue", "q", "--handler", f"{H}:NOT_CALLABLE"], "not callable"),
        (["worker", "--queue", "q", "--handler", "tests.workers.handlers"], "must look like"),
        (
            ["worker", "--queue", "q", "--handler", f"{H}:sleep", "--concurrency", "-1"],
            "concurrency must be within 1..10000, got -1",
        ),
        (
            ["worker", "--queue", "q", "--handler", f"{H}:sleep", "--concurrency", "200000"],
            "concurrency must be within 1..10000, got 200000",
        ),
        (
            ["worker", "--queue", "q", "--handler", f"{H}:sleep", "--prefetch", "-1"],
            "prefetch must be within 0..10000, got -1",
        ),
        (["worker", "--queue", "q"], "Missing option '--handler'"),
        (
            ["worker", "--queue", "q", "--handler", f"{H}:sleep", "--heartbeat-interval", "0.003"],
            "heartbeat interval must be at least 0.1 seconds, got 0.003",
        ),
        (["configure", "q", "--lease-ttl", "0.01"], "lease_ttl_s"),
        (
            ["configure", "q", "--set", "group_max_concurrency=-1"],
            "invalid queue config: group_max_concurrency: Input should be greater than or equal",
        ),
        (
            ["configure", "q", "--set", "throttle_max_s=0.5"],
            "invalid queue config: throttle_max_s must be >= throttle_base_s",
        ),
        (["worker", "--queue", "q", "--handler", f"{H}:sleep", "--lease-ttl", "nan"], "finite"),
        (["worker", "--queue", "q", "--handler", f"{H}:sleep", "--lease-ttl", "inf"], "finite"),
        (
            ["worker", "--queue", "q", "--handler", f"{H}:sleep", "--heartbeat-interval", "nan"],
            "finite",
        ),
        (["worker", "--queue", "q", "--handler", f"{H}:sleep", "--drain-timeout", "nan"], "finite"),
        (["worker", "--queue", "q", "--handler", f"{H}:sleep", "--timeout", "inf"], "finite"),
        (["enqueue", "q", "--delay", "nan"], "'nan' is not a finite number"),
        (["enqueue", "q", "--timeout", "inf"], "'inf' is not a finite number"),
        (["drain", "--wait", "--timeout", "nan"], "finite"),
        (["worker", "--queue", "bad queue!", "--handler", f"{H}:sleep"], "queue"),
        (["stats", "bad queue!"], "invalid queue name"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_enqueues_nothing(
    args: list[str], expected: str, redis_url: str, tmp_path: Path
) -> None:
    result = taskfleet(*args, env=env_for(redis_url, tmp_path))
    assert result.returncode == 2, result.stderr
    line = assert_one_line_error(result.stderr)
    assert expected in line
    assert result.stdout == ""
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.stats()["pending"] == 0


@pytest.mark.parametrize(
    "url", ["foo://", "redis://:s3cret-pw@localhost:notaport/0", "redis://:s3cret-pw@h:99999/0"]
)
@pytest.mark.parametrize("command", ["worker", "enqueue", "stats"])
def test_a_malformed_redis_url_is_bad_input_before_the_worker_starts(
    url: str, command: str, redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    env["TASKFLEET_REDIS_URL"] = url
    args = {
        "worker": ["worker", "--queue", "q", "--handler", f"{H}:sleep"],
        "enqueue": ["enqueue", "q"],
        "stats": ["stats", "q"],
    }[command]
    result = taskfleet(*args, env=env)
    assert result.returncode == 2, result.stderr
    line = assert_one_line_error(result.stderr)
    assert "--redis-url" in line and "not a Redis URL" in line
    assert "s3cret-pw" not in result.stderr + result.stdout
    assert "worker_failed" not in result.stderr


def test_oversize_payload_is_refused_with_the_queue_limit_in_the_message(
    redis_url: str, tmp_path: Path
) -> None:
    with Queue("q", redis_url=redis_url) as queue:
        queue.configure(QueueConfig(max_payload_bytes=1000))
    payload = '{"blob": "' + "x" * 2000 + '"}'
    result = taskfleet("enqueue", "q", "--payload", payload, env=env_for(redis_url, tmp_path))
    assert result.returncode == 2
    assert "1000" in assert_one_line_error(result.stderr)
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.stats()["pending"] == 0


def test_unreachable_redis_is_one_line_and_never_shows_the_password(
    redis_url: str, tmp_path: Path
) -> None:
    secret_url = "redis://user:s3cr3t-pw@127.0.0.1:1/0"
    env = env_for(secret_url, tmp_path)
    for args in (["stats", "q"], ["enqueue", "q"], ["task", "q", "x"]):
        result = taskfleet(*args, env=env)
        assert result.returncode == 1, result.stderr
        line = assert_one_line_error(result.stderr)
        assert "s3cr3t-pw" not in result.stderr + result.stdout
        assert "user:***@127.0.0.1:1" in line


def test_worker_with_unreachable_redis_keeps_the_password_out_of_its_log(
    tmp_path: Path,
) -> None:
    secret_url = "redis://:hunter2-secret@127.0.0.1:1/0"
    env = env_for(secret_url, tmp_path)
    args = ["worker", "--queue", "q", "--handler", f"{H}:sleep", "--drain-timeout", "0"]
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "taskfleet", *args], env=env, cwd=REPO, stdout=out, stderr=out
        )
    try:
        wait_for(
            lambda: "redis_unreachable" in log.read_text(),
            timeout=10,
            interval=WORKER_INTERVAL_S,
            what="an outage log line",
        )
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
    text = log.read_text()
    assert "hunter2-secret" not in text
    assert text.count("redis_unreachable") == 1, text


def test_a_nan_lease_ttl_is_refused_before_it_reaches_the_queues_shared_config(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    env["TASKFLEET_LEASE_TTL"] = "nan"
    result = taskfleet("worker", "--queue", "q", "--handler", f"{H}:sleep", env=env)
    assert result.returncode == 2, result.stderr
    assert "finite" in assert_one_line_error(result.stderr)
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.client.hget(queue.keys.config, "lease_ttl_s") is None


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--timeout", "3e11"),
        ("--lease-ttl", "1e12"),
        ("--drain-timeout", "1e10"),
        ("--heartbeat-interval", "1e12"),
        ("--held-grace", "1e12"),
    ],
)
def test_worker_times_past_what_every_reader_can_hold_are_refused_with_one_line(
    flag: str, value: str, tmp_path: Path
) -> None:
    result = taskfleet(
        "worker",
        "--queue",
        "q",
        "--handler",
        "tests.workers.handlers:sleep",
        flag,
        value,
        env=env_for("redis://127.0.0.1:1/0", tmp_path),
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("taskfleet: error:"), result.stderr
    assert "at most" in lines[0]
