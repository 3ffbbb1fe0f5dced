"""spec.runtime: a TaskQueue whose image carries the Node.js worker (`taskfleet-node`).

The pod of a node fleet is the Python fleet's pod with two words changed: the worker's
command and its preStop hook's program; what the Node worker cannot do is refused by the
model with the CEL rules' messages (tests/operator/test_crd_runtime.py runs those on an apiserver).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from taskfleet_operator import builders, runtimespec
from taskfleet_operator.models import TaskQueueSpec


def make_spec(**overrides: Any) -> TaskQueueSpec:
    raw: dict[str, Any] = {
        "image": "registry.example/jobs-node:1.0",
        "handler": "./handlers.js:run",
        "runtime": "node",
        "redis": {"url": "redis://redis:6379/0"},
    }
    raw.update(overrides)
    return TaskQueueSpec.model_validate(raw)


def worker(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = next(c for c in containers if c["name"] == "worker")
    return found


def test_runtime_defaults_to_python_and_the_pod_runs_the_python_worker() -> None:
    raw = make_spec(handler="app.tasks:run").model_dump(by_alias=True, exclude={"runtime"})
    spec = TaskQueueSpec.model_validate(raw)
    assert spec.runtime is None  # unset: python (no CRD default, docs/compatibility.md)
    container = worker(builders.build_deployment("jobs", "media", spec))
    assert container["command"] == ["taskfleet", "worker"]
    assert container["lifecycle"]["preStop"]["exec"]["command"][:2] == ["taskfleet", "drain"]


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"processes": 3, "concurrency": 6},
        {"handlers": {"resize": "media:resize", "mail": "jobs.mail:send"}},
        {"maxTaskDurationSeconds": 7200, "heartbeat": {"intervalSeconds": 2, "ttlSeconds": 60}},
        {"redis": {"secretRef": {"name": "redis-url", "key": "url"}}, "disruptionGuard": False},
    ],
)
def test_a_node_pod_is_the_python_pod_but_for_the_worker_and_prestop_programs(
    extra: dict[str, Any],
) -> None:
    # A reference both runtimes read (a package name is a Python module's form too).
    node = builders.build_deployment("jobs", "media", make_spec(handler="jobs:run", **extra))
    python = builders.build_deployment(
        "jobs", "media", make_spec(runtime="python", handler="jobs:run", **extra)
    )
    node_worker, python_worker = worker(node), worker(python)
    # Exec form, the same flags (queue, handlers, concurrency, processes, drain, beats).
    assert node_worker["command"] == ["taskfleet-node", "worker"]
    assert node_worker["args"] == python_worker["args"]
    hook = node_worker["lifecycle"]["preStop"]["exec"]["command"]
    drain = str(builders.drain_seconds(make_spec(**extra)))
    assert hook == ["taskfleet-node", "drain", "--wait", "--timeout", drain]
    # Everything else is the Python fleet's: grace period, env (runtime dir, metrics port,
    # pod name, Redis URL), metrics ports, security, /tmp, labels and annotations.
    node_worker.pop("command")
    python_worker.pop("command")
    node_worker["lifecycle"] = python_worker["lifecycle"] = None
    assert node_worker == python_worker
    node_pod, python_pod = node["spec"]["template"], python["spec"]["template"]
    assert node_pod["spec"]["terminationGracePeriodSeconds"] == (
        builders.grace_period_seconds(make_spec(**extra))
    )
    for pod in (node_pod, python_pod):
        pod["spec"]["containers"] = []
        pod["metadata"]["annotations"].pop(builders.SPEC_HASH_ANNOTATION)
    assert node_pod == python_pod


def test_switching_runtime_rolls_the_fleet() -> None:
    node = builders.pod_template("media", "jobs", make_spec())
    python = builders.pod_template(
        "media", "jobs", make_spec(runtime="python", handler="app.tasks:run")
    )
    hashes = {t["metadata"]["annotations"][builders.SPEC_HASH_ANNOTATION] for t in (node, python)}
    assert len(hashes) == 2


@pytest.mark.parametrize(
    "handler",
    [
        "./handlers.js:run",
        "../lib/jobs.mjs:run",
        "/app/dist/jobs.cjs:tasks.resize",
        "@acme/jobs:run",
        "@acme/jobs/worker:REGISTRY",
        "jobs:$run",
        "app.tasks:run",
    ],
)
def test_node_handler_forms_are_accepted(handler: str) -> None:
    assert make_spec(handler=handler, handlers={"named": handler}).handler == handler


@pytest.mark.parametrize(
    "handler", ["./handlers.js", "handlers.js: run", "./a b.js:run", ":run", "./x.js:1run"]
)
def test_a_malformed_node_handler_is_refused(handler: str) -> None:
    with pytest.raises(ValidationError, match="should match pattern"):
        make_spec(handler=handler)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"handler": "./handlers.js:run"}, runtimespec.PYTHON_HANDLER_MESSAGE),
        ({"handler": "@acme/jobs:run"}, runtimespec.PYTHON_HANDLER_MESSAGE),
        ({"handler": "app.tasks:a.b"}, runtimespec.PYTHON_HANDLER_MESSAGE),
        (
            {"handler": "app.tasks:run", "handlers": {"resize": "./media.js:resize"}},
            runtimespec.PYTHON_HANDLERS_MESSAGE,
        ),
    ],
)
def test_a_node_handler_on_a_python_fleet_is_refused_saying_what_to_fix(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        make_spec(runtime="python", **overrides)
    assert message in str(caught.value)
    assert "\n" not in message


@pytest.mark.parametrize(
    "overrides", [{"isolation": "process"}, {"isolation": "process", "maxTasksPerChild": 10}]
)
def test_process_isolation_is_refused_for_node(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as caught:
        make_spec(**overrides)
    assert runtimespec.NODE_ISOLATION_MESSAGE in str(caught.value)
    assert make_spec(isolation="thread").isolation == "thread"


def test_an_unknown_runtime_is_refused() -> None:
    with pytest.raises(ValidationError, match="'python' or 'node'"):
        make_spec(runtime="deno")
