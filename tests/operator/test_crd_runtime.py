"""spec.runtime in a real kube-apiserver: the default, the Node forms, and the refusals
with their one-line messages (the CEL twins of tests/release/test_node_runtime.py's checks)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from taskfleet_operator import runtimespec

from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import base_spec, kubectl, manifest

URL = "redis://redis.taskfleet-system:6379/0"


def apply(server: KubeApiserver, namespace: str, name: str, spec: dict[str, Any]) -> Any:
    return kubectl(
        server, "-n", namespace, "apply", "-f", "-", stdin=manifest(name, spec), check=False
    )


def stored_spec(server: KubeApiserver, namespace: str, name: str) -> dict[str, Any]:
    result = kubectl(server, "-n", namespace, "get", "tq", name, "-o", "json")
    spec: dict[str, Any] = json.loads(result.stdout)["spec"]
    return spec


def test_runtime_is_left_unset_for_python_and_node_fleets_take_node_handlers(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str
) -> None:
    assert apply(kube_apiserver, tq_namespace, "py", base_spec(URL)).returncode == 0
    # Unset means python, and stays unset: no default is written into stored TaskQueues
    # (an operator of the previous release would refuse the field).
    assert "runtime" not in stored_spec(kube_apiserver, tq_namespace, "py")
    node = base_spec(
        URL,
        runtime="node",
        image="localhost/taskfleet-worker-node:dev",
        handler="./handlers.js:sleepAndRecord",
        handlers={"resize": "@acme/media/worker:tasks.resize", "mail": "/app/mail.cjs:send"},
        processes=2,
        isolation="thread",
    )
    result = apply(kube_apiserver, tq_namespace, "node", node)
    assert result.returncode == 0, result.stderr
    stored = stored_spec(kube_apiserver, tq_namespace, "node")
    assert (stored["runtime"], stored["handler"]) == ("node", "./handlers.js:sleepAndRecord")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"handler": "./handlers.js:run"}, runtimespec.PYTHON_HANDLER_MESSAGE),
        ({"runtime": "python", "handler": "@acme/jobs:run"}, runtimespec.PYTHON_HANDLER_MESSAGE),
        (
            {"handlers": {"resize": "./media.js:resize"}},
            runtimespec.PYTHON_HANDLERS_MESSAGE,
        ),
        ({"runtime": "node", "isolation": "process"}, runtimespec.NODE_ISOLATION_MESSAGE),
        (
            {"runtime": "node", "isolation": "process", "maxTasksPerChild": 5},
            runtimespec.NODE_ISOLATION_MESSAGE,
        ),
        ({"runtime": "node", "handler": "./handlers.js"}, "spec.handler"),
        ({"runtime": "node", "handler": "./a b.js:run"}, "spec.handler"),
        ({"runtime": "deno"}, 'supported values: "python", "node"'),
    ],
)
def test_what_a_runtime_cannot_run_is_rejected_with_a_message_saying_what_to_fix(
    kube_apiserver: KubeApiserver,
    taskqueue_crd: str,
    tq_namespace: str,
    change: dict[str, Any],
    message: str,
) -> None:
    result = apply(kube_apiserver, tq_namespace, "bad", base_spec(URL, **change))
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
