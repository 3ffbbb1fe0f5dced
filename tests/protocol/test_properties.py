"""Invariants of the protocol under random interleavings (hypothesis state machine).

Random producers, two worker pods and an operator drive every operation against a real
redis-server (hand-offs to idle workers included), with a tiny lease TTL and a rule that
lets real time pass, so leases expire and are taken back in between. After every step
the stored structures must agree: each task in exactly one state, running tasks fenced
by a token and held by exactly one pod, counters adding up, and no task ever lost.
Producers also cancel tasks and send dead ones back (retry), racing claims, completions
and take-backs: a task whose cancel was acknowledged is never claimed again (one running
then ends cancelled, whatever its run writes), and a retried dead task is pending again.
Tasks wait for others (after, each policy), racing all of that: a dependant is never
claimed before its dependencies are done, and none waits with nothing left to wait for.

This file holds the machine's rules (what producers, workers and the operator do) and the
model they keep; the invariants checked after every step are in protocol_invariants.py.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    precondition,
    rule,
    run_state_machine_as_test,
)
from taskfleet import CancelOutcome, Queue, QueueConfig, Task, TaskExists, TaskState
from taskfleet.protocol.queue_ops import Ops
from taskfleet.protocol.scripts import SyncScripts
from taskfleet.worker.claimed import parse_claim_records

from tests.fixtures_redis import BlockingBroker
from tests.protocol_invariants import (
    FINISHED,
    GROUP_CAP,
    GROUPS,
    MAX_CONCURRENCY,
    ProtocolInvariants,
)

PODS = ("pod-a", "pod-b")
LEASE_TTL_S = 0.05


def _ids_and_tokens(records: list[bytes]) -> list[SimpleNamespace]:
    """The claimed tasks' ids and tokens, read as the worker reads its claim records: the
    tagged form, or the positional one a producer's hand-off takes for a pod whose worker
    record does not say it reads tags (this test's brokers register none)."""
    tasks, bad = parse_claim_records(records)
    assert not bad, bad
    assert len(tasks) == len(records), records
    return [SimpleNamespace(id=task.id, token=task.token) for task in tasks]


class ProtocolMachine(ProtocolInvariants, RuleBasedStateMachine):
    url: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.raw = redis.Redis.from_url(self.url)
        self.raw.flushall()
        self.queue = Queue("props", client=self.raw)
        self.queue.configure(
            # model_construct: a lease TTL below the model's floor (MIN_LEASE_TTL_S), as a
            # hand-written config may hold, so that leases expire between steps
            QueueConfig.model_construct(
                lease_ttl_s=LEASE_TTL_S,
                max_concurrency=MAX_CONCURRENCY,
                max_attempts=2,
                max_lost=2,
                backoff_base_s=0.01,
                backoff_max_s=0.02,
                group_max_concurrency=GROUP_CAP,
            )
        )
        self.runner = asyncio.Runner()
        self.brokers = {
            pod: BlockingBroker(self.runner, self.url, "props", pod, "1") for pod in PODS
        }
        self.enqueued: set[str] = set()
        self.completed: set[str] = set()  # accepted completions: must stay done
        self.failed_dead: set[str] = set()  # fail() answered dead: must stay dead
        self.held: dict[str, dict[str, str]] = {pod: {} for pod in PODS}
        self.cancel_acked: set[str] = set()  # cancel answered cancelled or requested
        # cancel answered requested while the task sat handed to a pod, not popped yet: it
        # is that pod's since its enqueue, so it may still be delivered, once
        self.cancelled_in_hand: set[str] = set()
        self.replayed: Counter[str] = Counter()  # reasons of the dead tasks sent back
        self.ops = Ops(self.queue.keys)
        self.claims = 0
        self.after: dict[str, tuple[list[str], str]] = {}  # dependant -> (deps, policy)
        self.flows = 0

    def teardown(self) -> None:
        for broker in self.brokers.values():
            broker.close()
        self.runner.close()
        self.raw.close()

    # -- producers -------------------------------------------------------------------

    @rule(
        n=st.integers(1, 3),
        priority=st.sampled_from([-1, 0, 5]),
        delay=st.sampled_from([None, 0.01]),
        deadline=st.sampled_from([None, 0.03, 60]),
        group=st.sampled_from([None, *GROUPS]),
    )
    def enqueue(
        self, n: int, priority: int, delay: float | None, deadline: float | None, group: str | None
    ) -> None:
        ids = self.queue.enqueue_many(
            [
                {
                    "payload": {"i": i},
                    "priority": priority,
                    "delay": delay,
                    "deadline": deadline,
                    "group": group,
                }
                for i in range(n)
            ]
        )
        self.enqueued.update(ids)

    @rule(n=st.integers(3, 8), priority=st.sampled_from([0, 5]))
    def enqueue_tasks_that_expire(self, n: int, priority: int) -> None:
        """A run of deadlines that passes at once: a backlog for the small-bound claims."""
        ids = self.queue.enqueue_many(
            [{"payload": {"x": i}, "priority": priority, "deadline": 0.001} for i in range(n)]
        )
        self.enqueued.update(ids)
        time.sleep(0.003)  # the deadlines pass: advancing real time is the point

    @precondition(lambda self: bool(self.enqueued))
    @rule(data=st.data())
    def enqueue_an_existing_id_again(self, data: st.DataObject) -> None:
        """The same task again changes nothing; another payload under its id is refused."""
        task_id = data.draw(st.sampled_from(sorted(self.enqueued)))
        before = self.raw.hgetall(self.queue.keys.task(task_id))
        task = Task.from_hash(before, task_id)
        same = data.draw(st.booleans())
        if same:
            # the same dependencies too: another after or on_dep_fail is another task
            again = self.queue.enqueue(
                task.payload,
                task_id=task_id,
                priority=task.priority,
                group=task.group,
                after=task.after or None,
                on_dep_fail=task.on_dep_fail if task.after else None,
            )
            assert again == task_id
        else:
            with pytest.raises(TaskExists):
                self.queue.enqueue({"again": True}, task_id=task_id)
        assert self.raw.hgetall(self.queue.keys.task(task_id)) == before

    @precondition(lambda self: bool(self.enqueued))
    @rule(
        data=st.data(),
        policy=st.sampled_from(["fail", "ignore", "cancel"]),
        chained=st.booleans(),
    )
    def enqueue_after(self, data: st.DataObject, policy: str, chained: bool) -> None:
        """A task waiting for 1-3 others (any state), and maybe one waiting for it, in
        one call."""
        deps = data.draw(
            st.lists(st.sampled_from(sorted(self.enqueued)), min_size=1, max_size=3, unique=True)
        )
        self.flows += 1
        first = f"flow{self.flows}"
        items: list[dict[str, Any]] = [
            {"payload": {}, "task_id": first, "after": deps, "on_dep_fail": policy}
        ]
        if chained:
            items.append({"payload": {}, "task_id": first + "b", "after": [first]})
        ids = self.queue.enqueue_many(items)
        self.enqueued.update(ids)
        self.after[first] = (deps, policy)
        if chained:
            self.after[first + "b"] = ([first], "fail")

    # -- workers ---------------------------------------------------------------------

    @rule(pod=st.sampled_from(PODS), n=st.integers(1, 4), idle=st.booleans())
    def claim(self, pod: str, n: int, idle: bool) -> None:
        # idle: a claim that empties the queue registers the pod for hand-offs by producers
        handed = self._handed(pod)
        self._took(pod, n + handed, self.brokers[pod].claim(n, idle_ms=5000 if idle else 0))

    @rule(pod=st.sampled_from(PODS), n=st.integers(1, 4))
    def claim_with_the_smallest_bound(self, pod: str, n: int) -> None:
        """Housekeeping bound 1: a claim expires at most 1 task, so a backlog of expired
        ones is common and claims step over the runs of them (deadlines:runs)."""
        handed = self._handed(pod)
        self.claims += 1
        op = self.ops.claim(pod, "1", n, f"small{self.claims}", 1)
        raw = SyncScripts.for_client(self.raw).run(op)
        tasks = _ids_and_tokens(raw.records)
        self._took(pod, n + handed, SimpleNamespace(tasks=tasks))

    @rule(pod=st.sampled_from(PODS))
    def pop_a_hand_off(self, pod: str) -> None:
        result = self.brokers[pod].wait_for_work(0.001)
        if result is not None:
            self._took(pod, 1, result)

    def _handed(self, pod: str) -> int:
        """Tasks producers handed to ``pod`` while it was not waiting: they are the pod's
        already, and its next claim returns them on top of what it asks for."""
        return int(self.raw.llen(self.queue.keys.wake(pod)))

    def _in_a_hand_off(self, task_id: str) -> bool:
        """Whether a producer handed ``task_id`` to a pod that has not popped it yet."""
        return any(
            task_id.encode() in entry
            for pod in PODS
            for entry in self.raw.lrange(self.queue.keys.wake(pod), 0, -1)
        )

    def _took(self, pod: str, n: int, result: Any) -> None:
        assert len(result.tasks) <= n
        for task in result.tasks:
            assert task.id in self.enqueued
            assert task.id not in self.completed
            assert task.id not in self.failed_dead
            if task.id in self.cancelled_in_hand:
                # claimed for the pod by its enqueue, before the cancel: its run stops at
                # the pod's next heartbeat (reply.cancelled) and it ends cancelled
                self.cancelled_in_hand.discard(task.id)
            else:
                assert task.id not in self.cancel_acked, f"{task.id} claimed after its cancel"
            if task.id in self.after:  # never before its dependencies are done
                deps, policy = self.after[task.id]
                for dep, h in self._hashes(deps).items():
                    if policy != "ignore":
                        assert h.get("state") == "done", (task.id, dep, h.get("state"))
            for other in PODS:
                self.held[other].pop(task.id, None)  # any older claim is stale now
            self.held[pod][task.id] = task.token

    def _pick(self, data: st.DataObject) -> tuple[str, list[str]] | None:
        """A pod holding tasks and some of them, or None when nobody holds any.

        The draws have the same shape whatever is held (no precondition on held tasks):
        what a worker holds depends on real time (leases expire), and hypothesis needs a
        replayed example to draw exactly as the first run did.
        """
        start = data.draw(st.integers(0, len(PODS) - 1))
        picks = data.draw(st.lists(st.integers(0, 7), min_size=1, max_size=4))
        for k in range(len(PODS)):
            pod = PODS[(start + k) % len(PODS)]
            held = sorted(self.held[pod])
            if held:
                return pod, sorted({held[i % len(held)] for i in picks})
        return None

    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        picked = self._pick(data)
        if picked is None:
            return
        pod, ids = picked
        items = [(i, self.held[pod].pop(i), '{"ok": true}') for i in ids]
        for (task_id, _, _), applied in zip(
            items, self.brokers[pod].complete_many(items), strict=True
        ):
            self._completed(task_id, applied)

    @rule(data=st.data(), n=st.integers(0, 4), none=st.booleans())
    def complete_and_claim(self, data: st.DataObject, n: int, none: bool) -> None:
        """What a busy worker does: finish some tasks and refill those slots at once."""
        picked = self._pick(data)
        if picked is None:
            return
        pod, ids = picked
        items = [] if none else [(i, self.held[pod].pop(i), None) for i in ids]
        handed = self._handed(pod)
        applied, result = self.brokers[pod].complete_and_claim(items, n)
        for (task_id, _, _), code in zip(items, applied, strict=True):
            self._completed(task_id, code)
        self._took(pod, n + handed, result)

    def _completed(self, task_id: str, code: int) -> None:
        if code == 1:
            assert task_id not in self.cancel_acked
            self.completed.add(task_id)
        elif code == 3:  # its cancel came while it ran: it ends cancelled
            assert task_id in self.cancel_acked

    @rule(data=st.data(), retryable=st.booleans(), after=st.sampled_from([None, 10]))
    def fail(self, data: st.DataObject, retryable: bool, after: int | None) -> None:
        """A failed attempt; ``after``: the handler asked for a retry after 10 ms."""
        picked = self._pick(data)
        if picked is None:
            return
        pod, [task_id, *_] = picked
        token = self.held[pod].pop(task_id)
        state = self.brokers[pod].fail(task_id, token, "boom", retryable, retry_after_ms=after)
        assert state in (None, TaskState.DELAYED, TaskState.DEAD, TaskState.CANCELLED)
        if state is TaskState.DEAD:
            self.failed_dead.add(task_id)
        if state is TaskState.CANCELLED:
            assert task_id in self.cancel_acked

    @rule(pod=st.sampled_from(PODS), draining=st.booleans())
    def heartbeat(self, pod: str, draining: bool) -> None:
        # draining also gives back hand-offs not popped yet
        reply = self.brokers[pod].beat(dict(self.held[pod]), draining=draining)
        assert reply.lost <= set(self.held[pod])
        assert reply.cancelled <= self.cancel_acked & set(self.held[pod])
        for task_id in reply.lost:
            del self.held[pod][task_id]

    # -- producers' control ------------------------------------------------------------

    @precondition(lambda self: bool(self.enqueued))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        task_id = data.draw(st.sampled_from(sorted(self.enqueued)))
        outcome = self.queue.cancel(task_id)
        if outcome in (CancelOutcome.CANCELLED, CancelOutcome.REQUESTED):
            self.cancel_acked.add(task_id)
        if outcome is CancelOutcome.REQUESTED and self._in_a_hand_off(task_id):
            self.cancelled_in_hand.add(task_id)
        state = self._hashes([task_id])[task_id]["state"]
        if outcome is CancelOutcome.CANCELLED:
            assert state == "cancelled"
        elif outcome is CancelOutcome.REQUESTED:
            assert state == "running"
        else:  # it had finished
            assert state in ("done", "dead", "cancelled")

    @rule(data=st.data(), every=st.booleans())
    def retry_dead(self, data: st.DataObject, every: bool) -> None:
        dead = sorted(self.members()["dead"])
        picks = data.draw(st.lists(st.integers(0, 7), max_size=3))
        ids = sorted({dead[i % len(dead)] for i in picks}) if dead else []
        chosen = dead if every else ids
        reasons = {i: h.get("reason", "") for i, h in self._hashes(chosen).items()}
        retried = self.queue.retry() if every else self.queue.retry(ids)
        assert retried == len(chosen)
        hashes = self._hashes(chosen)
        for task_id in chosen:  # each runs once more: pending with a fresh budget
            state = hashes[task_id]["state"]
            if task_id in self.after:  # or waits again, or ends again by its policy
                assert state in ("pending", "waiting", "dead", "cancelled"), (task_id, state)
            else:
                assert (state, hashes[task_id]["attempts"]) == ("pending", "0")
            self.failed_dead.discard(task_id)
            self.replayed[reasons[task_id]] += 1

    def _flow(self, task_id: str, branch: bool) -> set[str]:
        """The model's members of ``task_id``'s branch or flow (docs/flows.md)."""
        down: dict[str, set[str]] = {}
        for dependant, (deps, _) in self.after.items():
            for dep in deps:
                down.setdefault(dep, set()).add(dependant)
        found, todo = {task_id}, [task_id]
        while todo:
            tid = todo.pop()
            linked = set(down.get(tid, ()))
            if not branch:
                linked |= set(self.after.get(tid, ([], ""))[0])
            for other in linked - found:
                found.add(other)
                todo.append(other)
        return found

    @precondition(lambda self: bool(self.after))
    @rule(data=st.data(), branch=st.booleans())
    def cancel_flow(self, data: st.DataObject, branch: bool) -> None:
        """Every unfinished member ends cancelled, or is asked to stop while it runs."""
        task_id = data.draw(st.sampled_from(sorted(self.after)))
        outcomes = self.queue.cancel_flow(task_id, branch=branch)
        assert set(outcomes) == self._flow(task_id, branch)
        acted = (CancelOutcome.CANCELLED, CancelOutcome.REQUESTED)
        self.cancel_acked.update(i for i, o in outcomes.items() if o in acted)
        for member, h in self._hashes(sorted(outcomes)).items():
            state = h["state"]
            if state == "running":
                assert outcomes[member] is CancelOutcome.REQUESTED, (member, outcomes[member])
            else:
                assert state in FINISHED, (member, state)

    @precondition(lambda self: bool(self.after))
    @rule(data=st.data(), branch=st.booleans())
    def retry_flow(self, data: st.DataObject, branch: bool) -> None:
        """Every dead or cancelled member goes back, dependencies first: in a whole flow
        each then waits or is pending (a branch's may end again by a dependency outside)."""
        task_id = data.draw(st.sampled_from(sorted(self.after)))
        members = sorted(self._flow(task_id, branch))
        before = self._hashes(members)
        ended = {i: h.get("reason", "") for i, h in before.items() if h["state"] in FINISHED[1:]}
        assert self.queue.retry_flow(task_id, branch=branch) == len(ended)
        after = self._hashes(sorted(ended))
        for member, reason in ended.items():
            state = after[member]["state"]
            allowed = ("pending", "waiting") if not branch else ("pending", "waiting", *FINISHED)
            assert state in allowed, (member, state)
            self.failed_dead.discard(member)
            self.cancel_acked.discard(member)
            self.replayed[reason] += 1

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        picked = self._pick(data)
        if picked is None:
            return
        pod, _ = picked
        items = list(self.held[pod].items())
        # What the pod still holds by the store (a lease taken back meanwhile is not): a
        # release gives back exactly those.
        still_held = 0
        for task_id, token in items:
            state, held_token, cancel = self.raw.hmget(
                self.queue.keys.task(task_id), "state", "token", "cancel_requested"
            )
            # one whose cancel was asked for ends cancelled instead: not released
            still_held += state == b"running" and held_token == token.encode() and not cancel
        released = self.brokers[pod].release(items)
        assert released == still_held
        self.held[pod].clear()

    # -- operator and time -----------------------------------------------------------

    @rule(pod=st.sampled_from(PODS))
    def requeue_pod(self, pod: str) -> None:
        self.queue.requeue_pod(pod)
        self.held[pod].clear()

    @rule()
    def sweep(self) -> None:
        self.queue.sweep()

    @rule()
    def let_leases_expire(self) -> None:
        time.sleep(LEASE_TTL_S * 1.2)  # advancing real time is the point of this rule


@pytest.mark.slow
def test_protocol_invariants_hold_under_random_interleavings(redis_url: str) -> None:
    ProtocolMachine.url = redis_url
    run_state_machine_as_test(
        ProtocolMachine,
        settings=settings(
            max_examples=12,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_a_task_handed_to_a_pod_with_no_worker_record_is_read_by_its_next_claim(
    redis_url: str,
) -> None:
    """A sequence the random run found: a pod registered idle, a producer hands it a task
    (positional: the pod's record does not say it reads tags), and the pod's next claim,
    with the smallest bound, returns it first among its tasks."""
    ProtocolMachine.url = redis_url
    machine = ProtocolMachine()
    try:
        machine.claim("pod-a", 1, idle=True)
        machine.enqueue(2, 0, None, None, None)
        assert machine._handed("pod-a") == 1
        machine.claim_with_the_smallest_bound("pod-a", 1)
        assert len(machine.held["pod-a"]) == 1
        assert set(machine.held["pod-a"]) <= machine.enqueued
        machine.every_task_is_in_exactly_one_state_and_none_is_lost()
    finally:
        machine.teardown()


def test_a_task_cancelled_while_handed_to_a_pod_is_delivered_once_and_its_run_stopped(
    redis_url: str,
) -> None:
    """A sequence the random run found: a pod registered idle, a producer hands it a task
    (the task runs for that pod from its enqueue), a cancel before the pod pops it answers
    "requested"; the pod gets the task once, learns of the cancel at its next heartbeat,
    and the run ends cancelled."""
    ProtocolMachine.url = redis_url
    machine = ProtocolMachine()
    try:
        machine.claim("pod-b", 1, idle=True)
        machine.enqueue(1, 0, None, 60, None)
        assert machine._handed("pod-b") == 1
        [task_id] = machine.enqueued
        assert machine.queue.cancel(task_id) is CancelOutcome.REQUESTED
        machine.cancel_acked.add(task_id)
        assert machine._in_a_hand_off(task_id)
        machine.cancelled_in_hand.add(task_id)
        machine.pop_a_hand_off("pod-b")
        assert set(machine.held["pod-b"]) == {task_id}
        reply = machine.brokers["pod-b"].beat(dict(machine.held["pod-b"]), draining=False)
        assert reply.cancelled == {task_id}
        token = machine.held["pod-b"].pop(task_id)
        [code] = machine.brokers["pod-b"].complete_many([(task_id, token, None)])
        assert code == 3  # ended cancelled, not done
        assert machine._hashes([task_id])[task_id]["state"] == "cancelled"
        machine.every_task_is_in_exactly_one_state_and_none_is_lost()
    finally:
        machine.teardown()
