"""The committed CRD is exactly what the models generate, and it is structural."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from taskfleet_operator import builders, crdgen
from taskfleet_operator.models import TaskQueueSpec

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "crds" / crdgen.FILENAME


def walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    if not isinstance(node, dict):
        return
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def openapi_schema() -> dict[str, Any]:
    schema: dict[str, Any] = crdgen.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crd_matches_the_models() -> None:
    assert COMMITTED.read_text() == crdgen.render(), "crds/ drifted: run `make crds`"


def test_check_mode_fails_on_drift_and_passes_when_current(tmp_path: Path) -> None:
    assert crdgen.main(["--write", str(tmp_path)]) == 0
    assert crdgen.main(["--check", str(tmp_path)]) == 0

    (tmp_path / crdgen.FILENAME).write_text(crdgen.render().replace("maxItems: 50", "maxItems: 5"))
    assert crdgen.main(["--check", str(tmp_path)]) == 1


def test_schema_is_structural() -> None:
    for path, node in walk(openapi_schema()):
        assert "$ref" not in node, path
        assert "anyOf" not in node and "oneOf" not in node, path
        assert node.get("additionalProperties") is not False, path
        assert "title" not in node, path
        if path:
            typed = (
                "type" in node
                or node.get("x-kubernetes-preserve-unknown-fields")
                or node.get("x-kubernetes-int-or-string")
            )
            assert typed, f"{path} has no type"


def test_optional_fields_are_nullable_and_names_are_camel_case() -> None:
    spec = openapi_schema()["properties"]["spec"]["properties"]

    assert spec["rateLimit"]["nullable"] is True
    assert spec["autoscale"]["nullable"] is True
    assert spec["redis"]["properties"]["secretRef"]["nullable"] is True
    for path, _node in walk(openapi_schema()):
        assert "_" not in path.rsplit(".", 1)[-1], path


def test_every_string_and_list_is_bounded() -> None:
    for path, node in walk(openapi_schema()):
        if path.startswith((".status", ".apiVersion", ".kind")):
            continue
        if node.get("type") == "string" and "enum" not in node:
            assert "maxLength" in node, path
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if node.get("type") == "integer" or node.get("type") == "number":
            assert "minimum" in node and "maximum" in node, path


def test_scale_subresource_and_printer_columns_serve_kubectl() -> None:
    version = crdgen.build_crd()["spec"]["versions"][0]

    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert version["subresources"]["status"] == {}
    columns = [column["name"] for column in version["additionalPrinterColumns"]]
    assert columns == ["Replicas", "Desired", "Ready", "Pending", "Running", "Dead", "Age"]


def test_nested_objects_default_so_their_children_default_too() -> None:
    spec = openapi_schema()["properties"]["spec"]["properties"]

    assert spec["heartbeat"]["default"] == {"intervalSeconds": 5, "ttlSeconds": 30}
    assert spec["backoff"]["default"] == {"baseSeconds": 1.0, "maxSeconds": 300.0}
    assert spec["retention"]["default"] == {"doneSeconds": 3600, "deadSeconds": 259200}
    assert spec["heartbeat"]["properties"]["ttlSeconds"]["default"] == 30
    assert spec["replicas"]["default"] == 1
    assert spec["onDelete"]["enum"] == ["Retain", "Purge"]


def test_fields_new_in_this_minor_write_no_default_into_stored_taskqueues() -> None:
    # The apiserver applies a default to every stored object it serves; the previous
    # operator's model refuses unknown fields, so it would refuse every TaskQueue while the
    # CRD is upgraded ahead of it (docs/upgrade.md: CRDs first).
    spec = openapi_schema()["properties"]["spec"]["properties"]
    for name in ("runtime", "throttle", "budget", "groups"):
        assert "default" not in spec[name], name
    base = {"image": "w:1", "handler": "a:b", "redis": {"url": "redis://r:6379/0"}}
    unset = builders.queue_config(TaskQueueSpec.model_validate(base))
    assert (unset.throttle_base_s, unset.throttle_max_s) == (1.0, 300.0)  # the library's
    throttle = {"throttle": {"baseSeconds": 2, "maxSeconds": 30}}
    config = builders.queue_config(TaskQueueSpec.model_validate(base | throttle))
    assert (config.throttle_base_s, config.throttle_max_s) == (2.0, 30.0)


def test_crd_file_is_one_valid_yaml_document() -> None:
    documents = list(yaml.safe_load_all(COMMITTED.read_text()))

    assert len(documents) == 1
    assert documents[0]["metadata"]["name"] == "taskqueues.taskfleet.dev"


def test_autoscale_says_it_owns_the_replicas_and_requires_only_max_replicas() -> None:
    spec = openapi_schema()["properties"]["spec"]["properties"]
    autoscale = spec["autoscale"]

    assert "spec.replicas (what kubectl scale writes) is ignored" in autoscale["description"]
    assert "ignored when autoscale is set" in spec["replicas"]["description"]
    assert autoscale["required"] == ["maxReplicas"]
    assert "default" not in autoscale  # no autoscale unless asked for
    defaults = {name: node.get("default") for name, node in autoscale["properties"].items()}
    assert defaults == {
        "minReplicas": 1,
        "maxReplicas": None,
        "targetUtilizationPercent": 100,
        "scaleDownStabilizationSeconds": 60,
        "dueHorizonSeconds": 5,
    }
    status = openapi_schema()["properties"]["status"]["properties"]
    assert status["desiredReplicas"]["type"] == "integer"
    assert status["scalingReason"]["type"] == "string"


def test_every_field_of_the_pod_template_and_the_guard_is_described_for_kubectl_explain() -> None:
    spec = openapi_schema()["properties"]["spec"]["properties"]
    undescribed = [
        f"spec.{name}{path}"
        for name in ("template", "disruptionGuard")
        for path, node in walk(spec[name])
        # a field's description covers its items and values (kubectl explain shows fields)
        if not node.get("description") and not path.endswith(("[]", "{}"))
    ]

    assert not undescribed, f"no description for kubectl explain: {undescribed}"


def test_group_limits_have_the_bounds_of_the_same_limits_set_at_run_time() -> None:
    """spec.groups and `taskfleet group` / Queue.set_group bound a group's limits alike:
    a value one accepts the other stores too."""
    from taskfleet.protocol.bounds import MAX_COUNT
    from taskfleet.protocol.errors import InvalidArgument
    from taskfleet.protocol.groups import GroupSettings

    groups = openapi_schema()["properties"]["spec"]["properties"]["groups"]["properties"]
    for field in ("maxConcurrency", "rateLimitTasks", "rateLimitCost"):
        assert groups[field]["maximum"] == MAX_COUNT, field
    GroupSettings(max_concurrency=MAX_COUNT, rate_limit_tasks=MAX_COUNT, rate_limit_cost=MAX_COUNT)
    with pytest.raises(InvalidArgument):
        GroupSettings(max_concurrency=MAX_COUNT + 1)


def test_fleet_limits_have_the_bounds_of_the_queue_config_they_become() -> None:
    """spec.maxConcurrency and spec.rateLimit become the queue's config (`QueueConfig`,
    also set through `taskfleet config`): the CRD takes what the config takes."""
    from pydantic import ValidationError
    from taskfleet.protocol.bounds import MAX_COUNT
    from taskfleet.protocol.config import QueueConfig

    spec = openapi_schema()["properties"]["spec"]["properties"]
    assert spec["maxConcurrency"]["maximum"] == MAX_COUNT
    for field in ("tasks", "cost"):
        assert spec["rateLimit"]["properties"][field]["maximum"] == MAX_COUNT, field
    QueueConfig(max_concurrency=MAX_COUNT, rate_limit_tasks=MAX_COUNT, rate_limit_cost=MAX_COUNT)
    with pytest.raises(ValidationError):
        QueueConfig(max_concurrency=MAX_COUNT + 1)
