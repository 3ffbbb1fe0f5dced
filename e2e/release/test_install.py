"""A release installed from its artefacts only: the images loaded from its OCI archives, the
operator from its chart package, the workers from its worker image. Tasks run; then
``helm uninstall`` takes the operator and nothing else.

Two releases of the same chart package serve one namespace each, as the documented sharding
does: ``main``, the one under test, and ``other``, another kopf operator on the cluster,
meeting in its own peering object. Uninstalling ``main`` must leave both CRDs (so every
TaskQueue and its fleet), both peering objects, the other operator at work, and every byte
of main's queue in Redis; installing ``main`` again serves the queue it left.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S
from e2e.release.artefacts import Release, crd_uids, peering_uid
from e2e.release.stage import Stage, fleet, install, queue_data
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]
#: Minutes of work on a busy 2-core node, session fixtures (image imports, a venv) included.
pytestmark = pytest.mark.timeout(1800)


def test_a_release_installs_from_its_artefacts_runs_tasks_and_its_uninstall_keeps_crds_peerings_other_operators_and_redis_data(  # noqa: E501
    current: Release, stage: Stage, figures: Callable[[str], None]
) -> None:
    main_ns, other_ns = stage.namespace("main"), stage.namespace("other")
    forward = stage.redis(main_ns)
    main, other = stage.install(main_ns, "main"), stage.install(other_ns, "other")
    install(main, current, main_ns)
    install(other, current, other_ns)
    assert main.operator_images() == {current.images["operator"].ref}

    # Each operator serves its namespace's queue; both queues live in main's Redis.
    work = fleet(main_ns, forward, "work", current, replicas=2, onDelete="Purge")
    elsewhere = fleet(other_ns, forward, "elsewhere", current, replicas=1)
    work.wait_ready(2)
    elsewhere.wait_ready(1)
    done = work.queue.enqueue_sleepers(12, seconds=0.5)
    work.queue.wait_settled(done, timeout=180).assert_nothing_lost()
    assert sorted(r["id"] for r in work.queue.executions()) == sorted(done), "a task ran twice"
    first = elsewhere.queue.enqueue_sleepers(4, seconds=0.5)
    elsewhere.queue.wait_settled(first, timeout=180).assert_nothing_lost()
    ran_on = {r["pod"] for r in work.queue.executions()}
    assert all(p.startswith(f"{work.deployment()['metadata']['name']}-") for p in ran_on)

    # Tasks that wait across the uninstall: the fleet scaled to zero first.
    work.scale(0)
    wait_for(
        lambda: not work.pods(),
        timeout=180,
        interval=CLUSTER_INTERVAL_S,
        what="the fleet's pods to stop",
        ignoring=CLUSTER_ERRORS,
    )
    pending = work.queue.enqueue_sleepers(5, seconds=0.5)
    crds = crd_uids()
    peerings = {name: peering_uid(name) for name in (main.fullname, other.fullname)}
    assert all(peerings.values()), f"each release's replicas meet in their peering: {peerings}"
    before = queue_data(work, done + pending)
    other_pods = other.kube.run("get", "pods", "-o", "name").stdout.split()

    main.uninstall()

    assert main.kube.get("deployment", main.deployment) is None
    assert crd_uids() == crds, "a CRD was deleted (or replaced) by the uninstall"
    assert {name: peering_uid(name) for name in peerings} == peerings
    assert work.taskqueue()["metadata"].get("deletionTimestamp") is None
    assert work.deployment()["metadata"].get("deletionTimestamp") is None
    assert queue_data(work, done + pending) == before
    # The other kopf operator did not notice: the same pods, and its queue still served.
    assert other.kube.run("get", "pods", "-o", "name").stdout.split() == other_pods
    other.wait_ready(2)
    again = elsewhere.queue.enqueue_sleepers(4, seconds=0.5)
    elsewhere.queue.wait_settled(again, timeout=180).assert_nothing_lost()

    # Installed again from the same package: the kept TaskQueue is served where it was left.
    install(main, current, main_ns)
    work.scale(1)
    work.queue.wait_settled(pending, timeout=240).assert_nothing_lost()
    figures(
        f"release {current.version} from its artefacts: {len(done) + len(pending)} tasks on "
        f"{len(ran_on)} pods, uninstall and reinstall kept the queue"
    )
