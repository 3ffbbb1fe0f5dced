"""examples/nestjs/k8s agrees with the operator and with the example's code, without a
cluster: the TaskQueue is valid and runs the example's handler with the Node worker, the
API reads the queue the operator names, and every manifest runs the same image.
Running it is examples/nestjs/test (make node-check) and e2e/test_nestjs_example.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from taskfleet_operator import builders
from taskfleet_operator.models import TaskQueueSpec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nestjs"


def documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((EXAMPLE / "k8s").glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def of_kind(kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_the_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((EXAMPLE / "k8s" / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        p.name for p in (EXAMPLE / "k8s").glob("*.yaml") if p.name != "kustomization.yaml"
    )


def test_the_taskqueue_runs_the_example_s_handler_with_the_node_worker() -> None:
    spec = TaskQueueSpec.model_validate(of_kind("TaskQueue", "articles")["spec"])
    assert spec.runtime == "node"
    container = builders.worker_container("ns", "articles", spec)
    assert container["command"] == ["taskfleet-node", "worker"]
    # ./dist/handlers.js:writeArticle is src/handlers.ts compiled (tsconfig.build.json)
    module, export = (spec.handler or "").split(":")
    assert module == "./dist/handlers.js"
    source = (EXAMPLE / "src" / "handlers.ts").read_text()
    assert re.search(rf"^export async function {export}\(", source, re.MULTILINE)
    assert spec.rate_limit is not None and spec.rate_limit.tasks and spec.rate_limit.cost


def test_the_api_reads_the_queue_the_operator_names_on_the_taskqueue_s_redis() -> None:
    [api] = of_kind("Deployment", "articles-api")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in api["env"]}
    assert env["ARTICLES_QUEUE"] == builders.queue_name("$(NAMESPACE)", "articles")
    assert env["TASKFLEET_REDIS_URL"] == of_kind("TaskQueue", "articles")["spec"]["redis"]["url"]


def test_the_api_runs_no_worker_of_its_own_and_is_ready_when_its_health_check_passes() -> None:
    [api] = of_kind("Deployment", "articles-api")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in api["env"]}
    # the TaskQueue's pods run the processor; src/settings.ts reads ARTICLES_WORKER
    assert env["ARTICLES_WORKER"] == "0"
    assert "ARTICLES_WORKER" in (EXAMPLE / "src" / "settings.ts").read_text()
    assert api["readinessProbe"]["httpGet"]["path"] == "/health"
    assert '@Controller("health")' in (EXAMPLE / "src" / "health.controller.ts").read_text()


def test_every_manifest_runs_the_example_s_image() -> None:
    images = {of_kind("TaskQueue", "articles")["spec"]["image"]}
    for name in ("articles-api", "llm"):
        pod = of_kind("Deployment", name)["spec"]["template"]["spec"]
        images |= {c["image"] for c in pod["containers"]}
    assert images == {"localhost/taskfleet-example-nestjs:dev"}
