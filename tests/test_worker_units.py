"""Small pure pieces of the worker: URL masking, handler loading, the runtime file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from taskfleet.cli import mask_url
from taskfleet.handlers import HandlerLoadError, encode_result, format_error, load_handler
from taskfleet.runtime import RuntimeState, pid_alive, read_state, remove_state, write_state
from taskfleet.worker import WorkerSettings

from tests.workers.harness import wait_until


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:p%40ss@h/1?ssl_cert_reqs=none", "rediss://user:***@h/1?ssl_cert_reqs=none"),
    ],
)
def test_passwords_in_redis_urls_are_masked(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_handlers_are_resolved_with_their_kind() -> None:
    assert not load_handler("tests.workers.handlers:sleep").is_async
    assert load_handler("tests.workers.handlers:async_sleep").is_async


def test_a_broken_handler_module_is_one_clear_error() -> None:
    with pytest.raises(HandlerLoadError, match="failed to import: ZeroDivisionError"):
        load_handler("tests.workers.broken_module:f")


def test_errors_and_results_are_encoded_for_the_task_hash() -> None:
    assert format_error(ValueError("a\nb")) == "ValueError: a b"
    assert len(format_error(RuntimeError("x" * 10_000))) == 2000
    assert encode_result({"a": [1, None]}) == '{"a":[1,null]}'
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        encode_result(float("nan"))


def test_runtime_file_round_trips_and_is_only_removed_by_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "worker.json"
    state = RuntimeState(pid=os.getpid(), pod="p", queue="q", inflight=2, draining=True)
    write_state(state, path)
    assert read_state(path) == state
    remove_state(path, pid=os.getpid() + 1)
    assert path.exists()
    remove_state(path, pid=os.getpid())
    assert not path.exists()
    assert read_state(path) is None


def test_a_zombie_counts_as_gone_for_drain() -> None:
    child = subprocess.Popen(["true"])
    try:
        # Not reaped yet: a zombie once it exits; kill(pid, 0) would still succeed.
        wait_until(lambda: not pid_alive(child.pid), message="the exited child to count as gone")
    finally:
        child.wait()
    assert pid_alive(os.getpid())


@pytest.mark.parametrize(("interval", "ttl", "ok"), [(15.0, 30.0, True), (15.5, 30.0, False)])
def test_a_heartbeat_of_exactly_half_the_lease_ttl_is_accepted_like_the_crd_accepts_it(
    interval: float, ttl: float, ok: bool
) -> None:
    settings = WorkerSettings(
        queue="q",
        redis_url="redis://localhost:6379/0",
        pod="p",
        incarnation="i",
        heartbeat_interval=interval,
        lease_ttl=ttl,
    )
    if ok:
        settings.validate()
    else:
        with pytest.raises(ValueError, match="at most half the lease TTL"):
            settings.validate()
