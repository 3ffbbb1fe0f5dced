"""The heartbeat loop: one call extends every held lease and reports the worker's state.

The worker's record says how many tasks it holds (``inflight``) and how many slots calls
it gave up on still hold (``held``). Each beat also learns which leases were lost (those
tasks are abandoned here: someone else runs them now) and which held tasks producers
cancelled (their runs are cancelled) and, every ``sweep_every`` beats, sweeps the queue
so the library loses nothing even without the operator, then repairs waiting tasks whose
wake-up never came (``Broker.repair``), so none stays waiting for ever. A beat comes early
when the lifecycle's ``beat_now`` is set (a drain began, Redis came back).
"""

from __future__ import annotations

import logging

from taskfleet.protocol.errors import IdentityTaken, PodGone
from taskfleet.worker.broker import Broker
from taskfleet.worker.events import log_event
from taskfleet.worker.execution import Execution
from taskfleet.worker.gate import EXIT_BAD_CONFIG, REDIS_DOWN, FatalStop, RedisGate, wait_any
from taskfleet.worker.lifecycle import Lifecycle
from taskfleet.worker.settings import WorkerSettings

__all__ = ["SWEEP_MAX_CALLS", "heartbeat_loop"]

#: Sweep calls a heartbeat may make in a row while each finds a full step of work.
SWEEP_MAX_CALLS = 10


def taken_over(settings: WorkerSettings, exc: IdentityTaken) -> FatalStop:
    """The stop for a worker whose name another incarnation registered under (its beat
    or its claim found out): that one took back every task this one held, and running on
    would run them twice and fight over the name. Logged loudly, exit 2. The same for a
    worker whose pod is gone from the Kubernetes API (``PodGone``): the operator took back
    its tasks, and claiming them again would lose them a second time."""
    if isinstance(exc, PodGone):
        log_event(
            logging.ERROR,
            "pod_gone",
            pod=settings.pod,
            incarnation=settings.incarnation,
            note="this worker's pod was deleted from the Kubernetes API and its tasks taken "
            "back; it may not register again and exits without writing anything",
        )
        return FatalStop(EXIT_BAD_CONFIG)
    log_event(
        logging.ERROR,
        "identity_taken",
        pod=settings.pod,
        incarnation=settings.incarnation,
        by=exc.holder,
        note="another worker started under this name and took back its tasks; "
        "give each worker its own --pod",
    )
    return FatalStop(EXIT_BAD_CONFIG)


async def heartbeat_loop(
    broker: Broker,
    execution: Execution,
    settings: WorkerSettings,
    gate: RedisGate,
    lifecycle: Lifecycle,
    *,
    interval: float,
) -> None:
    """Beat until the worker closes; raises ``FatalStop`` if another worker took our name."""
    beat_now, closing = lifecycle.beat_now, lifecycle.closing
    drain_requested, stop_requested = lifecycle.drain_requested, lifecycle.stop_requested
    beats = 0
    while not closing.is_set():
        beat_now.clear()
        try:
            reply = await broker.beat(
                execution.leases(),
                inflight=len(execution.held),
                draining=drain_requested.is_set(),
                held=len(execution.held_slots),
            )
            execution.abandon(reply.lost)
            if reply.cancelled:  # producers cancelled these: the reply says so, no extra call
                execution.cancel(reply.cancelled)
            beats += 1
            if beats % settings.sweep_every == 0 and not drain_requested.is_set():
                # Claims already take back expired leases; this also prunes retention.
                await broker.sweep(max_calls=SWEEP_MAX_CALLS)
                repaired = await broker.repair(max_calls=SWEEP_MAX_CALLS)
                execution.counters.flow_repairs += len(repaired)
                for task_id, state in repaired:
                    log_event(
                        logging.WARNING,
                        "flow_repaired",
                        task=task_id,
                        state=state,
                        note="its dependencies had ended without waking it",
                    )
        except REDIS_DOWN as exc:
            if stop_requested.is_set():
                return
            await gate.wait_out(exc, stop_requested, closing)
            continue
        except IdentityTaken as exc:
            raise taken_over(settings, exc) from None
        await wait_any(beat_now, closing, limit=interval)
