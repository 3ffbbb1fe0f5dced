"""Small pure pieces of the worker: URL masking, handler loading, the runtime file."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from taskfleet.cli import mask_url
from taskfleet.worker import WorkerSettings
from taskfleet.worker.broker import ClaimedTask
from taskfleet.worker.execution import Execution
from taskfleet.worker.gate import RedisGate
from taskfleet.worker.handlers import HandlerLoadError, encode_result, format_error, load_handler
from taskfleet.worker.lifecycle import Lifecycle
from taskfleet.worker.outbox import Outbox
from taskfleet.worker.runs import Outcome, Run, RunState
from taskfleet.worker.runtime import (
    RuntimeState,
    pid_alive,
    process_start,
    read_state,
    remove_state,
    write_state,
)
from taskfleet.worker.runtime_file import RuntimeFile
from taskfleet.worker.slots import PREFETCH_RUN_LIMIT_S, Slots

from tests.polling import wait_for
from tests.workers.harness import WORKER_INTERVAL_S, WORKER_TIMEOUT_S, env_for, taskfleet


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
    with pytest.raises(TypeError, match=r"^result: NaN is not a finite number"):
        encode_result(float("nan"))

    class UnprintableError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert (
        format_error(UnprintableError())
        == "UnprintableError: (the exception's message could not be read)"
    )


def test_runtime_file_round_trips_and_is_only_removed_by_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "worker.json"
    state = RuntimeState(
        pid=os.getpid(), pod="p", queue="q", inflight=2, draining=True, start="123"
    )
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
        wait_for(
            lambda: not pid_alive(child.pid),
            timeout=WORKER_TIMEOUT_S,
            interval=WORKER_INTERVAL_S,
            what="the exited child to count as gone",
        )
    finally:
        child.wait()
    assert pid_alive(os.getpid())


def test_the_deprecated_lease_ttl_option_no_longer_refuses_a_heartbeat_above_half_of_it() -> None:
    """It sets nothing: the queue's lease TTL, read at start, is what the heartbeat fits."""
    settings = WorkerSettings(
        queue="q",
        redis_url="redis://localhost:6379/0",
        pod="p",
        incarnation="i",
        heartbeat_interval=15.5,
        lease_ttl=30.0,
    )
    settings.validate()


def _sigterm_pending(pid: int) -> bool:
    """SIGTERM is pending (sent, not yet delivered) for ``pid``, per /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("ShdPnd:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    raise AssertionError("no ShdPnd in /proc status")


@pytest.fixture
def sigterm_blocker() -> Iterator[subprocess.Popen[bytes]]:
    """A process that blocks SIGTERM, so a SIGTERM sent to it stays visible as pending.

    Its command line names ``taskfleet`` and ``worker``, as ``taskfleet drain`` checks.
    """
    code = (
        "import signal, sys\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "taskfleet", "worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    with proc:  # closes its pipes
        yield proc
        proc.kill()


@pytest.mark.parametrize("same_process", [True, False])
def test_drain_signals_the_pid_only_while_it_is_still_the_worker_that_wrote_the_file(
    same_process: bool, sigterm_blocker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    pid = sigterm_blocker.pid
    start = process_start(pid)
    assert start is not None
    recorded = start if same_process else str(int(start) - 1)  # else: a reused pid
    write_state(RuntimeState(pid=pid, pod="p", queue="q", start=recorded), tmp_path / "worker.json")
    result = taskfleet("drain", env=env_for("redis://localhost:1/0", tmp_path))
    assert result.returncode == 0, result.stderr
    assert _sigterm_pending(pid) is same_process


def test_worker_settings_repr_never_shows_the_redis_url() -> None:
    settings = WorkerSettings(
        queue="q", redis_url="redis://:s3cret-pw@h:6379/0", pod="p", incarnation="i"
    )
    assert "s3cret-pw" not in repr(settings)
    assert "queue='q'" in repr(settings)


def _execution() -> tuple[Execution, Slots]:
    settings = WorkerSettings(
        queue="q", redis_url="redis://127.0.0.1:1/0", pod="p", incarnation="i"
    )

    async def write(batch: list[Outcome]) -> None:
        raise AssertionError("nothing is written here")

    async def reconnect() -> None:
        raise AssertionError("no outage here")

    gate = RedisGate(reconnect, lambda: None, backoff_base=0.1, backoff_max=0.2)
    lifecycle = Lifecycle()
    outbox = Outbox(write, gate, lifecycle)
    slots = Slots(settings.concurrency, 0)
    handler = load_handler("tests.workers.handlers:async_sleep")
    execution = Execution(settings, handler, slots, outbox, lifecycle, changed=lambda: None)
    return execution, slots


def _hold(execution: Execution, task_id: str) -> Run:
    run = Run(ClaimedTask(task_id, "tok", {}, 1, 3, None, 0, 0, 1), claimed_at=0.0)
    execution.held[task_id] = run
    return run


def test_a_finished_run_is_neither_heartbeaten_nor_counted_as_a_lost_lease() -> None:
    async def scenario() -> None:
        execution, _ = _execution()
        working = _hold(execution, "working")
        done = _hold(execution, "done")
        done.to(RunState.FINISHED)  # its outcome is queued: the write ends its lease
        assert execution.leases() == {"working": "tok"}
        # It may finish between the heartbeat's snapshot and the reply naming it lost.
        execution.abandon({"working", "done"})
        assert execution.counters.lost == 1
        assert (working.state, done.state) == (RunState.LOST, RunState.FINISHED)
        assert list(execution.held) == ["done"]  # left for its outcome write to settle
        execution.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("held", "stuck", "typical", "room", "free"),
    [
        (0, 0, None, 4, 4),  # no run seen yet: no prefetch
        (0, 0, 0.001, 12, 4),  # short runs: the prefetch room comes on top
        (3, 1, 0.001, 8, 0),  # a stuck call keeps its slot
        (6, 0, 0.001, 6, -2),  # prefetched tasks wait for slots
        (2, 0, 0.5, 2, 2),  # long runs: no prefetch
    ],
)
def test_slots_give_the_room_a_claim_may_take(
    held: int, stuck: int, typical: float | None, room: int, free: int
) -> None:
    slots = Slots(4, 8)
    slots.typical_run_s = typical
    assert (slots.room(held, stuck), slots.free(held, stuck)) == (room, free)


def test_prefetch_stops_after_a_long_wait_and_resumes_when_runs_are_short_again() -> None:
    slots = Slots(2, 4)
    for _ in range(3):
        slots.record_run(0.001)
    assert slots.prefetch_room() == 4
    slots.prefetch_waited_too_long()
    assert slots.prefetch_room() == 0
    while slots.prefetch_room() == 0:  # a moving average: short runs bring it back down
        slots.record_run(0.001)
    assert slots.typical_run_s is not None and slots.typical_run_s < PREFETCH_RUN_LIMIT_S


def test_completions_refill_only_the_slots_they_free_and_say_which_are_prefetch() -> None:
    slots = Slots(4, 4)
    slots.typical_run_s = 0.001
    # 4 held in 4 slots, 2 complete: their 2 slots are refilled, nothing more
    assert slots.refill(2, held=4, kept=0) == (2, 0)
    # 8 held (4 prefetched), 3 complete: 3 claimed, all of them to wait for a slot
    assert slots.refill(3, held=8, kept=0) == (3, 3)
    slots.typical_run_s = 1.0  # long runs: no prefetch, only free slots
    assert slots.refill(3, held=8, kept=0) == (0, 0)
    assert slots.refill(2, held=4, kept=1) == (1, 0)


def test_the_runtime_file_is_throttled_except_for_what_drain_waits_on(tmp_path: Path) -> None:
    path = tmp_path / "worker.json"
    status: list[tuple[str, bool, int]] = [("running", False, 0)]

    def on_disk() -> tuple[str, bool, int]:
        state = read_state(path)
        assert state is not None
        return state.state, state.draining, state.inflight

    async def scenario() -> None:
        file = RuntimeFile(path, lambda: status[0], pid=os.getpid(), start=None, pod="p", queue="q")

        def change(now: tuple[str, bool, int]) -> None:
            status[0] = now
            file.changed()

        change(("running", False, 0))
        await asyncio.sleep(0)
        assert on_disk() == ("running", False, 0)
        change(("running", False, 1))  # only the count changed: held back...
        await asyncio.sleep(0)
        assert on_disk() == ("running", False, 0)
        deadline = time.monotonic() + 5.0
        while on_disk() != ("running", False, 1):  # ...but not lost
            assert time.monotonic() < deadline, "the held-back write never came"
            await asyncio.sleep(0.01)
        change(("running", False, 3))
        change(("draining", True, 3))  # draining: at once, with the latest count
        await asyncio.sleep(0)
        assert on_disk() == ("draining", True, 3)
        change(("draining", True, 2))  # fewer in flight, but not none: held back
        await asyncio.sleep(0)
        assert on_disk() == ("draining", True, 3)
        change(("draining", True, 0))  # nothing left in flight while draining: at once
        await asyncio.sleep(0)
        assert on_disk() == ("draining", True, 0)

    asyncio.run(scenario())
