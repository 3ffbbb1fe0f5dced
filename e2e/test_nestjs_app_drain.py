"""A NestJS application with taskfleet's module on the cluster: the example's app (its API
and, in the same process, the processor's worker: ARTICLES_WORKER=1) in two pods. 500
articles are enqueued; while they are written, one pod is deleted. The kubelet sends
SIGTERM to its PID 1 (node, exec form): Nest's shutdown hooks drain the worker, the
articles it holds finish there, and the process exits 0. Every article ends done, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, Kube, PodWatch
from e2e.lib.ledger import QueueView
from e2e.lib.portforward import PortForward
from e2e.test_nestjs_example import IMAGE, SHIPPED_CHUNKS, SHIPPED_IMAGE, SHIPPED_REDIS
from e2e.test_pod_disruption import exit_code
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "nestjs"
APP = "app.kubernetes.io/name=articles-api"
ARTICLES = 500
# 32 tokens, 8 a chunk, 100 ms a chunk: about 0.4 s an article, so 2 pods x 8 slots
# write the 500 in about 15 s and the delete below lands mid-run.
MAX_TOKENS = 32
SHIPPED_WORKER = '{name: ARTICLES_WORKER, value: "0"}'
WORKER = (
    '{name: ARTICLES_WORKER, value: "1"}\n'
    '            - {name: ARTICLES_CONCURRENCY, value: "8"}\n'
    '            - {name: ARTICLES_DRAIN_TIMEOUT_MS, value: "20000"}\n'
    '            - {name: LLM_URL, value: "http://llm:8090"}'
)


def manifests(namespace: str) -> str:
    """The example's provider and app as shipped, the app running its worker too, in two
    pods, on the test's Redis."""
    text = "\n---\n".join((EXAMPLE / "k8s" / name).read_text() for name in ("llm.yaml", "api.yaml"))
    for shipped in (SHIPPED_WORKER, SHIPPED_REDIS, SHIPPED_IMAGE, SHIPPED_CHUNKS, "replicas: 1"):
        assert shipped in text, f"k8s/ no longer has {shipped}"
    text = text.replace(SHIPPED_WORKER, WORKER).replace(SHIPPED_IMAGE, IMAGE)
    text = text.replace(SHIPPED_REDIS, f"redis.{namespace}.svc:")
    return text.replace("replicas: 1", "replicas: 2")


@pytest.fixture
def app(namespace: Kube, redis_forward: PortForward) -> Iterator[QueueView]:
    """The app deployed in two ready pods; the view of its queue."""
    assert namespace.namespace is not None
    namespace.apply_yaml(manifests(namespace.namespace))
    for deployment in ("llm", "articles-api"):
        namespace.run(
            "rollout", "status", f"deployment/{deployment}", "--timeout=180s", timeout=200
        )
    assert len(namespace.running_pods(APP)) == 2
    yield QueueView(redis_forward, f"{namespace.namespace}.articles", record_key="unused")


def holders_by_pod(queue: QueueView, pods: list[str]) -> dict[str, int]:
    """pod -> running articles its worker holds (a module worker is named after its host)."""
    counts = queue.holders()
    return {
        pod: sum(n for holder, n in counts.items() if holder.startswith(f"{pod}-")) for pod in pods
    }


def test_a_nest_app_with_the_module_drains_on_sigterm_exits_0_and_loses_no_article(
    app: QueueView, namespace: Kube, redis_forward: PortForward
) -> None:
    from taskfleet.producer.queue import Queue

    def enqueue(_: redis.Redis) -> list[str]:
        with Queue(app.queue, redis_forward.url) as queue:
            return queue.enqueue_many(
                [
                    {"payload": {"topic": f"topic{i}", "maxTokens": MAX_TOKENS}, "cost": MAX_TOKENS}
                    for i in range(ARTICLES)
                ]
            )

    articles = redis_forward.call(enqueue)
    assert len(articles) == ARTICLES
    pods = [pod["metadata"]["name"] for pod in namespace.running_pods(APP)]

    def both_busy() -> dict[str, int] | None:
        held = holders_by_pod(app, pods)
        done = app.stats().get("done", 0)
        return held if all(held.values()) and done >= 50 else None

    held = wait_for(
        both_busy,
        timeout=120,
        interval=CLUSTER_INTERVAL_S,
        what="both app pods writing articles, 50 done",
        ignoring=CLUSTER_ERRORS,
    )
    victim = max(held, key=lambda pod: held[pod])
    watch = PodWatch(namespace, victim)
    try:
        namespace.delete("pod", victim, wait=True)
        wait_for(
            watch.terminated,
            timeout=30,
            interval=CLUSTER_INTERVAL_S,
            what=f"the exit of {victim}'s container",
        )
        terminated = watch.terminated()
    finally:
        watch.stop()
    assert terminated is not None and terminated.get("exitCode") == 0, (
        f"the app exited {exit_code(terminated)} on SIGTERM: {terminated}"
    )

    def finished() -> dict[str, int] | None:
        stats = app.stats()
        ended = stats.get("done", 0) + stats.get("dead", 0)
        return stats if ended >= ARTICLES else None

    stats = wait_for(
        finished,
        timeout=240,
        interval=CLUSTER_INTERVAL_S,
        what=f"all {ARTICLES} articles to end",
        ignoring=CLUSTER_ERRORS,
    )
    assert stats.get("dead", 0) == 0, stats
    tasks: list[dict[str, Any]] = [app.task(task_id) for task_id in articles]
    states = sorted({task.get("state", "?") for task in tasks})
    assert states == ["done"], states
    # Drained, not abandoned: nothing the victim held was taken back from a lost pod.
    assert not [task for task in tasks if int(task.get("lost") or 0)], "an article was lost"
    # Once: no article started a second time (a drain that handed one back would show 2).
    again = [task for task in tasks if int(task.get("attempts") or 0) != 1]
    assert not again, f"{len(again)} articles ran more than once: {again[:3]}"
    on_victim = [task for task in tasks if str(task.get("pod", "")).startswith(f"{victim}-")]
    assert on_victim, f"no article finished on {victim}"
