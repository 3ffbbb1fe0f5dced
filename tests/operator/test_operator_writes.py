"""What the operator writes to a TaskQueue to handle it, against a real kube-apiserver:
each write is a request and a watch event per TaskQueue, and a burst of creations pays
them a thousand times (bench/journal/2026-11-27-operator-burst-requests.md)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from kubernetes import watch

from tests.fixtures_cluster import Cluster
from tests.fixtures_operator import APISERVER_TIMEOUT_S, GROUP, PLURAL, VERSION, base_spec

pytestmark = pytest.mark.apiserver


def _object_part(body: dict[str, Any]) -> dict[str, Any]:
    """What a write of the object (not of its status subresource) changes."""
    meta = {
        k: v
        for k, v in body["metadata"].items()
        if k not in ("resourceVersion", "managedFields", "generation")
    }
    return {"metadata": meta, "spec": body["spec"]}


def test_a_new_taskqueue_is_handled_with_one_write_of_it_and_one_of_its_status(
    cluster: Cluster, redis_url: str
) -> None:
    created = cluster.create_tq("writes", base_spec(redis_url))
    seen = [created]
    stream = watch.Watch()
    try:
        for event in stream.stream(
            cluster.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            cluster.namespace,
            PLURAL,
            field_selector="metadata.name=writes",
            resource_version=created["metadata"]["resourceVersion"],
            timeout_seconds=int(APISERVER_TIMEOUT_S),
        ):
            seen.append(event["object"])
            if "observedGeneration" in event["object"].get("status", {}):
                break
    finally:
        stream.stop()
    handled = seen[-1]["status"]
    assert handled.get("observedGeneration") == created["metadata"]["generation"], seen

    object_writes = [
        after
        for before, after in itertools.pairwise(seen)
        if _object_part(before) != _object_part(after)
    ]
    # No write of the object: a Retain queue needs no finalizer (no daemon sweeps it).
    # The spec kopf handled is recorded in the same status write as the handler's fields,
    # not in an annotation of its own.
    assert object_writes == []
    assert not any(
        key.startswith("taskfleet.dev/")
        for body in seen
        for key in body["metadata"].get("annotations", {})
    )
    record = json.loads(handled["kopf"]["last-handled-configuration"])
    assert record["spec"]["redis"] == {"url": redis_url}
    assert "progress" not in handled["kopf"]
