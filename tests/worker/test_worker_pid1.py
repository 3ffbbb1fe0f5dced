"""The worker as PID 1 of its own PID namespace, as in a container without an init.

``unshare --pid --fork --mount-proc`` makes ``taskfleet worker`` PID 1 of a fresh PID
namespace; the tests signal that PID 1 from outside, as the kubelet does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import redis
from taskfleet.producer.queue import Queue

from tests.needs import need, unless
from tests.polling import wait_for
from tests.workers.harness import (
    FAST,
    REPO,
    WORKER_INTERVAL_S,
    WORKER_TIMEOUT_S,
    Fleet,
    WorkerProcess,
)

UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]

pytestmark = unless(
    os.geteuid() == 0 and shutil.which("unshare"),
    reason="needs root and unshare(1) for a PID namespace",
)


def namespace_init(worker: WorkerProcess) -> int:
    """Host pid of the namespace's PID 1: the child unshare forked."""

    def child() -> int | None:
        path = Path(f"/proc/{worker.pid}/task/{worker.pid}/children")
        pids = path.read_text().split() if path.exists() else []
        return int(pids[0]) if pids else None

    return wait_for(
        child, timeout=WORKER_TIMEOUT_S, interval=WORKER_INTERVAL_S, what="unshare's child"
    )


def processes_in_namespace(init_pid: int) -> list[tuple[int, str, str]]:
    """(host pid, command, state) of every process sharing PID 1's namespace."""
    namespace = os.readlink(f"/proc/{init_pid}/ns/pid")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "ns" / "pid") != namespace:
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        command = stat[stat.index("(") + 1 : stat.rindex(")")]
        state = stat.rpartition(")")[2].split()[0]
        found.append((int(entry.name), command, state))
    return found


def events(client: redis.Redis) -> list[str]:
    return [e.decode() for e in client.lrange("test:events", 0, -1)]


def test_sigterm_to_pid_1_drains_the_in_flight_task_and_exits_zero(
    fleet: Fleet, redis_url: str, redis_client: redis.Redis
) -> None:
    with Queue("jobs", redis_url=redis_url) as queue:
        task_id = queue.enqueue({"seconds": 1.0})
    worker = fleet.add("tests.workers.handlers:sleep", prefix=UNSHARE).start()
    init = namespace_init(worker)
    # unshare's child runs unshare's code until it execs the worker.
    wait_for(
        lambda: b"taskfleet" in Path(f"/proc/{init}/cmdline").read_bytes(),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what="PID 1 exec'd the worker",
    )
    wait_for(
        lambda: any(e.startswith("start:") for e in events(redis_client)),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
    )

    os.kill(init, signal.SIGTERM)

    assert worker.wait() == 0  # unshare exits with its child's (PID 1's) status
    with Queue("jobs", redis_url=redis_url) as queue:
        task = queue.get(task_id)
    assert task is not None and task.state == "done" and task.attempts == 1
    assert worker.has_event("drain_started", inflight=1)


def test_pid_1_reaps_orphaned_grandchildren_and_handlers_still_see_exit_codes(
    fleet: Fleet, redis_url: str, redis_client: redis.Redis
) -> None:
    with Queue("jobs", redis_url=redis_url) as queue:
        ids = [queue.enqueue({"seconds": 0.2}) for _ in range(3)]
    worker = fleet.add(
        "tests.workers.handlers:orphan", prefix=UNSHARE, args=[*FAST, "--concurrency", "3"]
    ).start()
    init = namespace_init(worker)
    wait_for(
        lambda: len(events(redis_client)) == 3,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what="three handlers finished",
    )
    # subprocess.run inside the handler got the shell's real status, not a stolen 0.
    assert all(e.startswith("end-3:") for e in events(redis_client)), events(redis_client)

    def orphans_gone() -> bool:
        procs = processes_in_namespace(init)
        return not any(cmd == "sleep" or state == "Z" for _, cmd, state in procs)

    # Each orphaned `sleep` ends after 0.2 s; unreaped, it would stay a zombie forever.
    wait_for(
        orphans_gone,
        timeout=10,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"no zombies: {processes_in_namespace(init)}",
    )
    with Queue("jobs", redis_url=redis_url) as queue:
        assert all((t := queue.get(i)) is not None and t.state == "done" for i in ids)
    os.kill(init, signal.SIGTERM)
    assert worker.wait() == 0


def test_drain_command_inside_the_namespace_outlives_the_worker_it_drains(
    fleet: Fleet, redis_url: str, redis_client: redis.Redis
) -> None:
    # The preStop hook runs in the container's PID namespace; when the worker's PID 1
    # exits the kernel SIGKILLs everything left there, so the worker must let the hook
    # finish first or the kubelet reports FailedPreStopHook (exit 137).
    nsenter = shutil.which("nsenter")
    need(nsenter, "needs nsenter(1)")
    with Queue("jobs", redis_url=redis_url) as queue:
        task_id = queue.enqueue({"seconds": 0.5})
    worker = fleet.add("tests.workers.handlers:sleep", prefix=UNSHARE).start()
    init = namespace_init(worker)
    wait_for(
        lambda: any(e.startswith("start:") for e in events(redis_client)),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
    )

    hook = subprocess.run(
        [
            nsenter,
            "--target",
            str(init),
            "--pid",
            "--mount",
            "--",
            sys.executable,
            "-m",
            "taskfleet",
            "drain",
            "--wait",
            "--timeout",
            "20",
        ],
        env=worker.env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert hook.returncode == 0, (hook.returncode, hook.stderr, worker.log_text())
    assert worker.wait() == 0
    assert f"end:{task_id}:pod-a" in events(redis_client)
    with Queue("jobs", redis_url=redis_url) as queue:
        task = queue.get(task_id)
    assert task is not None and task.state == "done" and task.attempts == 1
