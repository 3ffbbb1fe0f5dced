"""The NestJS example (examples/nestjs) on the cluster, as its README deploys it: the API,
the simulated LLM provider and a TaskQueue of `runtime: node` running the example's
handlers, from its own image (FROM the Node worker image). Articles are enqueued and read
through the API only; while they are being written, one busy worker pod is deleted (it
drains: what it runs finishes there) and the other is force-deleted (its tasks are put
back and written again elsewhere). Every article comes out done, whole, once per attempt
that finished, and the queue's budget is charged what the provider reported.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.lib.fleet import Fleet, Operator
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, VERSIONS, Kube
from e2e.lib.portforward import PortForward
from e2e.test_pod_disruption import taken_back_from
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "nestjs"
IMAGE = VERSIONS.get("EXAMPLE_NESTJS_IMAGE", "localhost/taskfleet-example-nestjs:dev")
SHIPPED_IMAGE = "localhost/taskfleet-example-nestjs:dev"
SHIPPED_REDIS = "redis.articles.svc:"
# Each article: 300 tokens written 8 at a time; at 400 ms a chunk, about 15 s of writing,
# so the deletions below land mid-task.
SLOW_CHUNKS = '{name: LLM_CHUNK_DELAY_MS, value: "400"}'
SHIPPED_CHUNKS = '{name: LLM_CHUNK_DELAY_MS, value: "100"}'
ARTICLE_TOKENS = 300
MAX_TOKENS = 400
# "Write an article about <one word>." is 5 tokens.
RESERVED = 5 + MAX_TOKENS
USED = 5 + ARTICLE_TOKENS
# Two pods of four slots (k8s/taskqueue.yaml): every article starts at once.
TOPICS = ["queues", "leases", "drains", "budgets", "retries", "fencing", "schedules", "pods"]
HTTP_ERRORS = (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError)


def manifests(namespace: str) -> str:
    """The example's k8s/ files as shipped, with the image under test, the test's namespace
    (its Redis) and a slower provider."""
    files = ("llm.yaml", "api.yaml", "taskqueue.yaml")
    text = "\n---\n".join((EXAMPLE / "k8s" / name).read_text() for name in files)
    assert SHIPPED_CHUNKS in text, f"k8s/llm.yaml no longer sets {SHIPPED_CHUNKS}"
    assert SHIPPED_REDIS in text, f"k8s/ no longer names {SHIPPED_REDIS}"
    text = text.replace(SHIPPED_REDIS, f"redis.{namespace}.svc:")
    return text.replace(SHIPPED_CHUNKS, SLOW_CHUNKS).replace(SHIPPED_IMAGE, IMAGE)


class Api:
    """The example's HTTP API through a port-forward to its Service."""

    def __init__(self, namespace: str):
        self.forward = PortForward(namespace, "svc/articles-api", remote_port=3000)

    def start(self) -> None:
        self.forward.start()

    def stop(self) -> None:
        self.forward.stop()

    def call(
        self, method: str, path: str, body: Any = None, timeout: float = 10
    ) -> tuple[int, Any]:
        if self.forward.process is None or self.forward.process.poll() is not None:
            self.forward.start()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.forward.local_port}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def enqueue(self, topic: str) -> str:
        status, body = self.call("POST", "/articles", {"topic": topic, "maxTokens": MAX_TOKENS})
        assert status == 202, (status, body)
        return str(body["id"])

    def article(self, task_id: str, wait: float = 0) -> dict[str, Any]:
        status, body = self.call("GET", f"/articles/{task_id}?wait={wait}", timeout=wait + 15)
        assert status == 200, (status, body)
        return dict(body)


@pytest.fixture
def api(namespace: Kube, redis_forward: PortForward, operator: Operator) -> Iterator[Api]:
    """The example deployed in the test's namespace (with its Redis), its API reachable."""
    assert namespace.namespace is not None
    namespace.apply_yaml(manifests(namespace.namespace))
    for deployment in ("llm", "articles-api"):
        namespace.run(
            "rollout", "status", f"deployment/{deployment}", "--timeout=180s", timeout=200
        )
    client = Api(namespace.namespace)
    client.start()
    yield client
    client.stop()


def busy_pods(fleet: Fleet, articles: list[str]) -> dict[str, set[str]]:
    """The worker pods writing articles, each with the ones it holds, once every article has
    started and shows progress (read through the API)."""

    def probe() -> dict[str, set[str]] | None:
        holders: dict[str, set[str]] = {}
        for task_id in articles:
            task = fleet.queue.task(task_id)
            if task.get("state") != "running" or not task.get("progress"):
                return None
            holders.setdefault(task["pod"], set()).add(task_id)
        return holders if len(holders) == 2 else None

    found: dict[str, set[str]] = wait_for(
        probe,
        timeout=120,
        interval=CLUSTER_INTERVAL_S,
        what="both worker pods writing articles with progress",
        ignoring=CLUSTER_ERRORS,
    )
    return found


def test_the_example_writes_every_article_through_a_deleted_and_a_force_deleted_worker(
    api: Api, namespace: Kube, redis_forward: PortForward
) -> None:
    fleet = Fleet(namespace, "articles", redis_forward)
    assert fleet.container()["command"] == ["taskfleet-node", "worker"]
    fleet.wait_ready(2)

    articles = [api.enqueue(topic) for topic in TOPICS]
    holders = busy_pods(fleet, articles)
    # The API shows an article part-way: its progress as the worker streams it.
    some = next(iter(next(iter(holders.values()))))
    partial = api.article(some)
    assert partial["state"] == "running", partial
    assert 0 <= partial["progress"]["done"] < ARTICLE_TOKENS, partial
    assert partial["tokens"] == {"reserved": RESERVED, "used": None}, partial

    drained, killed = sorted(holders, key=lambda pod: -len(holders[pod]))
    # A delete: kubelet runs the preStop drain, the worker stops claiming and finishes
    # what it writes before it exits.
    namespace.delete("pod", drained)
    # A force delete: the pod is gone from the API at once; the operator puts its
    # articles back and the replacement pods write them again.
    namespace.delete("pod", killed, "--grace-period=0", "--force")
    wait_for(
        lambda: taken_back_from(fleet.queue, holders[killed], killed),
        timeout=30,
        interval=0.2,
        what=f"the articles of {killed} taken back",
        ignoring=CLUSTER_ERRORS,
    )

    finished: dict[str, dict[str, Any]] = {}

    def all_finished() -> bool:
        for task_id in articles:
            if task_id not in finished:
                article = api.article(task_id, wait=20)
                if article["state"] not in ("done", "dead", "cancelled"):
                    return False
                finished[task_id] = article
        return True

    wait_for(
        all_finished,
        timeout=300,
        interval=CLUSTER_INTERVAL_S,
        what="every article to finish",
        ignoring=(*CLUSTER_ERRORS, *HTTP_ERRORS),
    )
    for task_id, article in finished.items():
        assert article["state"] == "done", article
        result = article["result"]
        assert len(result["text"].split()) == ARTICLE_TOKENS, article
        assert result["usage"]["total_tokens"] == USED, article
        assert article["tokens"] == {"reserved": RESERVED, "used": USED}, article
        assert article["progress"]["fraction"] == 1, article
        fields = fleet.queue.task(task_id)
        if task_id in holders[drained]:
            # written to the end on the pod that drained, once
            assert (fields["pod"], article["attempts"]) == (drained, 1), fields
        else:
            assert fields["pod"] != killed, fields
            if task_id in holders[killed]:
                assert int(fields.get("lost") or 0) == 1, fields
    assert fleet.queue.stats()["dead"] == 0
