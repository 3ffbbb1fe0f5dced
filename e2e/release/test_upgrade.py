"""An upgrade from the previous release (release/previous.env) to the one under test, with
tasks in flight, and every mixture of versions docs/compatibility.md promises.

The previous release is installed from its own artefacts (its CRDs, chart package and
images). Two autoscaled queues run long tasks, plain and grouped, while two producers
enqueue into each throughout: this suite's library (the new release's) and the previous
release's, from its wheel in a throwaway venv. Then, as docs/upgrade.md says, but in both
orders the promise allows: the ``workers-first`` queue gets the new worker image under the
old operator; the CRDs and the operator are upgraded (``helm upgrade`` to the new chart
package, its image by digest); the ``operator-first`` queue gets the new worker image under
the new operator. So every combination of old and new producer, workers and operator runs,
old and new workers share each queue while it rolls (the previous release's level and this
one's registered on the queue at once, and tasks run on both images), and the accounting
covers every task:

- none lost: every enqueued id is done (none dead, none pending);
- none run twice at once: the handler's own record of each finished execution shows no two
  of one task overlapping, and no more executions than the queue counted as stale;
- no fleet scaled to zero: every version of each worker Deployment the API showed, from the
  first task to the last roll, asks for at least one pod.

Then the release is uninstalled as in test_install: CRDs, peering object, TaskQueues and
the queues' Redis data stay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from taskfleet.protocol.records import WORKER_LEVEL

from e2e.lib.fleet import Fleet
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, Kube, PodWatch, is_ready
from e2e.release.artefacts import Release, crd_uids, peering_uid
from e2e.release.load import (
    LevelsWatch,
    LibraryProducer,
    Load,
    ProcessProducer,
    ReplicasWatch,
    overlaps,
)
from e2e.release.stage import Stage, fleet, install, queue_data
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]
#: Minutes of work on a busy 2-core node, session fixtures (image imports, a venv) included.
pytestmark = pytest.mark.timeout(3600)

#: Long tasks: each spans several of the operator's sweeps and worker heartbeats, so a
#: rolling pod always holds some when it is told to stop.
TASK_S = 4.0
#: One task per producer per tick: two producers keep about 4 of a queue's slots busy.
TICK_S = 2.0
#: Tasks each queue finishes between two steps: the next step starts under load.
PROGRESS = 4
#: A drain waits for tasks up to this long: every task of TASK_S finishes in its pod.
LONG = {"maxTaskDurationSeconds": 60}
AUTOSCALE = {"minReplicas": 0, "maxReplicas": 3, "scaleDownStabilizationSeconds": 30}


def wait_progress(fleets: list[Fleet], loads: list[Load], what: str) -> None:
    """Each queue finishes ``PROGRESS`` more tasks (a load that stopped fails at once)."""
    for one in fleets:
        target = int(one.queue.stats().get("done", 0)) + PROGRESS

        def reached(one: Fleet = one, target: int = target) -> bool:
            for load in loads:
                load.check()
            return one.queue.stats().get("done", 0) >= target

        wait_for(
            reached,
            timeout=300,
            interval=1,
            what=f"{PROGRESS} more tasks done on {one.name} {what}",
            ignoring=CLUSTER_ERRORS,
        )


def roll_workers(one: Fleet, image: str) -> None:
    """The TaskQueue's worker image changed, and its fleet rolled to it: every pod runs it."""
    one.kube.patch_merge("taskqueue", one.name, {"spec": {"image": image}})

    def rolled() -> bool:
        deployment = one.deployment()
        status = deployment.get("status") or {}
        if [c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]] != [image]:
            return False
        if status.get("observedGeneration", 0) < deployment["metadata"]["generation"]:
            return False
        pods = one.pods()
        return bool(pods) and all(
            is_ready(p) and [c["image"] for c in p["spec"]["containers"]] == [image] for p in pods
        )

    wait_for(
        rolled,
        timeout=600,
        interval=CLUSTER_INTERVAL_S,
        what=f"{one.name} to roll to {image}",
        ignoring=CLUSTER_ERRORS,
    )


def images_by_pod(watch: PodWatch) -> dict[str, str]:
    return {
        v["metadata"]["name"]: v["spec"]["containers"][0]["image"] for v in list(watch.versions)
    }


def test_an_upgrade_from_the_previous_release_under_load_loses_no_task_runs_none_twice_at_once_and_never_scales_a_fleet_to_zero(  # noqa: E501
    previous: Release,
    current: Release,
    previous_python: Path,
    stage: Stage,
    figures: Callable[[str], None],
) -> None:
    ns = stage.namespace("up")
    forward = stage.redis(ns)
    tf = stage.install(ns, "tf")
    # The previous release as its install guide had it: its CRDs (forced over whatever
    # this cluster holds, a newer schema included), then its chart package.
    with previous.crds() as crds:
        Kube().run("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    install(tf, previous, ns)
    assert tf.operator_images() == {previous.images["operator"].ref}

    old_worker, new_worker = previous.images["worker"].ref, current.images["worker"].ref
    fleets = {
        name: fleet(ns, forward, name, previous, concurrency=2, autoscale=AUTOSCALE, **LONG)
        for name in ("operator-first", "workers-first")
    }
    watches = {n: ReplicasWatch(ns, f.deployment()["metadata"]["name"]) for n, f in fleets.items()}
    pods = {name: PodWatch(ns, selector=f.selector) for name, f in fleets.items()}
    levels = {name: LevelsWatch(f.queue) for name, f in fleets.items()}
    loads: dict[str, Load] = {}
    old_producers: list[ProcessProducer] = []
    try:
        for name, one in fleets.items():
            old = ProcessProducer(f"v{previous.version}", previous_python, forward, one.queue.queue)
            new = LibraryProducer(f"v{current.version}", forward, one.queue.queue)
            old_producers.append(old)
            loads[name] = Load(
                [old, new], seconds=TASK_S, interval=TICK_S, record_key=one.queue.record_key
            )
            loads[name].start()
        everyone = list(fleets.values())
        wait_progress(everyone, list(loads.values()), "under the previous release")
        start = time.monotonic()

        # Workers first: the new worker image under the previous operator.
        roll_workers(fleets["workers-first"], new_worker)
        wait_progress(everyone, list(loads.values()), "with workers-first on the new workers")

        # The operator: the new CRDs first, then the chart (docs/upgrade.md, steps 1 and 2).
        with current.crds() as crds:
            Kube().run("apply", "--server-side", "--force-conflicts", "-f", str(crds))
        tf.upgrade(current, {"image": current.image_values(by_digest=True)})
        assert tf.operator_images() == {current.images["operator"].pinned}
        wait_progress(everyone, list(loads.values()), "under the new operator")

        # Then the other queue's workers (docs/upgrade.md, step 3).
        roll_workers(fleets["operator-first"], new_worker)
        wait_progress(everyone, list(loads.values()), "with every part upgraded")
        end = time.monotonic()
        for load in loads.values():
            load.check()
    finally:
        enqueued = {name: load.stop() for name, load in loads.items()}
        for watch in watches.values():
            watch.stop()
        for pod_watch in pods.values():
            pod_watch.stop()
        for levels_watch in levels.values():
            levels_watch.stop()

    for old in old_producers:
        assert old.versions == {previous.version}, f"the previous producer was {old.versions}"
    for name, one in fleets.items():
        ids = enqueued[name]
        accounting = one.queue.wait_settled(ids, timeout=600)
        accounting.assert_nothing_lost()
        executions = one.queue.executions()
        assert not overlaps(executions, TASK_S), f"{name}: tasks ran twice at once"
        during = [s for s in watches[name].since(start) if s.at <= end]
        assert during and min(s.replicas for s in during) >= 1, (
            f"{name}'s fleet was scaled to zero during the upgrade: {during}"
        )
        ran = {images_by_pod(pods[name]).get(str(r["pod"])) for r in executions}
        assert {old_worker, new_worker} <= ran, f"{name}: tasks ran on {ran}"
        # The previous release's workers record level 2 (none before 0.2), this one's its own.
        previous_level = 2 if previous.version.startswith("0.2.") else 1
        seen = levels[name]
        assert seen.levels == {previous_level, WORKER_LEVEL}, f"{name}: levels {seen.levels}"
        assert seen.mixed, f"{name}: no level-{previous_level} and level-{WORKER_LEVEL} at once"
        grouped = [i for i in ids if i in loads[name].grouped]
        assert grouped and len(grouped) < len(ids), f"{name}: {len(grouped)} of {len(ids)} grouped"
        by_producer = {p: sum(i.startswith(f"{p}-") for i in ids) for p in loads[name].ids}
        figures(
            f"upgrade {previous.version} -> {current.version}, {name}: {len(ids)} tasks of "
            f"{TASK_S:g} s ({by_producer}, {len(grouped)} grouped) all done once, levels "
            f"{sorted(seen.levels)} registered together in {sum(seen.mixed.values())} reads, "
            f"fleet between "
            f"{min(s.replicas for s in during)} and {max(s.replicas for s in during)} pods "
            f"(fewest ready {min(s.ready for s in during)}), "
            f"stale={accounting.stats.get('stale', 0)}"
        )

    # Uninstall, as in test_install: the fleets idle at zero first, so Redis holds still.
    for one in fleets.values():

        def idle(one: Fleet = one) -> bool:
            return one.deployment()["spec"]["replicas"] == 0 and not one.pods()

        wait_for(
            idle,
            timeout=300,
            interval=CLUSTER_INTERVAL_S,
            what=f"{one.name} back to zero pods after the work",
            ignoring=CLUSTER_ERRORS,
        )
    crds_before = crd_uids()
    peering = peering_uid(tf.fullname)
    assert peering is not None
    before: dict[str, Any] = {n: queue_data(f, enqueued[n]) for n, f in fleets.items()}
    tf.uninstall()
    assert tf.kube.get("deployment", tf.deployment) is None
    assert crd_uids() == crds_before
    assert peering_uid(tf.fullname) == peering
    for name, one in fleets.items():
        assert one.taskqueue()["metadata"].get("deletionTimestamp") is None
        assert queue_data(one, enqueued[name]) == before[name]
