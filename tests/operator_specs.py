"""TaskQueue specs for the operator's tests: a valid spec with overrides, its hash."""

from __future__ import annotations

from typing import Any

from taskfleet_operator import builders
from taskfleet_operator.models import TaskQueueSpec


def make_spec(**overrides: Any) -> TaskQueueSpec:
    raw: dict[str, Any] = {
        "image": "localhost/worker:dev",
        "handler": "app.tasks:handle",
        "redis": {"url": "redis://redis.taskfleet-system:6379/0"},
    }
    raw.update(overrides)
    return TaskQueueSpec.model_validate(raw)


def spec_hash_of(spec: TaskQueueSpec) -> str:
    template = builders.build_deployment("q", "ns", spec)["spec"]["template"]
    value: str = template["metadata"]["annotations"][builders.SPEC_HASH_ANNOTATION]
    return value
