"""The two image recipes of docs/images.md on a real cluster, built as a user builds them
(e2e/cluster/build-images.sh, e2e/kind/up.sh):

- examples/app-image: FROM the worker image, `RUN pip install -r requirements.txt` as the
  image's own non-root user, the handlers in the working directory;
- examples/own-base-image: another base image with taskfleet installed from a wheel.

Each runs its tasks in a restricted namespace, with the operator's read-only root
filesystem, and the results show the third-party package the image installed was used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from taskfleet import Queue, Task

from e2e.lib.fleet import Fleet
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, VERSIONS
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
APP_IMAGE = os.environ.get("TASKFLEET_EXAMPLE_APP_IMAGE") or VERSIONS.get(
    "EXAMPLE_APP_IMAGE", "localhost/taskfleet-example-app:dev"
)
OWN_BASE_IMAGE = os.environ.get("TASKFLEET_EXAMPLE_OWN_BASE_IMAGE") or VERSIONS.get(
    "EXAMPLE_OWN_BASE_IMAGE", "localhost/taskfleet-example-own-base:dev"
)


def pinned(example: str, package: str) -> str:
    """The version of ``package`` the example's requirements.txt pins."""
    text = (EXAMPLES / example / "requirements.txt").read_text()
    match = re.search(rf"^{re.escape(package)}==(\S+)$", text, re.MULTILINE)
    assert match, f"{example}/requirements.txt pins no {package}"
    return match.group(1)


def run_tasks(fleet: Fleet, payloads: list[dict[str, Any]]) -> list[Task]:
    """Enqueue tasks without a name and wait for their outcomes."""

    def run(_: redis.Redis) -> list[Task]:
        with Queue(fleet.queue.queue, fleet.forward.url) as queue:
            ids = [queue.enqueue(payload) for payload in payloads]
            finished = queue.wait(ids, timeout=90)
            return [finished[task_id] for task_id in ids]

    tasks: list[Task] = fleet.forward.call(run, timeout=120)
    return tasks


def start_slow_task(fleet: Fleet, pod: str, seconds: float) -> str:
    """A ``take_time`` task, once ``pod`` runs it."""

    def enqueue(_: redis.Redis) -> str:
        with Queue(fleet.queue.queue, fleet.forward.url) as queue:
            return queue.enqueue({"seconds": seconds}, task="take_time")

    task_id: str = fleet.forward.call(enqueue)
    wait_for(
        lambda: task_id in fleet.queue.held_by(pod),
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what=f"pod {pod} to run task {task_id}",
        ignoring=CLUSTER_ERRORS,
    )
    return task_id


def test_an_application_image_from_the_worker_image_runs_tasks_with_the_package_it_installed(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet("sizes", image=APP_IMAGE, handler="myapp.tasks:describe_size", replicas=1)
    fleet.wait_ready(1)
    tasks = run_tasks(fleet, [{"bytes": 1_000}, {"bytes": 3_000_000}])
    version = pinned("app-image", "humanize")
    assert [(t.state, t.result) for t in tasks] == [
        ("done", {"size": "1.0 kB", "humanize": version}),
        ("done", {"size": "3.0 MB", "humanize": version}),
    ]


def test_an_image_on_its_own_base_runs_tasks_and_drains_through_its_taskfleet_command(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(
        "own-base",
        image=OWN_BASE_IMAGE,
        handler="myapp.tasks:describe_size",
        handlers={"take_time": "myapp.tasks:take_time"},
        replicas=1,
        concurrency=1,
        maxTaskDurationSeconds=60,
    )
    [pod] = fleet.wait_ready(1)
    [task] = run_tasks(fleet, [{"bytes": 2_500}])
    # Its own virtualenv's Python ran the handler, with the package its requirements pin.
    assert task.state == "done", task.error
    assert task.result is not None and task.result.pop("python").startswith("/opt/venv/bin/")
    assert task.result == {"size": "2.5 kB", "humanize": pinned("own-base-image", "humanize")}

    # The preStop command the operator sets, run in the container as kubelet runs it: it
    # finds `taskfleet` on the image's PATH and returns once the running task is done.
    slow = start_slow_task(fleet, pod, 4)
    fleet.kube.exec(pod, "taskfleet", "drain", "--wait", "--timeout", "60", timeout=90)
    fields = fleet.queue.task(slow)
    assert (fields["state"], fields["attempts"]) == ("done", "1"), fields

    # Deleting a pod mid-task: kubelet runs the preStop hook; it must not fail, and the
    # task finishes on that pod, once.
    [pod] = fleet.wait_ready(1)
    slow = start_slow_task(fleet, pod, 4)
    fleet.kube.delete("pod", pod)
    fleet.wait_pod_gone(pod, timeout=90)
    fields = fleet.queue.task(slow)
    assert (fields["state"], fields["attempts"], fields["pod"]) == ("done", "1", pod), fields
    hook_failures = [
        e.get("message", "")
        for e in fleet.kube.events(pod)
        if e.get("reason") == "FailedPreStopHook"
    ]
    assert hook_failures == []
