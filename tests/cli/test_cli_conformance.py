"""The CLI's conformance cases (conformance/cli/*.json) run by ``taskfleet``.

The same files run unchanged by ``taskfleet-node`` (clients/node/test/cli-conformance.test.ts):
one case per test, on a flushed real Redis. The format is in conformance/cli/README.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis
from taskfleet.cli import main
from taskfleet.producer.providerquota import Quota
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig

from tests.fixtures_redis import MakeBroker

CASES_DIR = Path(__file__).resolve().parents[2] / "conformance" / "cli"
PROG = "taskfleet"
QUEUE = "q"


def _cases() -> list[Any]:
    out = []
    for path in sorted(CASES_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        assert data["format"] == 1, f"{path.name}: a format this runner does not know"
        for case in data["cases"]:
            out.append(pytest.param(case, id=f"{path.stem}: {case['name']}"))
    return out


def _given(
    steps: list[dict[str, Any]], queue: Queue, make_broker: MakeBroker, redis_url: str
) -> None:
    broker = None
    for step in steps:
        if "enqueue" in step:
            spec = dict(step["enqueue"])
            task_id = spec.pop("id")
            queue.enqueue(spec.pop("payload", {}), task_id=task_id, **spec)
        elif "fail" in step:
            broker = broker or make_broker(queue.name)
            ids = step["fail"]
            claimed = broker.claim(len(ids)).tasks
            assert sorted(t.id for t in claimed) == sorted(ids), (
                "fail: the tasks named are next in line"
            )
            for t in claimed:
                error = step.get("error", "ValueError: bad")
                broker.fail(t.id, t.token, error, retryable=False, reason=step.get("reason", ""))
        elif "configure" in step:
            queue.configure(QueueConfig(**step["configure"]))
        elif "provider_quota" in step:
            spec = step["provider_quota"]
            with Quota(spec["name"], redis_url=redis_url) as quota:
                quota.configure(
                    spec["limits"], spec["period_s"], max_concurrency=spec.get("max_concurrency")
                )
                if "pause_s" in spec:
                    quota.pause(spec["pause_s"], spec.get("reason", ""))
        else:
            raise AssertionError(f"unknown given step {step}")


def _snapshot(client: redis.Redis) -> dict[Any, Any]:
    """Every key with its content: equal before and after means nothing was stored."""
    return {key: client.dump(key) for key in sorted(client.keys("*"))}


def subset(expected: Any, actual: Any, where: str = "$") -> None:
    """``expected`` is found in ``actual``: objects by the keys given, arrays element by
    element (same length), numbers by value (60 == 60.0), the rest equal."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected an object, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{where}: no {key!r} in {actual!r}"
            subset(value, actual[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: {actual!r}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            subset(e, a, f"{where}[{i}]")
    else:
        assert expected == actual, f"{where}: expected {expected!r}, got {actual!r}"


@pytest.mark.parametrize("case", _cases())
def test_the_python_cli_passes_the_cli_conformance_case(
    case: dict[str, Any],
    redis_url: str,
    make_broker: MakeBroker,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # in this process (its start costs a second a case): main() is the console script
    monkeypatch.setenv("TASKFLEET_REDIS_URL", redis_url)
    client = redis.Redis.from_url(redis_url)
    with Queue(QUEUE, redis_url=redis_url) as queue:
        _given(case.get("given", []), queue, make_broker, redis_url)
        before = _snapshot(client)
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main(list(case["argv"]))
        stdout, stderr = capsys.readouterr()
        what = f"{case['argv']}: {stdout}{stderr}"
        assert exited.value.code == case["exit"], what
        lines = stdout.splitlines()
        errors = stderr.splitlines()
        if "error" in case:
            assert len(errors) == 1, what
            assert errors[0].startswith(f"{PROG}: error: "), what
            assert case["error"] in errors[0], what
        else:
            expected = [line.replace("{prog}", PROG) for line in case.get("stderr", [])]
            assert errors == expected, what
        if "stdout" in case:
            assert lines == case["stdout"], what
        for line in case.get("stdout_has", []):
            assert line in lines, what
        if "stdout_match" in case:
            assert len(lines) == len(case["stdout_match"]), what
            for pattern, line in zip(case["stdout_match"], lines, strict=True):
                assert re.fullmatch(pattern, line), f"{line!r} !~ {pattern!r}"
        if "stdout_json" in case:
            subset(case["stdout_json"], json.loads(stdout))
        then = case.get("then", {})
        if then.get("unchanged"):
            assert _snapshot(client) == before, "bad input stored something"
        if "stats" in then:
            subset(then["stats"], queue.stats())
        if "config" in then:
            subset(then["config"], queue.config().model_dump())
        for task_id, fields in then.get("tasks", {}).items():
            found = queue.get(task_id)
            assert found is not None, task_id
            subset(fields, found.model_dump(mode="json"), task_id)
        for name, fields in then.get("provider_quota", {}).items():
            with Quota(name, redis_url=redis_url) as quota:
                use = quota.get()
            assert use is not None, name
            subset(fields, use.as_dict(), name)
    client.close()
