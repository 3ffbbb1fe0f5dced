"""Provider quotas shared by queues in other hash slots of a real Redis Cluster
(docs/protocol.md 4.17, "Quotas in other slots"): queues on every master share one
quota and never exceed it together; a SIGKILLed worker's reservations return one lease
after its death, each charged once; a 429 met in one queue pauses the others."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from redis.crc import key_slot
from taskfleet import Queue, Quota
from taskfleet.protocol.connect import SyncClient, connect
from taskfleet.protocol.keys import QueueKeys, provider_quota_key
from taskfleet.protocol.provider_quota import QuotaUse
from taskfleet.protocol.replies import raw_claim
from taskfleet.protocol.scripts import Op, SyncScripts
from taskfleet.protocol.signatures import Claim
from taskfleet.worker.claimed import ClaimedTask, parse_claim_records

from tests.fixtures_redis_cluster import LocalRedisCluster
from tests.polling import wait_for
from tests.workers.harness import FAST, Fleet
from tests.workers.quota_handlers import GATE, STARTS

HANDLER = "tests.workers.quota_handlers:call"
EST = {"openai": {"requests": 1, "input_tokens": 300}}


@pytest.fixture
def client(redis_cluster: LocalRedisCluster) -> Iterator[SyncClient]:
    found = connect(redis_cluster.url)
    yield found
    found.close()


@pytest.fixture
def openai(redis_cluster: LocalRedisCluster) -> Iterator[Quota]:
    quota = Quota("openai", redis_url=redis_cluster.url)
    yield quota
    quota.close()


def _use(quota: Quota) -> QuotaUse:
    found = quota.get()
    assert found is not None
    return found


def _lease_until(queue: Queue, task_id: str) -> datetime:
    task = queue.get(task_id)
    assert task is not None and task.lease_until is not None
    return task.lease_until


def _starts(client: SyncClient) -> list[str]:
    return [s.decode() if isinstance(s, bytes) else s for s in client.lrange(STARTS, 0, -1)]


def _queues(cluster: LocalRedisCluster) -> list[Queue]:
    """A queue on each master (each in a slot other than the quota's)."""
    names = cluster.queue_names("pq")
    quota = key_slot(provider_quota_key("openai").encode())
    assert all(key_slot(QueueKeys(n).pending.encode()) != quota for n in names)
    return [Queue(n, redis_url=cluster.url) for n in names]


def _fleets(cluster: LocalRedisCluster, queues: list[Queue], tmp_path: Path) -> list[Fleet]:
    fleets = []
    for queue in queues:
        workdir = tmp_path / queue.name
        workdir.mkdir()
        fleets.append(Fleet(cluster.url, queue.name, workdir))
    return fleets


def test_three_queues_on_three_masters_share_one_quota_and_never_start_more_than_its_limit(
    redis_cluster: LocalRedisCluster, client: SyncClient, openai: Quota, tmp_path: Path
) -> None:
    openai.configure(limits={"requests": 5}, period_s=3600)
    queues = _queues(redis_cluster)
    fleets = _fleets(redis_cluster, queues, tmp_path)
    try:
        for i, fleet in enumerate(fleets):
            fleet.add(HANDLER, pod=f"pod-{i}").start()
        ids = {q.name: [q.enqueue({}, quotas=EST) for _ in range(4)] for q in queues}

        def waiting() -> int:
            return sum(1 for q in queues for t in q.list("delayed").tasks if t.id in ids[q.name])

        # every task left is held back by the quota, none started
        wait_for(lambda: len(_starts(client)) >= 5, timeout=20, what="5 starts")
        wait_for(lambda: waiting() == 7, timeout=20, what="7 tasks waiting for the quota")
        assert len(_starts(client)) == 5
        done = [q.get(i) for q in queues for i in ids[q.name]]
        assert sum(1 for t in done if t is not None and t.state == "done") == 5
        # the runs' reservations return in a call on the quota's slot after their ends
        wait_for(lambda: _use(openai).reserved == 0, timeout=10, what="the runs' ends")
        use = openai.get()
        assert use is not None and use.units["requests"].used == 5
        # a task its quota could not admit is not an attempt
        for q in queues:
            for t in q.list("delayed").tasks:
                assert t.attempts == 0
    finally:
        for fleet in fleets:
            fleet.close()


def test_a_killed_workers_reservations_return_after_one_lease_and_each_run_is_charged_once(
    redis_cluster: LocalRedisCluster, client: SyncClient, openai: Quota, tmp_path: Path
) -> None:
    openai.configure(limits={"requests": 10_000}, period_s=3600, max_concurrency=2)
    queue = _queues(redis_cluster)[0]
    fleet = _fleets(redis_cluster, [queue], tmp_path)[0]
    args = [*FAST, "--lease-ttl", "2", "--concurrency", "2"]
    try:
        worker = fleet.add(HANDLER, pod="pod-a", args=args).start()
        held = [queue.enqueue({"hold": True}, quotas=EST) for _ in range(2)]
        wait_for(lambda: len(_starts(client)) == 2, timeout=15, what="both holds")
        assert _use(openai).reserved == 2
        # held past the first expiry: the heartbeats push the reservations on with the leases
        first = _lease_until(queue, held[0])
        wait_for(
            lambda: _lease_until(queue, held[0]) > first + timedelta(seconds=2.5),
            timeout=15,
            what="a lease pushed on past the reservation's first expiry",
        )
        assert _use(openai).reserved == 2
        worker.signal(signal.SIGKILL)
        worker.wait()
        # the reservations outlive the worker until their expiry (one lease), then return
        wait_for(lambda: _use(openai).reserved == 0, timeout=15, what="return")
        use = openai.get()
        assert use is not None and use.units["requests"].used == 2  # charged once each
        client.rpush(GATE, "go", "go")
        fleet.add(HANDLER, pod="pod-b", args=args).start()
        finished = queue.wait(held, timeout=20)
        assert all(t.state == "done" for t in finished.values())
        # a run's reservation ends just after its outcome is written
        wait_for(lambda: _use(openai).reserved == 0, timeout=15, what="the runs' ends")
        use = openai.get()
        # each run taken back after the kill is a new provider call: one estimate more
        assert use is not None and use.units["requests"].used == 4
    finally:
        fleet.close()


def test_a_rate_limit_met_in_one_queue_pauses_the_quota_for_queues_on_other_masters(
    redis_cluster: LocalRedisCluster, client: SyncClient, openai: Quota, tmp_path: Path
) -> None:
    openai.configure(limits={"requests": 10_000}, period_s=60)
    queues = _queues(redis_cluster)
    fleets = _fleets(redis_cluster, queues, tmp_path)
    first, others = queues[0], queues[1:]
    try:
        for i, fleet in enumerate(fleets):
            fleet.add(HANDLER, pod=f"pod-{i}").start()
        limited = first.enqueue({"limited": 30}, quotas=EST)
        wait_for(lambda: f"{first.name}:{limited}" in _starts(client), timeout=15, what="429")
        wait_for(lambda: _use(openai).paused_until_ms > 0, timeout=10, what="pause")
        needing = {q.name: q.enqueue({}, quotas=EST) for q in others}
        plain = {q.name: q.enqueue({}) for q in others}
        for q in others:
            assert q.wait([plain[q.name]], timeout=15)[plain[q.name]].state == "done"
        wait_for(
            lambda: all(q.get(needing[q.name]).state == "delayed" for q in others),  # type: ignore[union-attr]
            timeout=10,
            what="tasks naming the quota held back",
        )
        assert not any(f"{q.name}:{needing[q.name]}" in _starts(client) for q in others)
        openai.resume()
        for q in others:
            assert q.wait([needing[q.name]], timeout=20)[needing[q.name]].state == "done"
        # Nothing leaked. Not at once: on a cluster a task's reservation returns in a call
        # on the quota's slot after its end, and the first queue's limited task runs again
        # (reserving) once its retry-after has passed.
        wait_for(
            lambda: _use(openai).reserved == 0,
            timeout=20,
            what=lambda: f"every reservation back: {_use(openai)}",
        )
    finally:
        for fleet in fleets:
            fleet.close()


def _claim(client: SyncClient, queue: Queue, base: str, *, quota_slots: bool) -> list[ClaimedTask]:
    keys = QueueKeys(queue.name)
    args = Claim("p1", "i1", 2, base, 100, "", "", "", 1 if quota_slots else "")
    op = Op("claim", keys.script("claim"), args, lambda raw: raw_claim(raw, "claim"))
    tasks, bad = parse_claim_records(SyncScripts.for_client(client).run(op).records)
    assert bad == []
    return tasks


def test_a_claim_that_does_not_reserve_on_quota_slots_leaves_such_a_task_delayed_not_run(
    redis_cluster: LocalRedisCluster, client: SyncClient, openai: Quota
) -> None:
    # the claim of a client that does not reserve on a quota's slot
    openai.configure(limits={"requests": 10}, period_s=3600)
    queue = _queues(redis_cluster)[0]
    needing, plain = queue.enqueue({}, quotas=EST), queue.enqueue({})
    tasks = _claim(client, queue, "theirs", quota_slots=False)
    assert [t.id for t in tasks] == [plain] and tasks[0].quotas is None
    task = queue.get(needing)
    assert task is not None and task.state == "delayed" and task.attempts == 0
    assert _use(openai).units["requests"].used == 0
    # once due, a claim that reserves on the quota's slot is handed it with its estimate
    got: list[ClaimedTask] = []

    def handed() -> bool:
        got.extend(_claim(client, queue, f"ours{len(got)}", quota_slots=True))
        return bool(got)

    wait_for(handed, timeout=15, what="the task handed over with its estimate")
    assert [t.id for t in got] == [needing] and got[0].quotas is not None
    assert json.loads(got[0].quotas) == EST


NODE_CLI = Path(__file__).resolve().parents[2] / "clients/node/dist/src/taskfleet-node.js"


@pytest.mark.node_build  # make node-check runs it, after the Node client's build
def test_a_node_fleet_and_a_python_fleet_on_two_masters_share_one_quota_within_its_limit(
    redis_cluster: LocalRedisCluster, openai: Quota, tmp_path: Path
) -> None:
    assert NODE_CLI.exists(), "build the Node client first: cd clients/node && npm run build"
    openai.configure(limits={"requests": 4}, period_s=3600)
    node_q, python_q = _queues(redis_cluster)[:2]
    node_fleet, python_fleet = _fleets(redis_cluster, [node_q, python_q], tmp_path)
    handler = tmp_path / "handlers.mjs"
    handler.write_text("export async function call() {\n  return 'ok';\n}\n")
    try:
        node_fleet.add(
            f"{handler}:call", pod="pod-node", program=["node", str(NODE_CLI)], args=[]
        ).start()
        # the Node worker alone first: it reserves on the quota's slot
        first = [node_q.enqueue({}, quotas=EST) for _ in range(2)]
        assert all(t.state == "done" for t in node_q.wait(first, timeout=30).values())
        assert _use(openai).units["requests"].used == 2
        python_fleet.add(HANDLER, pod="pod-python").start()
        ids = {q.name: [q.enqueue({}, quotas=EST) for _ in range(3)] for q in (node_q, python_q)}

        def states() -> list[str]:
            return [
                t.state
                for q in (node_q, python_q)
                for i in ids[q.name]
                if (t := q.get(i)) is not None
            ]

        # two more fit the limit, from either language; the four others wait
        wait_for(lambda: states().count("done") == 2, timeout=30, what="2 more tasks done")
        wait_for(lambda: states().count("delayed") == 4, timeout=20, what="4 held back")
        assert states().count("done") == 2
        use = _use(openai)
        assert use.units["requests"].used == 4 and use.reserved == 0
    finally:
        node_fleet.close()
        python_fleet.close()
