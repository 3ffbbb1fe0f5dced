"""A document flow on a real cluster: one document split into 200 pages and merged, while
one busy pod is force-deleted and the worker of another is SIGKILLed mid-flow.

Two shapes of the same flow run side by side on one fleet: the fan-out a handler finds
while it runs (``split_pages`` adds 200 page children and a merge after them with
``taskfleet.add_children``), and the flow enqueued up front (``chain(split,
chord(group(200 pages), merge))``). A pod running pages of the up-front flow is
force-deleted, and the pod running the live split, once it added its children and some
are done but before it returned, is SIGKILLed (the run started again re-adds them). Both
must end with every page done once (or again only as often as the queue counted a
take-back or a stale completion), each merge run once having seen 200 results, and
nothing left waiting.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import redis
from taskfleet import Queue, chain, chord, group

from e2e.lib.fleet import Fleet
from e2e.lib.kube import CLUSTER_ERRORS, NodeShell
from e2e.lib.ledger import SAMPLE_HANDLER
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

PAGES = 200
PAGE_SECONDS = 0.5
#: The run-time split holds on this long after adding its children: its pod is killed then,
#: once some of its pages are done, so that the run started again re-adds done children too.
SPLIT_HOLD_SECONDS = 20
PAGES_DONE_BEFORE_KILL = 10
HANDLERS = {
    "split": "taskfleet.samples:split_pages",
    "page": SAMPLE_HANDLER,
    "merge": "taskfleet.samples:merge_pages",
}


def flow_ids(doc: str) -> list[str]:
    """The tasks of one document's flow: its split, its pages, its merge."""
    return [doc, *(f"{doc}-p{i}" for i in range(PAGES)), f"{doc}-merge"]


def enqueue_both(fleet: Fleet) -> None:
    """``live``: a split that adds its pages and merge while it runs; ``upfront``: the
    same flow stored in one call before anything runs."""
    record_key = fleet.queue.record_key
    page = {"seconds": PAGE_SECONDS, "record_key": record_key}

    def enqueue(_: redis.Redis) -> None:
        with Queue(fleet.queue.queue, fleet.forward.url) as queue:
            queue.enqueue(
                {
                    "doc": "live",
                    "pages": PAGES,
                    "seconds": PAGE_SECONDS,
                    "hold": SPLIT_HOLD_SECONDS,
                    "record_key": record_key,
                },
                task="split",
                task_id="live",
            )
            pages = group(
                *(
                    {"payload": page, "task": "page", "task_id": f"upfront-p{i}"}
                    for i in range(PAGES)
                )
            )
            merge = {
                "payload": {"record_key": record_key},
                "task": "merge",
                "task_id": "upfront-merge",
            }
            split = {"payload": {"seconds": 0.2, "record_key": record_key}, "task_id": "upfront"}
            queue.enqueue_flow(chain(split, chord(pages, merge)))

    fleet.forward.call(enqueue)


def queue_stats(fleet: Fleet) -> dict[str, int]:
    """The queue's own counts (``Queue.stats``: waiting included)."""

    def read(_: redis.Redis) -> dict[str, int]:
        with Queue(fleet.queue.queue, fleet.forward.url) as queue:
            return queue.stats()

    return fleet.forward.call(read)


def done_pages(fleet: Fleet, doc: str) -> int:
    """How many pages of ``doc`` are done now."""
    pages = flow_ids(doc)[1:-1]
    return len(fleet.queue.account(pages).done)


def sigkill_worker(fleet: Fleet, pod_name: str) -> None:
    """SIGKILL the worker container of ``pod_name`` from its node."""
    pod = fleet.kube.get("pod", pod_name)
    assert pod is not None, f"pod {pod_name} is gone"
    container_id = pod["status"]["containerStatuses"][0]["containerID"]
    # PID 1 ignores SIGKILL from inside its namespace: the node sends it.
    NodeShell.for_node(pod["spec"]["nodeName"]).kill_container(container_id)


def test_a_200_page_document_flow_ends_with_every_page_done_once_and_one_merge_through_a_force_delete_and_a_sigkill(  # noqa: E501
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = make_fleet("pages", replicas=3, concurrency=3, handlers=HANDLERS)
    fleet.wait_ready(3)
    started = time.monotonic()
    enqueue_both(fleet)

    # Which flow's pages run first is the queue's order of the moment: each disruption is
    # done as soon as its flow is where it should be, in whichever order that comes.
    # - force delete: a pod running pages of the up-front flow (not the live split's pod,
    #   kept for the SIGKILL);
    # - SIGKILL: the pod running the live split once it added its 201 children and some
    #   are done, before it returned.
    hit: dict[str, tuple[str, set[str], int]] = {}

    def upfront_victim() -> tuple[str, set[str]] | None:
        sigkilled = hit.get("kill", ("",))[0]
        for pod, count in fleet.queue.holders().most_common():
            held = fleet.queue.held_by(pod) if count and pod != sigkilled else set()
            if "live" not in held and any(t.startswith("upfront-p") for t in held):
                return pod, held
        return None

    def live_victim() -> tuple[str, set[str]] | None:
        split = fleet.queue.task("live")
        children = json.loads(split.get("after") or "[]")
        left = int(split.get("deps_left") or PAGES + 1)
        pod = split.get("pod")
        if (
            split.get("state") == "running"
            and pod
            and len(children) == PAGES + 1
            and left <= PAGES + 1 - PAGES_DONE_BEFORE_KILL
        ):
            return pod, fleet.queue.held_by(pod)
        return None

    def next_disruption() -> str | None:
        for name, victim in (("delete", upfront_victim), ("kill", live_victim)):
            if name not in hit and (found := victim()) is not None:
                pod, held = found
                if name == "delete":
                    fleet.kube.run("delete", "pod", pod, "--grace-period=0", "--force")
                else:
                    sigkill_worker(fleet, pod)
                doc = "upfront" if name == "delete" else "live"
                hit[name] = (pod, held, done_pages(fleet, doc))
                return name
        return None

    for _ in range(2):
        wait_for(
            next_disruption,
            timeout=60,
            interval=0.2,
            what=f"the next disruption (done: {sorted(hit)})",
            ignoring=CLUSTER_ERRORS,
        )
    deleted, held_by_deleted, upfront_done_then = hit["delete"]
    sigkilled, held_by_sigkilled, live_done_then = hit["kill"]
    # Each flow was hit mid-flow: pages of it still to run, so its merge not run yet.
    assert upfront_done_then < PAGES and live_done_then < PAGES, (
        upfront_done_then,
        live_done_then,
    )

    ids = flow_ids("live") + flow_ids("upfront")
    accounting = fleet.queue.wait_settled(ids, timeout=300)
    elapsed = time.monotonic() - started
    accounting.assert_nothing_lost()

    records = fleet.queue.executions()
    by_task: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_task.setdefault(record["id"], []).append(record)
    for doc in ("live", "upfront"):
        merges = by_task.get(f"{doc}-merge", [])
        assert len(merges) == 1, f"the {doc} merge ran {len(merges)} times: {merges}"
        assert merges[0]["saw"] == PAGES, f"the {doc} merge saw {merges[0]['saw']} of {PAGES}"
        merge = fleet.queue.task(f"{doc}-merge")
        assert json.loads(merge["after"]) == flow_ids(doc)[1:-1], f"{doc} merge waited for {merge}"

    # The killed run of the live split was taken back and run again; that run added the
    # same children (their ids are the document's), not a second set.
    split = fleet.queue.task("live")
    assert int(split.get("lost") or 0) >= 1, f"the SIGKILLed split was not counted lost: {split}"
    # Each child once: the run started again re-added children already finished, and
    # flow_adopt knows them by their link back.
    children = json.loads(split["after"])
    assert sorted(children) == sorted(flow_ids("live")[1:]), f"live split's children: {children}"
    assert json.loads(split["result"])["pages"] == PAGES, split
    assert "live" in held_by_sigkilled, held_by_sigkilled

    stats = queue_stats(fleet)
    assert (stats["waiting"], stats["pending"], stats["running"]) == (0, 0, 0), stats
    pages = [t for doc in ("live", "upfront") for t in flow_ids(doc)[1:-1]]
    rerun = sorted(t for t in pages if len(by_task.get(t, [])) > 1)
    lost = sum(accounting.lost[t] for t in ids)
    figures(
        f"2 x {PAGES}-page flows (run-time fan-out, up front), 3 pods x 3 slots, "
        f"{PAGE_SECONDS}s pages: all done {elapsed:.1f}s after enqueue; pages done at the "
        f"force delete {upfront_done_then} (up front), at the SIGKILL {live_done_then} (live)"
    )
    figures(
        f"flow disruption: force delete {deleted} (held {len(held_by_deleted)}), SIGKILL "
        f"{sigkilled} (held {len(held_by_sigkilled)}, the live split among them); "
        f"take-backs {lost}, pages run twice {len(rerun)}, stale {stats.get('stale', 0)}, "
        f"requeued {stats.get('requeued', 0)}; split children listed {len(children)} "
        f"for {PAGES + 1}"
    )
