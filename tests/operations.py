"""Every queue operation once, for tests that run them somewhere new (a cluster node)."""

from __future__ import annotations

from collections.abc import Callable

from taskfleet import Queue, QueueConfig, TaskState, chain
from taskfleet.protocol.control_ops import CancelOutcome, Report
from taskfleet.protocol.records import text

from tests.fixtures_redis import BlockingBroker


def run_every_operation(queue: Queue, make: Callable[[str, str], BlockingBroker]) -> None:
    queue.configure(QueueConfig(lease_ttl_s=5, max_attempts=2, backoff_base_s=0))
    ids = queue.enqueue_many([{"payload": {"i": i}, "deadline": 60} for i in range(4)])
    queue.enqueue({"later": True}, delay=60)
    worker = make("pod-a", "1")
    assert worker.register(4) == 0
    tasks = worker.claim(4).tasks
    assert len(tasks) == 4
    assert worker.heartbeat({t.id: t.token for t in tasks}) == set()
    assert worker.complete_many([(tasks[0].id, tasks[0].token, "1")]) == [True]
    assert worker.fail(tasks[1].id, tasks[1].token, "boom") is TaskState.DELAYED
    assert worker.release([(tasks[2].id, tasks[2].token)]) == 1
    assert queue.requeue_pod("pod-a") == 1
    queue.schedule("hourly", "0 * * * *", {"s": 1})
    assert queue.fire_due_schedules() == 0
    queue.sweep()
    assert queue.get(ids[0]).state is TaskState.DONE  # type: ignore[union-attr]
    # task control: reports, cancel (running and waiting), list, retry of a dead task, purge
    [running] = worker.claim(1).tasks
    report = Report(running.id, running.token, '{"fraction":0.5}', 2)
    assert worker.report([report]) == [True]
    assert queue.cancel(running.id) is CancelOutcome.REQUESTED
    assert worker.complete_many([(running.id, running.token, None)]) is not None
    [doomed] = worker.claim(1).tasks
    assert worker.fail(doomed.id, doomed.token, "no", retryable=False) is TaskState.DEAD
    assert [t.id for t in queue.list("dead").tasks] == [doomed.id]
    assert queue.retry([doomed.id]) == 1
    [later] = queue.list("delayed").tasks
    assert queue.cancel(later.id) is CancelOutcome.CANCELLED
    assert queue.purge_tasks("cancelled") >= 1
    assert queue.purge_tasks("done") == 1
    # a flow: its tasks and its record, its end counted
    flow = queue.enqueue_flow(chain({"payload": {"f": 1}}, {"payload": {"f": 2}}))
    for _ in flow.ids:
        held = worker.claim(4).tasks
        worker.complete_many([(t.id, t.token, None) for t in held])
    assert queue.stats()["flows_done"] == 1
    assert worker.deregister() == 0
    names = [text(k) for k in queue.client.scan_iter(match="*")]  # every node of a cluster
    assert len(names) > 10
    assert all(name.startswith(queue.keys.prefix) for name in names), names
    queue.purge()
    assert queue.client.dbsize() == 0
