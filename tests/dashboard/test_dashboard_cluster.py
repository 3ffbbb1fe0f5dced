"""The dashboard on a real Redis Cluster, through one ``?cluster=true`` URL: queues on
every master found, and each one's pages (the queue, a state paged, a task, its workers)
and an action served from the node that holds it."""

from __future__ import annotations

import re

from taskfleet.dashboard.sampler import Sampler
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.queue import Queue
from taskfleet.protocol.connect import connect
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.reads import QueueReads

from tests.dashboard_server import serve
from tests.fixtures_redis import MakeBroker
from tests.fixtures_redis_cluster import LocalRedisCluster
from tests.polling import wait_for

TOKEN = "cluster-dashboard-token-0123456789"


def test_pages_and_actions_work_for_queues_on_every_master(
    redis_cluster: LocalRedisCluster, make_broker: MakeBroker
) -> None:
    names = redis_cluster.queue_names()
    masters = {redis_cluster.master_of(QueueKeys(n).stats).port for n in names}
    assert len(masters) == len(redis_cluster.masters()) > 1
    dead: dict[str, str] = {}
    for name in names:
        with Queue(name, redis_url=redis_cluster.url) as queue:
            for i in range(12):
                queue.enqueue({"i": i, "queue": name})
            dead_id = queue.enqueue({"doomed": name}, priority=100, max_attempts=1)
            broker = make_broker(name, f"pod-{name}", "inc-1", url=redis_cluster.url)
            broker.register(2)
            (claimed,) = broker.claim(1).tasks
            assert broker.fail(claimed.id, claimed.token, f"KeyError: {name}") == "dead"
            dead[name] = dead_id

    # the sampler reads each queue's counters on the clock of the node that holds it
    sampler = Sampler(
        connect(redis_cluster.url), tuple(names), sample_s=1, history_s=60, discover_s=60
    )
    sampler.sample_now()
    for name in names:
        (sample,) = sampler.samples(name)
        assert sample.counters["failed"] == 1 and sample.at_ms > 0

    settings = DashboardSettings(
        redis_url=redis_cluster.url,
        sample_s=0.05,
        discover_s=0.05,
        page_size=5,
        read_only=False,
        token=TOKEN,
    )
    with serve(settings) as served:
        # discovery scans every master: each queue listed, with its depths
        def all_listed() -> str | None:
            body = served.get("/").body
            return body if all(f"/queues/{n}" in body for n in names) else None

        wait_for(all_listed, timeout=10, what="every queue of every master listed")

        login = served.post("/login", [("token", TOKEN)], {"Sec-Fetch-Site": "same-origin"})
        assert login.status == 303
        session = {"Cookie": login.headers["set-cookie"].split(";", 1)[0]}
        session["Sec-Fetch-Site"] = "same-origin"

        for name in names:
            page = served.get(f"/queues/{name}")
            assert page.status == 200 and dead[name] in page.body
            second = served.get(f"/queues/{name}/tasks/pending?page=2")
            assert second.status == 200
            assert "12 tasks; page 2 of 3" in re.sub(r"\s+", " ", second.body)
            assert len(re.findall(r'/tasks/id/[^"]+">', second.body)) == 5
            task = served.get(f"/queues/{name}/tasks/id/{dead[name]}")
            assert task.status == 200 and f"KeyError: {name}" in task.body
            workers = served.get(f"/queues/{name}/workers")
            assert workers.status == 200 and f"pod-{name}" in workers.body

            csrf = re.search(r'name="csrf" value="([^"]+)"', task.body)
            assert csrf is None  # no session yet on that request
            logged = served.get(f"/queues/{name}/tasks/id/{dead[name]}", session).body
            token = re.search(r'name="csrf" value="([^"]+)"', logged)
            assert token is not None
            form = [("csrf", token.group(1)), ("action", "retry"), ("state", "dead")]
            form += [("id", dead[name]), ("confirm", "1")]
            done = served.post(f"/queues/{name}/actions", form, session)
            assert done.status == 200 and "1 of 1 sent back to pending" in done.body
            with Queue(name, redis_url=redis_cluster.url) as queue:
                found = queue.get(dead[name])
                assert found is not None and found.state.value == "pending"


def test_groups_and_a_flow_tree_are_read_from_the_master_that_holds_their_queue(
    redis_cluster: LocalRedisCluster,
) -> None:
    from taskfleet.producer import overview
    from taskfleet.producer.flowtree import flow_tree

    client = connect(redis_cluster.url)
    try:
        for name in redis_cluster.queue_names("g"):
            with Queue(name, redis_url=redis_cluster.url) as queue:
                for size, group in ((3, "a"), (1, "b")):
                    queue.enqueue_many([{"payload": {}, "group": group}] * size)
                first = queue.enqueue({}, task_id="first")
                queue.enqueue({}, after=[first], task_id="then")
            view = overview.read(client, name)
            assert [(r.group, r.pending) for r in view.groups.shown] == [("a", 3), ("b", 1)]
            assert view.counts["waiting"] == 1
            tree = flow_tree(client, QueueReads(QueueKeys(name)), "first")
            assert [(n.id, n.state) for n in tree.dependants] == [("then", "waiting")]
    finally:
        client.close()
