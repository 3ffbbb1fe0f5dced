"""The autoscaler: one loop per autoscaled TaskQueue around the pure decision.

Each turn reads the queue's load from Redis, asks ``autoscale.decide`` how many pods it
calls for, lets no busy pod go while an idle one could go instead, and applies the
result to the worker Deployment (pod-deletion-cost first, so the ReplicaSet picks idle
pods), with an event per change and the decision in ``status``.

A turn comes at least every ``DECIDE_EVERY_S`` (scale-down windows, delayed tasks coming
due), and at once when the queue's ``demand`` list is pushed: an enqueue that found no
idle worker pushes it, so a queue at zero wakes within a round trip of its first task.
Turns are at least ``MIN_GAP_S`` apart, however fast demand comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from kubernetes.client.exceptions import ApiException
from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import run, run_all, run_async
from taskfleet.protocol.connect import CLUSTER_EVENTS, connect_queue_async, follow_slot
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.lists import QueueLists
from taskfleet.protocol.store import slot_key
from taskfleet.protocol.workernames import per_pod

from taskfleet_operator import builders, kube
from taskfleet_operator.autoscale import Decision, Limits, Load, Policy, Surplus, decide
from taskfleet_operator.connections import Connections, describe_error
from taskfleet_operator.models import Autoscale, TaskQueueSpec
from taskfleet_operator.reconcile import InvalidSpec, parse_spec, set_deletion_costs
from taskfleet_operator.wakeups import Blocking, Stopping

Logger = logging.Logger | logging.LoggerAdapter[Any]

#: Longest wait between two decisions (scale-down windows, delayed tasks coming due).
DECIDE_EVERY_S = 1.0
#: Shortest gap between two decisions, however fast enqueues signal demand.
MIN_GAP_S = 0.5
#: Recently finished tasks whose run time makes the mean task duration.
DURATION_SAMPLE = 20
#: How often an autoscaler looks again while its queue's Redis server is parked (the
#: probe that finds the server again wakes it at once: `Wakers.resume`).
PARKED_WAIT_S = 5.0
#: How much longer than its BLPOP a demand wait may take before Redis counts as gone.
WAIT_SLACK_S = 2.0
#: Wait after a turn failed unexpectedly (logged with its traceback) before the next.
RETRY_AFTER_BUG_S = 10.0
#: A decision's reason is written to status at once when the replicas change, else at
#: most this often (the reason counts seconds: it changes every turn).
STATUS_EVERY_S = 10.0


@dataclass(frozen=True, slots=True)
class Reading:
    """What one turn read from Redis: the load, in-flight tasks per pod (its live workers), and the
    mean run time of recently finished tasks (None when none finished yet)."""

    load: Load
    inflight: Mapping[str, int]
    mean_task_s: float | None


def read_queue(queue: Queue, due_horizon_s: float) -> Reading:
    """The load as the decision counts it, in three round trips: the server's clock
    (alone: a cluster pipeline refuses TIME), the sizes, recent tasks and workers, then
    what depends on them."""
    reads, client = queue.reads, queue.client
    now_ms = run(client, reads.clock())
    pending, running, recent, workers, config = run_all(
        client,
        [
            reads.size("pending"),
            reads.size("running"),
            reads.ids("done", 0, DURATION_SAMPLE),
            reads.workers(),
            reads.config(),
        ],
    )
    alive = [p for p, r in workers.readable() if r.alive(now_ms, config.lease_ttl_s)]
    due, spans, held = run_all(
        client,
        [
            reads.due_by(now_ms + int(due_horizon_s * 1000)),
            reads.run_seconds(recent),
            # exact, from the queue's records: a heartbeat's count can be an interval old
            reads.held_counts(alive),
        ],
    )
    return Reading(Load(pending=pending, running=running, due=due), per_pod(held), mean(spans))


def mean(spans: Iterable[float | None]) -> float | None:
    """Mean run time (s) of finished tasks; those whose times are unknown are skipped."""
    known = [s for s in spans if s is not None]
    return sum(known) / len(known) if known else None


def busy_pods(pods: Iterable[Mapping[str, Any]], inflight: Mapping[str, int]) -> int:
    """Worker pods holding a task and not being removed already."""
    return sum(
        1
        for pod in pods
        if not pod["metadata"].get("deletionTimestamp") and inflight.get(pod["metadata"]["name"])
    )


def spare_busy_pods(target: int, current: int, busy: int) -> int:
    """Replicas to set for a decision of ``target`` when ``current`` are asked for and
    ``busy`` pods hold tasks: going down, only idle pods may go (a busy pod's tasks would
    be released and run again), so the busy ones stay until they are idle too. The
    deletion costs make the ReplicaSet pick idle pods first."""
    if target >= current:
        return target
    return max(target, min(busy, current))


@dataclass
class ScalerState:
    """What one queue's autoscaler remembers between turns (kept in kopf's memo)."""

    surplus: Surplus | None = None
    last_turn: float = -math.inf
    status_at: float = -math.inf
    status: tuple[int, str] | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn's outcome: the Deployment's replicas before and after, and why."""

    before: int
    replicas: int
    reason: str
    decision: Decision


def turn(
    state: ScalerState,
    autoscale: Autoscale,
    limits_of: Callable[[float | None], Limits],
    reading: Reading,
    *,
    current: int,
    pods: Callable[[], list[dict[str, Any]]],
    now: float,
) -> Turn:
    """Decide; never let a busy pod go while the Deployment could lose an idle one."""
    decision = decide(
        reading.load,
        limits_of(reading.mean_task_s),
        Policy.of(autoscale),
        current=current,
        surplus=state.surplus,
        now=now,
    )
    state.surplus = decision.surplus
    replicas, reason = decision.replicas, decision.reason
    if replicas < current:
        allowed = spare_busy_pods(replicas, current, busy_pods(pods(), reading.inflight))
        if allowed > replicas:
            reason += f"; {allowed - replicas} busy pod(s) stay until idle"
            replicas = allowed
    return Turn(current, replicas, reason, decision)


def status_due(state: ScalerState, result: Turn, now: float) -> dict[str, Any] | None:
    """The status patch for a turn: at once when the replicas change, else now and then."""
    shown = (result.replicas, result.reason)
    if state.status == shown:
        return None
    same_replicas = state.status is not None and state.status[0] == result.replicas
    if same_replicas and now - state.status_at < STATUS_EVERY_S:
        return None
    state.status, state.status_at = shown, now
    return {"desiredReplicas": result.replicas, "scalingReason": result.reason}


#: A blocking wait that failed this way is retried on the slot's (new) master.
_SLOT_MOVED: tuple[type[BaseException], ...] = (*CLUSTER_EVENTS, redis.ConnectionError)


class DemandWaiter:
    """Blocks on one queue's demand list on the event loop (an asyncio connection of its
    own, made from the queue's resolved URL): waiting holds no thread, however many
    queues are autoscaled."""

    def __init__(self) -> None:
        self._url: str | None = None
        self._client: aioredis.Redis | None = None

    async def wait(self, url: str, queue: str, block_s: float) -> bool:
        """True when the list had an element (popped), False after ``block_s``."""
        if url != self._url or self._client is None:
            await self.close()
            # On a cluster: a client of the master of the queue's slot.
            self._client = await connect_queue_async(
                url, slot_key(queue), socket_connect_timeout=block_s + 1
            )
            self._url = url
        pop = QueueLists(QueueKeys(queue)).wait_demand(block_s)
        # No socket timeout shorter than the BLPOP; a Redis that stops answering is cut
        # off here instead.
        try:
            async with asyncio.timeout(block_s + WAIT_SLACK_S):
                return await run_async(self._client, pop)
        except _SLOT_MOVED:
            # The slot moved (a failover): the next wait goes to its new master.
            with contextlib.suppress(redis.RedisError, OSError):
                await follow_slot(self._client)
            raise

    async def close(self) -> None:
        client, self._client, self._url = self._client, None, None
        if client is not None:
            await client.aclose()


def apply_turn(
    body: Mapping[str, Any],
    spec: TaskQueueSpec,
    queue: Queue,
    state: ScalerState,
    logger: Logger,
    *,
    event: Callable[[str, str, str], None],
) -> Turn | None:
    """One turn: read, decide, set deletion costs before going down, scale, report."""
    autoscale = spec.autoscale
    if autoscale is None:
        return None
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    deployment = kube.read_deployment(name, namespace)
    if deployment is None:
        return None  # the create/update handler (or the sweep) applies it
    current = int(deployment.get("spec", {}).get("replicas") or 0)
    reading = read_queue(queue, autoscale.due_horizon_seconds)

    def pods() -> list[dict[str, Any]]:
        found = kube.list_pods(namespace, builders.selector_string(name))
        return [pod for pod in found if builders.owns_worker_pod(pod, name)]

    now = time.monotonic()
    result = turn(
        state,
        autoscale,
        lambda mean: Limits.of(spec, mean),
        reading,
        current=current,
        pods=pods,
        now=now,
    )
    if result.replicas < current:
        try:  # the ReplicaSet removes the cheapest pods: idle ones first
            set_deletion_costs(namespace, name, queue, logger)
        except (redis.RedisError, ApiException) as exc:
            # Without costs the ReplicaSet could pick a busy pod: wait for a turn that can.
            logger.warning("scale-down postponed, no deletion costs: %s", describe_error(exc))
            return result
    if not (body.get("spec") or {}).get("autoscale"):
        return None  # autoscale was removed meanwhile: the count is spec.replicas again
    if result.replicas != current:
        kube.scale_deployment(name, namespace, result.replicas)
        message = f"{current} -> {result.replicas}: {result.reason}"
        logger.info("scaled %s", message)
        event("Normal", "Scaled", message)
    patch = status_due(state, result, now)
    if patch is not None:
        try:
            kube.patch_taskqueue_status(name, namespace, patch)
        except ApiException:
            state.status = None  # written at the next turn instead
            raise
    return result


async def _first_of(*waits: Awaitable[Any]) -> None:
    """Return when the first of ``waits`` ends; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def serve(
    body: Mapping[str, Any],
    connections: Connections,
    state: ScalerState,
    logger: Logger,
    stopped: Any,
    *,
    event: Callable[[str, str, str], None],
    on_demand: Callable[[], None] = lambda: None,
    run: Blocking = asyncio.to_thread,
    resumed: asyncio.Event | None = None,
) -> None:
    """Turn after turn until ``stopped`` (kopf's daemon flag): at once on demand, else
    every ``DECIDE_EVERY_S``, at least ``MIN_GAP_S`` apart. A turn's calls (Redis, the
    Kubernetes API) run in a thread for their few round trips; the waits run on the
    event loop, so an autoscaled queue holds none of kopf's handler threads. While its
    Redis server is parked it waits ``PARKED_WAIT_S``, or until ``resumed`` is set (the
    probe found the server again: the first enqueue after it is answered at once)."""
    resumed = resumed or asyncio.Event()
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    waiter = DemandWaiter()
    try:
        while not stopped:
            try:
                spec = parse_spec(body["spec"])
                queue = await run(connections.get, namespace, name, spec)
                url = await run(connections.url, namespace, name, spec)
                await run(apply_turn, body, spec, queue, state, logger, event=event)
                state.last_turn = time.monotonic()
                await stopped.wait(MIN_GAP_S)
                if not stopped and await waiter.wait(url, queue.name, DECIDE_EVERY_S):
                    on_demand()  # this queue's demand is read here, not by the sweeps' poll
            except (
                InvalidSpec,
                redis.RedisError,
                kube.SecretUnavailable,
                ApiException,
                TimeoutError,
            ) as exc:
                # Reported by the sweep (Redis, Secret) or the create/update handler (spec).
                logger.debug("autoscaler waits: %s", describe_error(exc))
                await waiter.close()
                resumed.clear()  # before the check: a resume from here on is seen
                if isinstance(exc, redis.RedisError):
                    connections.report(namespace, name, exc)
                # A parked server is probed for all its queues: no turn until it answers.
                if connections.fault(namespace, name) is not None:
                    await _first_of(stopped.wait(PARKED_WAIT_S), resumed.wait())
                else:
                    await stopped.wait(DECIDE_EVERY_S)
            except Stopping:
                return  # the operator is stopping
            except Exception:  # a bug must not stop the fleet's sizing for good: say it, go on
                logger.exception(
                    "autoscaler turn failed; trying again in %.0f s", RETRY_AFTER_BUG_S
                )
                await waiter.close()
                await stopped.wait(RETRY_AFTER_BUG_S)
    finally:
        await waiter.close()
