"""The worker's two state machines: its phases (``Lifecycle``) and a held task's states
(``RunState``): each table as declared, every other move refused, the documented tables
the same, and the moves the execution makes on the way (timeout, lost lease, drain)."""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from taskfleet.worker import WorkerSettings
from taskfleet.worker.claimed import ClaimedTask
from taskfleet.worker.execution import Execution
from taskfleet.worker.gate import RedisGate
from taskfleet.worker.handlers import Handler
from taskfleet.worker.lifecycle import PHASES, Lifecycle, Phase
from taskfleet.worker.machine import IllegalTransition, Transitions
from taskfleet.worker.named import HandlerSet
from taskfleet.worker.outbox import Outbox
from taskfleet.worker.runs import RUN_STATES, Outcome, Run, RunState
from taskfleet.worker.slots import Slots

REPO = Path(__file__).resolve().parents[2]
#: How long a test waits for the loop or a thread to get somewhere (never reached).
DEADLINE_S = 5.0

P = Phase
EXPECTED_PHASES = {
    P.STARTING: {P.RUNNING, P.DRAINING, P.STOPPED},
    P.RUNNING: {P.DRAINING, P.STOPPED},
    P.DRAINING: {P.CLOSING, P.STOPPED},
    P.CLOSING: {P.DRAINED, P.STOPPED},
    P.DRAINED: {P.STOPPED},
    P.STOPPED: set(),
}
R = RunState
EXPECTED_RUN_STATES = {
    R.RUNNING: {R.FINISHED, R.OVERRUN, R.LOST, R.ABANDONED},
    R.FINISHED: set(),
    R.OVERRUN: {R.FINISHED},
    R.LOST: {R.GONE},
    R.ABANDONED: {R.LOST, R.GONE},
    R.GONE: set(),
}


# ---------------------------------------------------------------- the tables


@pytest.mark.parametrize(("old", "new"), list(itertools.product(Phase, Phase)), ids=str)
def test_the_phase_table_allows_exactly_the_declared_moves(old: Phase, new: Phase) -> None:
    allowed = new in EXPECTED_PHASES[old]
    assert PHASES.allows(old, new) is allowed
    if allowed:
        PHASES.check(old, new)
    else:
        with pytest.raises(IllegalTransition, match=f"worker phase: {old.name} -> {new.name}"):
            PHASES.check(old, new)


@pytest.mark.parametrize(("old", "new"), list(itertools.product(RunState, RunState)), ids=str)
def test_a_run_moves_only_as_the_run_state_table_says(old: RunState, new: RunState) -> None:
    run = Run(_task("t"), claimed_at=0.0, state=old)
    if new in EXPECTED_RUN_STATES[old]:
        run.to(new)
        assert run.state is new
    else:
        with pytest.raises(IllegalTransition, match=f"run state: {old.name} -> {new.name}"):
            run.to(new)
        assert run.state is old  # a refused move changes nothing
    assert RUN_STATES.allows(old, new) is (new in EXPECTED_RUN_STATES[old])


def test_a_table_without_a_row_for_every_state_is_refused_when_declared() -> None:
    with pytest.raises(ValueError, match="no row for GONE"):
        Transitions("partial", {state: set() for state in RunState if state is not R.GONE})


def _documented(heading: str) -> dict[str, set[str]]:
    """The table under ``heading`` in DESIGN.md: first column -> states in the last."""
    text = (REPO / "DESIGN.md").read_text().split(heading, 1)[1]
    rows: dict[str, set[str]] = {}
    for line in text.split("\n\n|", 1)[1].split("\n\n", 1)[0].splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = set(re.findall(r"`([A-Z]+)`", cells[-1]))
    return rows


@pytest.mark.parametrize(
    ("heading", "table"),
    [
        ("### The worker's phases", PHASES),
        ("### A held task's states", RUN_STATES),
    ],
    ids=["phases", "run states"],
)
def test_the_design_documents_the_tables_the_code_declares(
    heading: str, table: Transitions[Any]
) -> None:
    declared = {old.name: {new.name for new in targets} for old, targets in table.rows()}
    assert _documented(heading) == declared


# ---------------------------------------------------------------- the lifecycle


def test_a_drain_sets_its_flag_wakes_the_claim_loop_and_the_heartbeat_and_begins_once() -> None:
    moves: list[Phase] = []
    lifecycle = Lifecycle(lambda: moves.append(lifecycle.phase))
    lifecycle.started()
    assert lifecycle.request_drain()
    assert lifecycle.draining and lifecycle.drain_requested.is_set()
    assert lifecycle.slot_freed.is_set() and lifecycle.beat_now.is_set()
    assert not lifecycle.closing.is_set() and not lifecycle.forced
    assert not lifecycle.request_drain()  # the second signal is the worker's to judge
    lifecycle.close()
    lifecycle.drained()
    lifecycle.stopped()
    assert moves == [P.RUNNING, P.DRAINING, P.CLOSING, P.DRAINED, P.STOPPED]
    assert lifecycle.closing.is_set() and lifecycle.drain_requested.is_set()


def test_a_stop_before_any_drain_drains_too_and_closing_never_comes_before_draining() -> None:
    lifecycle = Lifecycle()
    lifecycle.started()
    with pytest.raises(IllegalTransition, match="RUNNING -> CLOSING"):
        lifecycle.close()
    assert not lifecycle.closing.is_set()
    lifecycle.request_stop()
    assert (lifecycle.phase, lifecycle.draining, lifecycle.forced) == (P.DRAINING, True, True)
    lifecycle.close()
    assert lifecycle.phase is P.CLOSING


def test_a_drain_requested_while_starting_skips_running_and_starting_twice_is_a_bug() -> None:
    lifecycle = Lifecycle()
    lifecycle.request_drain()
    assert lifecycle.phase is P.DRAINING
    with pytest.raises(IllegalTransition, match="DRAINING -> RUNNING"):
        lifecycle.started()


def test_a_signal_after_the_worker_stopped_changes_nothing() -> None:
    lifecycle = Lifecycle()
    lifecycle.stopped()  # refused at start, say
    assert not lifecycle.request_drain()
    lifecycle.request_stop()
    assert (lifecycle.phase, lifecycle.draining) == (P.STOPPED, False)


def test_the_loops_can_wait_for_a_phase_but_not_set_it() -> None:
    async def scenario() -> None:
        lifecycle = Lifecycle()
        with pytest.raises(TypeError, match="set by its Lifecycle alone"):
            lifecycle.closing.set()
        with pytest.raises(TypeError, match="never cleared"):
            lifecycle.drain_requested.clear()
        waiter = asyncio.ensure_future(lifecycle.drain_requested.wait())
        await asyncio.sleep(0)
        assert not waiter.done()
        lifecycle.request_drain()
        assert await asyncio.wait_for(waiter, DEADLINE_S)

    asyncio.run(scenario())


# ---------------------------------------------------------------- runs, as the execution moves them


def _task(task_id: str, timeout: float | None = None) -> ClaimedTask:
    return ClaimedTask(task_id, "tok", {}, 1, 3, timeout, 0, 0, 1)


class _World:
    """An execution of ``func`` with a lifecycle and an outbox that records what is written."""

    def __init__(self, func: Callable[[dict[str, Any]], Any], concurrency: int = 1) -> None:
        settings = WorkerSettings(
            queue="q",
            redis_url="redis://127.0.0.1:1/0",
            pod="p",
            incarnation="i",
            concurrency=concurrency,
        )
        self.written: list[Outcome] = []

        async def write(batch: list[Outcome]) -> None:
            self.written.extend(batch)
            batch.clear()

        async def reconnect() -> None:
            raise AssertionError("no outage here")

        self.lifecycle = Lifecycle()
        gate = RedisGate(reconnect, lambda: None, backoff_base=0.1, backoff_max=0.2)
        self.outbox = Outbox(write, gate, self.lifecycle)
        self.execution = Execution(
            settings,
            HandlerSet.of(Handler.of("tests:func", func)),
            Slots(concurrency, 0),
            self.outbox,
            self.lifecycle,
            changed=lambda: None,
        )

    async def outcomes(self) -> list[str | None]:
        await self.outbox.flush()
        return [o.error or o.result for o in self.written]


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"waited {DEADLINE_S} s for {what}"
        await asyncio.sleep(0.01)


def test_a_timed_out_async_run_overruns_keeping_its_slot_until_its_call_returns() -> None:
    async def scenario() -> None:
        cancelled, release = asyncio.Event(), asyncio.Event()

        async def stubborn(payload: dict[str, Any]) -> str:
            try:
                await asyncio.sleep(DEADLINE_S * 2)
            except asyncio.CancelledError:
                cancelled.set()
                await release.wait()  # swallows the worker's cancellation: runs on
            return "late"

        world = _World(stubborn)
        execution = world.execution
        execution.start(_task("t", timeout=0.05))
        run = execution.held["t"]
        await asyncio.wait_for(cancelled.wait(), DEADLINE_S)
        assert (run.state, len(execution.held_slots)) == (R.OVERRUN, 1)
        world.lifecycle.slot_freed.clear()
        release.set()
        assert run.job is not None
        await asyncio.wait_for(asyncio.shield(run.job), DEADLINE_S)
        assert (run.state, len(execution.held_slots)) == (R.FINISHED, 0)
        assert world.lifecycle.slot_freed.is_set()  # its slot is free now
        assert await world.outcomes() == ["TimeoutError: task exceeded its timeout of 0.05s"]
        execution.close()

    asyncio.run(scenario())


def test_a_run_whose_lease_is_lost_is_cancelled_and_gone_without_an_outcome() -> None:
    async def scenario() -> None:
        began = asyncio.Event()

        async def long(payload: dict[str, Any]) -> str:
            began.set()
            await asyncio.sleep(DEADLINE_S * 2)
            return "never"

        world = _World(long)
        execution = world.execution
        execution.start(_task("t"))
        run = execution.held["t"]
        await asyncio.wait_for(began.wait(), DEADLINE_S)
        assert execution.leases() == {"t": "tok"}
        execution.abandon({"t"})
        assert (run.state, len(execution.held_slots), execution.counters.lost) == (R.LOST, 1, 1)
        assert "t" not in execution.held
        assert run.job is not None
        await asyncio.wait({run.job}, timeout=DEADLINE_S)
        assert (run.state, len(execution.held_slots)) == (R.GONE, 0)
        assert await world.outcomes() == []
        execution.close()

    asyncio.run(scenario())


def test_the_drain_deadline_abandons_unfinished_runs_and_leaves_finished_ones_to_their_write() -> (
    None
):
    async def scenario() -> None:
        began = asyncio.Event()

        async def long(payload: dict[str, Any]) -> str:
            began.set()
            await asyncio.sleep(DEADLINE_S * 2)
            return "never"

        world = _World(long, concurrency=2)
        execution = world.execution
        execution.start(_task("running"))
        await asyncio.wait_for(began.wait(), DEADLINE_S)
        done = Run(_task("done"), claimed_at=0.0, state=R.FINISHED)
        execution.held["done"] = done
        left = execution.abandon_unfinished()
        running = execution.held["running"]
        assert left == [running] and running.state is R.ABANDONED
        assert running.job is not None
        await asyncio.wait({running.job}, timeout=DEADLINE_S)
        assert (running.state, done.state, len(execution.held_slots)) == (R.GONE, R.FINISHED, 0)
        assert execution.leases() == {}  # neither is extended any more
        execution.close()

    asyncio.run(scenario())


def test_a_withdrawn_run_no_thread_began_is_never_begun_and_gone_once_the_thread_skips_it() -> None:
    async def scenario() -> None:
        first_began, release = threading.Event(), threading.Event()

        def blocking(payload: dict[str, Any]) -> str:
            first_began.set()
            release.wait(DEADLINE_S)
            return "ran"

        world = _World(blocking)  # one thread: the second run waits behind the first
        execution = world.execution
        execution.start_all([_task("first"), _task("second")])
        await asyncio.to_thread(first_began.wait, DEADLINE_S)
        first, second = execution.held["first"], execution.held["second"]
        assert execution.withdraw([first, second]) == [second]  # the first has begun
        assert (first.state, second.state) == (R.RUNNING, R.ABANDONED)
        release.set()
        await _until(lambda: second.state is R.GONE, "the thread to skip the withdrawn run")
        assert second.began_at is None
        await _until(lambda: first.state is R.FINISHED, "the first run's outcome")
        assert await world.outcomes() == ['"ran"']
        execution.close()

    asyncio.run(scenario())
