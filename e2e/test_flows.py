"""A flow on the cluster: one document, then 200 pages side by side, then one merge, with
one worker pod force-deleted and another SIGKILLed while the pages run. Every page ends
done (extra runs only those the queue counted), and the merge runs once."""

from __future__ import annotations

import time
from collections.abc import Callable

from e2e.lib.fleet import Fleet
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, NodeShell
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

PAGES = 200


def _busy_pod(fleet: Fleet, avoid: set[str]) -> str:
    def probe() -> str | None:
        for pod, count in fleet.queue.holders().most_common():
            if count >= 2 and pod not in avoid:
                return pod
        return None

    return wait_for(
        probe,
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what="a pod holding 2 pages",
        ignoring=CLUSTER_ERRORS,
    )


def test_a_document_pages_merge_flow_survives_killed_pods(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = make_fleet("flow", replicas=3, concurrency=4)
    fleet.wait_ready(3)
    view = fleet.queue
    payload = {"seconds": 1, "record_key": view.record_key}

    def enqueue(_: object) -> list[str]:
        from taskfleet import Queue, chain, chord, group

        pages = group(*({"payload": payload, "task_id": f"page-{i}"} for i in range(PAGES)))
        with Queue(view.queue, fleet.forward.url) as queue:
            flow = queue.enqueue_flow(
                chain(
                    {"payload": payload, "task_id": "document"},
                    chord(pages, {"payload": payload, "task_id": "merge"}),
                )
            )
        return flow.ids

    ids = fleet.forward.call(enqueue)
    assert len(ids) == PAGES + 2
    started = time.monotonic()

    forced = _busy_pod(fleet, set())
    fleet.kube.run("delete", "pod", forced, "--grace-period=0", "--force")
    killed = _busy_pod(fleet, {forced})
    pod = fleet.kube.get("pod", killed)
    assert pod is not None
    status = pod["status"]["containerStatuses"][0]
    # PID 1 ignores SIGKILL from inside its namespace: the node sends it.
    NodeShell.for_node(pod["spec"]["nodeName"]).kill_container(status["containerID"])
    merge = view.task("merge")
    assert merge.get("state") == "waiting", merge  # the pages were running at both kills

    accounting = view.wait_settled(ids, timeout=300)
    accounting.assert_nothing_lost()
    assert accounting.done == set(ids)
    assert accounting.executions["merge"] == 1, accounting.executions["merge"]
    merged = view.task("merge")
    ended = [int(view.task(f"page-{i}")["finished_at"]) for i in range(PAGES)]
    assert int(merged["started_at"]) >= max(ended), "the merge started before a page was done"
    extra = sum(accounting.executions.values()) - len(ids)
    figures(
        f"flow 1 -> {PAGES} -> 1 with a pod force-deleted and one SIGKILLed: done in "
        f"{time.monotonic() - started:.0f}s, {extra} page runs again after take-backs "
        f"(stale {accounting.stats.get('stale', 0)}), merge ran once"
    )
