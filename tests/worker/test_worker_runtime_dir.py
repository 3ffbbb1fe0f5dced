"""The runtime directory is not trusted: a forged or planted file moves nothing.

Real ``taskfleet drain`` commands against real processes (one that blocks SIGTERM, so a
signal sent to it stays visible as pending in ``/proc``), and a real worker whose
runtime file is attacked with symlinks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from taskfleet.worker.runtime import process_start

from tests.polling import wait_for
from tests.workers.harness import WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet, env_for, taskfleet

SLEEP = "tests.workers.handlers:sleep"


def sigterm_pending(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("ShdPnd:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    raise AssertionError("no ShdPnd in /proc status")


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process of ours that blocks SIGTERM (a signal sent stays pending)."""
    code = (
        "import signal, sys\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    with proc:
        yield proc
        proc.kill()


def forged_state(pid: int) -> str:
    start = process_start(pid)
    assert start is not None
    return json.dumps(
        {"pid": pid, "start": start, "pod": "p", "queue": "q", "inflight": 0, "state": "running"}
    )


@pytest.mark.parametrize("planted", ["file", "symlink to a file"])
def test_drain_refuses_a_forged_runtime_file_naming_an_unrelated_process_and_sends_no_signal(
    bystander: subprocess.Popen[bytes], tmp_path: Path, planted: str
) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    forged = forged_state(bystander.pid)
    if planted == "file":
        (runtime / "worker.json").write_text(forged)
    else:
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(forged)
        (runtime / "worker.json").symlink_to(elsewhere)

    result = taskfleet("drain", env=env_for("redis://127.0.0.1:1/0", runtime))

    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("taskfleet: error: runtime file "), lines
    assert "no signal sent" in lines[0] or "not trusting it" in lines[0], lines[0]
    assert bystander.poll() is None and not sigterm_pending(bystander.pid)


def test_the_worker_never_writes_its_runtime_file_through_a_planted_symlink(
    fleet: Fleet, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    worker = fleet.add(SLEEP).start()
    worker.wait_event("worker_started")
    runtime = worker.runtime_dir
    wait_for(
        (runtime / "worker.json").exists,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what="the runtime file",
    )
    # Symlinks at the file's own name and at the temp name the writer used to use.
    planted = tmp_path / "planted"
    planted.symlink_to(victim)
    os.replace(planted, runtime / "worker.json")  # atomic: the worker may rewrite it now
    (runtime / f".worker.json.{worker.pid}.tmp").symlink_to(victim)

    worker.signal(signal.SIGTERM)  # rewrites the file: draining, drained, stopped
    assert worker.wait() == 0, worker.log_text()

    assert victim.read_text() == "precious"
    assert not worker.has_event("runtime_file_failed")


def test_the_default_runtime_directory_is_private_and_an_unsafe_one_is_refused(
    fleet: Fleet, tmp_path: Path
) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    worker = fleet.add(SLEEP, env={"XDG_RUNTIME_DIR": str(xdg)})
    del worker.env["TASKFLEET_RUNTIME_DIR"]
    worker.start()
    worker.wait_event("worker_started")
    private = xdg / "taskfleet"
    wait_for(
        (private / "worker.json").exists,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what="the runtime file",
    )
    assert private.stat().st_mode & 0o777 == 0o700
    assert (private / "worker.json").stat().st_mode & 0o777 == 0o600
    # `taskfleet drain` finds it there too.
    env = env_for(fleet.redis_url, tmp_path, XDG_RUNTIME_DIR=str(xdg))
    del env["TASKFLEET_RUNTIME_DIR"]
    assert taskfleet("drain", env=env).returncode == 0
    assert worker.wait() == 0

    for unsafe, why in (("shared", "group- or world-writable"), ("link", "is a symlink")):
        other = tmp_path / f"xdg-{unsafe}"
        other.mkdir(mode=0o700)
        if unsafe == "shared":
            (other / "taskfleet").mkdir()
            os.chmod(other / "taskfleet", 0o777)
        else:
            (other / "taskfleet").symlink_to(xdg / "taskfleet")
        env["XDG_RUNTIME_DIR"] = str(other)
        result = taskfleet("worker", "--queue", "jobs", "--handler", SLEEP, env=env)
        assert result.returncode == 2, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("taskfleet: error: runtime directory")
        assert why in lines[0], lines[0]
