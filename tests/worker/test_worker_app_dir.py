"""Where the worker imports handlers from: the current directory first (``--app-dir``).

Each test runs the installed ``taskfleet`` console script, not ``python -m taskfleet``:
``-m`` puts the current directory on the import path itself, the console script does
not, and the console script is what a user types and what a worker image runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.tasks import Task

from tests.polling import wait_for
from tests.workers.harness import FAST, WORKER_INTERVAL_S

CONSOLE_SCRIPT = Path(sysconfig.get_path("scripts")) / "taskfleet"


def make_project(root: Path) -> Path:
    """A user's project folder: a package ``myapp`` whose handler uses a sibling module."""
    package = root / "myapp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "naming.py").write_text("PREFIX = 'thumb-'\n")
    (package / "tasks.py").write_text(
        textwrap.dedent(
            """\
            from myapp.naming import PREFIX


            def thumbnail(payload: dict) -> dict:
                return {"name": PREFIX + payload["image"], "module": __file__}
            """
        )
    )
    return root


class ConsoleWorker:
    """The ``taskfleet worker`` console script run from ``cwd``, with no PYTHONPATH."""

    def __init__(
        self, redis_url: str, cwd: Path, *args: str, env: dict[str, str] | None = None
    ) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | (env or {})
        env.update(
            TASKFLEET_REDIS_URL=redis_url,
            TASKFLEET_RUNTIME_DIR=str(cwd.parent / f"runtime-{cwd.name}"),
            TASKFLEET_POD_NAME=f"pod-{cwd.name}",
            PYTHONUNBUFFERED="1",
        )
        self.log = cwd.parent / f"worker-{cwd.name}.log"
        argv = [str(CONSOLE_SCRIPT), "worker", "--queue", "jobs", *FAST, *args]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"worker still running:\n{self.output()}") from None

    def exit_code(self, timeout: float = 15.0) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"worker did not exit:\n{self.output()}") from None


@pytest.fixture
def workers() -> Iterator[list[ConsoleWorker]]:
    started: list[ConsoleWorker] = []
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue("jobs", redis_url=redis_url) as queue:
        yield queue


def done(queue: Queue, task_id: str, worker: ConsoleWorker) -> Task:
    def check() -> Task | None:
        task = queue.get(task_id)
        return task if task is not None and task.state in ("done", "dead") else None

    task = wait_for(
        check,
        timeout=15.0,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"task {task_id} to finish; worker output:\n{worker.output()}",
    )
    assert task.state == "done", (task.error, worker.output())
    return task


def test_the_console_script_run_from_a_project_folder_imports_its_handler_from_there(
    redis_url: str, queue: Queue, tmp_path: Path, workers: list[ConsoleWorker]
) -> None:
    project = make_project(tmp_path / "project")
    worker = ConsoleWorker(redis_url, project, "--handler", "myapp.tasks:thumbnail")
    workers.append(worker)
    task = done(queue, queue.enqueue({"image": "cat.png"}), worker)
    assert task.result == {
        "name": "thumb-cat.png",
        "module": str(project / "myapp" / "tasks.py"),
    }
    assert worker.stop() == 0


def test_every_process_of_a_multi_process_worker_imports_from_the_project_folder(
    redis_url: str, queue: Queue, tmp_path: Path, workers: list[ConsoleWorker]
) -> None:
    project = make_project(tmp_path / "project")
    worker = ConsoleWorker(
        redis_url, project, "--handler", "myapp.tasks:thumbnail", "--processes", "2"
    )
    workers.append(worker)
    ids = [queue.enqueue({"image": f"{i}.png"}) for i in range(6)]
    assert [done(queue, task_id, worker).result["name"] for task_id in ids] == [
        f"thumb-{i}.png" for i in range(6)
    ]
    assert worker.stop() == 0


def test_app_dir_imports_handlers_from_another_directory_than_the_current_one(
    redis_url: str, queue: Queue, tmp_path: Path, workers: list[ConsoleWorker]
) -> None:
    project = make_project(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    worker = ConsoleWorker(
        redis_url, elsewhere, "--app-dir", str(project), "--handler", "myapp.tasks:thumbnail"
    )
    workers.append(worker)
    task = done(queue, queue.enqueue({"image": "dog.png"}), worker)
    assert task.result["name"] == "thumb-dog.png"
    assert worker.stop() == 0


def test_the_app_dir_comes_from_the_environment_too(
    redis_url: str, queue: Queue, tmp_path: Path, workers: list[ConsoleWorker]
) -> None:
    project = make_project(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    worker = ConsoleWorker(
        redis_url,
        elsewhere,
        "--handler",
        "myapp.tasks:thumbnail",
        env={"TASKFLEET_APP_DIR": str(project)},
    )
    workers.append(worker)
    assert done(queue, queue.enqueue({"image": "a.png"}), worker).result["name"] == "thumb-a.png"
    assert worker.stop() == 0


def test_an_app_dir_that_is_not_a_directory_exits_2_with_one_line_and_stores_nothing(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, workers: list[ConsoleWorker]
) -> None:
    project = make_project(tmp_path / "project")
    missing = tmp_path / "no-such-dir"
    worker = ConsoleWorker(
        redis_url, project, "--app-dir", str(missing), "--handler", "myapp.tasks:thumbnail"
    )
    workers.append(worker)
    assert worker.exit_code() == 2
    assert worker.output().splitlines() == [
        f"taskfleet: error: --app-dir {str(missing)!r} is not a directory"
    ]
    assert redis_client.keys("*") == []


def test_a_handler_module_missing_from_the_app_dir_names_the_directory_searched(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, workers: list[ConsoleWorker]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    worker = ConsoleWorker(redis_url, empty, "--handler", "myapp.tasks:thumbnail")
    workers.append(worker)
    assert worker.exit_code() == 2
    assert worker.output().splitlines() == [
        f"taskfleet: error: handler module 'myapp.tasks' not found: looked in {empty} first "
        "(the worker's --app-dir), then the installed packages"
    ]
    assert redis_client.keys("*") == []
