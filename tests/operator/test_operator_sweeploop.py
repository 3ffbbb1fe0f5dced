"""The one sweep loop for all TaskQueues (`sweeploop`), without Kubernetes or Redis:
the sweep is a function that records its calls."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from taskfleet_operator import sweeploop, wakeups
from taskfleet_operator.wakeups import Key, Quiet

WAIT_S = 5.0
BUSY = Quiet(False, "busy")
IDLE = Quiet(True, "idle")


def _body(name: str, *, handled: bool = True, uid: str = "", deleting: bool = False) -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return {
        "apiVersion": "taskfleet.dev/v1",
        "kind": "TaskQueue",
        "metadata": meta,
        "spec": {"redis": {"url": "redis://x"}},
        "status": {"observedGeneration": 1} if handled else {},
    }


class Harness:
    """A loop whose sweeps record themselves; ``gates`` holds a sweep of a key until set."""

    def __init__(self, **kwargs: Any) -> None:
        self.calls: list[Key] = []
        self.gone: list[Key] = []
        self.failed: list[Key] = []
        self.forgotten: list[list[Key]] = []
        self.gates: dict[Key, threading.Event] = {}
        self.outcome: Callable[[Key], Quiet | None] = lambda key: BUSY
        self.running: set[Key] = set()
        self.overlaps = 0
        self._lock = threading.Lock()
        self.executor = ThreadPoolExecutor(4)
        run = wakeups.in_threads(self.executor, threading.Event())
        hooks = sweeploop.Hooks(
            sweep=self._sweep,
            gone=self.gone.append,
            failed=self.failed.append,
            forget_all=self.forgotten.append,
        )
        self.loop = sweeploop.SweepLoop(
            hooks,
            run,
            wakeups.Wakers(),
            kwargs.pop("first_sweeps", wakeups.FirstSweeps(quiet_s=0.2, most_s=WAIT_S)),
            kwargs.pop("sweep_interval_s", 60.0),
            kwargs.pop("idle_interval_s", 60.0),
            **kwargs,
        )

    def _sweep(self, key: Key, entry: sweeploop.Tracked) -> Quiet | None:
        with self._lock:
            if key in self.running:
                self.overlaps += 1
            self.running.add(key)
        try:
            self.calls.append(key)
            gate = self.gates.get(key)
            if gate is not None:
                gate.wait(WAIT_S)
            if key == ("ns", "broken"):
                raise RuntimeError("sweep failed")
            return self.outcome(key)
        finally:
            with self._lock:
                self.running.discard(key)

    def count(self, key: Key) -> int:
        return self.calls.count(key)


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def run_with_loop(harness: Harness, scenario: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        serving = asyncio.create_task(harness.loop.serve())
        try:
            await asyncio.sleep(0)
            await scenario()
        finally:
            serving.cancel()
            harness.executor.shutdown(wait=False, cancel_futures=True)

    asyncio.run(main())


def test_a_known_queue_is_swept_at_once_then_every_interval_and_at_once_when_woken() -> None:
    h = Harness(sweep_interval_s=0.1, idle_interval_s=WAIT_S)
    q = ("ns", "q")

    async def scenario() -> None:
        h.loop.track(q, _body("q"), memo=None)
        await until(lambda: h.count(q) >= 3, "three sweeps 0.1 s apart")
        h.outcome = lambda key: IDLE  # idle: the next sweep waits 10 idle intervals
        await until(lambda: h.loop.wakers.idle() == [q], "the queue idle")
        seen = h.count(q)
        await asyncio.sleep(0.3)
        assert h.count(q) == seen
        h.loop.wakers.wake(q)
        await until(lambda: h.count(q) == seen + 1, "the woken sweep")

    run_with_loop(h, scenario)
    assert h.overlaps == 0


def test_one_sweep_per_queue_at_a_time_and_a_wake_during_it_sweeps_again_after() -> None:
    h = Harness(sweep_interval_s=WAIT_S)
    q = ("ns", "q")
    h.gates[q] = gate = threading.Event()

    async def scenario() -> None:
        h.loop.track(q, _body("q"), memo=None)
        await until(lambda: h.count(q) == 1, "the first sweep")
        for _ in range(5):
            h.loop.wakers.wake(q)
            await asyncio.to_thread(h.loop.wakers.wake, q)
        await asyncio.sleep(0.1)
        assert h.count(q) == 1  # still the first: no second sweep beside it
        gate.set()
        await until(lambda: h.count(q) == 2, "one more sweep for the wakes")
        await asyncio.sleep(0.2)
        assert h.count(q) == 2

    run_with_loop(h, scenario)
    assert h.overlaps == 0


def test_a_new_queue_waits_for_its_wake_and_a_burst_of_new_ones_for_its_end() -> None:
    h = Harness(idle_interval_s=WAIT_S * 2)
    a, b, c = ("ns", "a"), ("ns", "b"), ("ns", "c")

    async def scenario() -> None:
        for key in (a, b, c):
            h.loop.track(key, _body(key[1], handled=False), memo=None)
        await asyncio.sleep(0.2)
        assert h.calls == []  # no create handler has woken them
        h.loop.wakers.wake(a)  # a lone creation: at once
        await until(lambda: h.count(a) == 1, "the lone first sweep")
        h.loop.wakers.wake(b)  # right after another: a burst, held back
        h.loop.wakers.wake(c)
        await asyncio.sleep(0.05)
        assert h.count(b) == h.count(c) == 0
        await until(lambda: h.count(b) == h.count(c) == 1, "the burst's first sweeps")

    run_with_loop(h, scenario)


def test_a_queue_deleted_while_swept_is_never_swept_again_and_its_connection_goes() -> None:
    h = Harness(sweep_interval_s=0.05)
    q, other = ("ns", "q"), ("ns", "other")
    h.gates[q] = gate = threading.Event()

    async def scenario() -> None:
        h.loop.track(q, _body("q"), memo=None)
        h.loop.track(other, _body("other"), memo=None)
        await until(lambda: h.count(q) == 1, "the sweep")
        h.loop.track(q, _body("q", deleting=True), memo=None)  # its deletion timestamp
        ending = h.loop.stopped(q)
        assert ending is not None and not ending.is_set()
        assert not h.loop.tracked(q, sweeploop.Tracked(_body("q"), None, 0))
        h.loop.wakers.wake(q)
        gate.set()
        await asyncio.to_thread(ending.wait, WAIT_S)
        await until(lambda: h.gone == [q], "its connection forgotten after the sweep")
        assert h.loop.stopped(q) is None
        seen = h.count(q)
        await until(lambda: h.count(other) >= 4, "the other queue swept on")
        assert h.count(q) == seen == 1
        assert h.loop.keys() == [other]

    run_with_loop(h, scenario)


def test_a_failed_sweep_is_counted_and_the_queue_swept_again() -> None:
    h = Harness(sweep_interval_s=0.05)
    broken = ("ns", "broken")

    async def scenario() -> None:
        h.loop.track(broken, _body("broken"), memo=None)
        await until(lambda: len(h.failed) >= 2, "two failed sweeps counted")

    run_with_loop(h, scenario)
    assert set(h.failed) == {broken}


def test_a_paused_loop_sweeps_nothing_drops_the_connections_and_resumes_every_queue() -> None:
    h = Harness(active=False)
    h.outcome = lambda key: IDLE
    a, b = ("ns", "a"), ("ns", "b")

    async def scenario() -> None:
        h.loop.track(a, _body("a"), memo=None)
        h.loop.track(b, _body("b"), memo=None)
        await asyncio.sleep(0.2)
        assert h.calls == []  # a standby: kopf has not let it work yet
        h.loop.resume()
        await until(lambda: sorted(h.loop.wakers.idle()) == [a, b], "both swept, idle")
        await h.loop.pause()
        assert sorted(h.forgotten[-1]) == [a, b]
        assert h.running == set()
        assert h.loop.keys() == []  # kopf lists them again when it resumes
        assert h.loop.wakers.idle() == []  # the idle loops touch none of them
        h.loop.track(a, _body("a"), memo=None)  # the listing after the pause
        h.loop.wakers.wake(a)
        await asyncio.sleep(0.2)
        assert sorted(h.calls) == [a, b]
        h.loop.resume()
        await until(lambda: h.count(a) == 2, "swept again after the pause")
        assert h.loop.keys() == [a]

    run_with_loop(h, scenario)
    assert h.overlaps == 0


def test_a_queue_created_again_under_its_name_starts_afresh() -> None:
    h = Harness(idle_interval_s=WAIT_S * 2)
    q = ("ns", "q")

    async def scenario() -> None:
        h.loop.track(q, _body("q"), memo=None)
        await until(lambda: h.count(q) == 1, "the old one's sweep")
        h.loop.track(q, _body("q", handled=False, uid="new"), memo=None)
        await asyncio.sleep(0.2)
        assert h.count(q) == 1  # the new one waits for its create handler
        h.loop.wakers.wake(q)
        await until(lambda: h.count(q) == 2, "the new one's first sweep")

    run_with_loop(h, scenario)


def test_a_sweep_that_finds_its_queue_gone_lets_it_go() -> None:
    h = Harness(sweep_interval_s=0.05)
    q = ("ns", "q")

    def gone(key: Key) -> Quiet | None:
        raise sweeploop.Gone(f"{key[0]}/{key[1]}")

    h.outcome = gone

    async def scenario() -> None:
        h.loop.track(q, _body("q"), memo=None)
        await until(lambda: h.gone == [q], "its connection forgotten")
        await asyncio.sleep(0.2)
        assert h.count(q) == 1
        assert h.loop.keys() == []

    run_with_loop(h, scenario)
    assert h.failed == []


_HANDLER_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("handler_var")


def test_sweeps_run_in_the_context_of_a_kopf_handler() -> None:
    """kopf.event needs what kopf sets in its handlers' context: the sweeps, started by
    the loop's own task, run in the context of the handler that last tracked a queue."""
    h = Harness()
    seen: list[str | None] = []
    h.outcome = lambda key: seen.append(_HANDLER_VAR.get(None)) or BUSY  # type: ignore[func-returns-value]

    async def scenario() -> None:
        async def handler() -> None:  # kopf runs each handler in a task of its own
            _HANDLER_VAR.set("set by kopf")
            h.loop.track(("ns", "q"), _body("q"), memo=None)

        await asyncio.create_task(handler())
        await until(lambda: len(seen) == 1, "the sweep")

    run_with_loop(h, scenario)
    assert seen == ["set by kopf"]
