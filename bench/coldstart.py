"""A worker's cold start in two environments: this venv and the worker image's.

``make bench`` measures the cold start (exec -> first task done, a fresh interpreter) in the
development venv, next to the peers. That venv carries the test tools; among them the
OpenTelemetry SDK, which redis-py 8 imports whenever it is installed. The worker image
installs ``taskfleet[metrics,dashboard]`` alone. This bench builds a venv with just that (cached by
the sources' hash under ``~/.cache/taskfleet/bench/``), then starts one worker at a time
on a queue holding one task, alternating between the two interpreters, and prints the
median of each and where an interpreter's start goes (``-X importtime``, summed by package).

    python -m bench.coldstart [--starts 9]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from taskfleet import Queue

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("TASKFLEET_CACHE", Path.home() / ".cache" / "taskfleet")) / "bench"
QUEUE = "coldstart"
DONE = "coldstart:done"
HANDLERS = """
import os
import redis

_client = None


def noop(payload):
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["TASKFLEET_REDIS_URL"])
    _client.rpush("coldstart:done", 1)
"""


def image_python() -> Path:
    """A venv with what the worker image installs (``.[metrics,dashboard]``, not editable)."""
    digest = hashlib.sha256()
    sources = [*(REPO / "worker-image" / "taskfleet").rglob("*"), *(REPO / "operator").rglob("*")]
    for path in sorted(sources):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(REPO).as_posix().encode() + path.read_bytes())
    digest.update((REPO / "pyproject.toml").read_bytes())
    venv = CACHE / f"image-venv-{digest.hexdigest()[:12]}"
    python = venv / "bin" / "python"
    if not python.exists():
        for old in CACHE.glob("image-venv-*"):
            shutil.rmtree(old, ignore_errors=True)
        print(f"building {venv} (pip install '.[metrics,dashboard]')", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        leftover = not (REPO / "build").exists()  # setuptools builds in the tree
        subprocess.run([*pip, f"{REPO}[metrics,dashboard]"], check=True)
        if leftover:
            shutil.rmtree(REPO / "build", ignore_errors=True)
    return python


def start_once(python: str, url: str, client: redis.Redis, handlers: Path) -> float:
    client.flushdb()
    Queue(QUEUE, redis_url=url).enqueue({})
    with tempfile.TemporaryDirectory(prefix="coldstart-") as runtime:
        env = dict(os.environ, PYTHONPATH=str(handlers), TASKFLEET_REDIS_URL=url)
        env.pop("PYTHONSTARTUP", None)
        argv = [python, "-m", "taskfleet", "worker", "--queue", QUEUE, "--handler"]
        argv += ["coldstart_tasks:noop", "--pod", "cold", "--runtime-dir", runtime]
        argv += ["--log-level", "warning"]
        t0 = time.perf_counter()
        worker = subprocess.Popen(argv, env=env, cwd=handlers)
        try:
            if client.blpop([DONE], timeout=30) is None:
                raise RuntimeError(f"{python}: no task done within 30 s of the start")
            return (time.perf_counter() - t0) * 1000
        finally:
            worker.terminate()
            worker.wait(timeout=30)


def import_shares(python: str, handlers: Path) -> list[tuple[str, float]]:
    """Milliseconds of import (self time) by top-level package, for the worker's modules."""
    modules = ("taskfleet.cli", "taskfleet.cli.worker_commands", "taskfleet.worker.start")
    code = f"import {', '.join(modules)}, coldstart_tasks"
    err = subprocess.run(
        [python, "-X", "importtime", "-c", code],
        env=dict(os.environ, PYTHONPATH=str(handlers)),
        cwd=handlers,
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    shares: dict[str, float] = {}
    for line in err.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if found:
            package = found.group(2).split(".")[0]
            shares[package] = shares.get(package, 0.0) + int(found.group(1)) / 1000
    return sorted(shares.items(), key=lambda item: -item[1])[:6]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=9, help="starts per environment")
    args = parser.parse_args()
    pythons = {"development venv": sys.executable, "image's dependencies": str(image_python())}
    with tempfile.TemporaryDirectory(prefix="coldstart-redis-") as tmp:
        with socket.socket() as probe:  # a free port: never another server's data
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL,
        )
        try:
            url = f"redis://127.0.0.1:{port}/0"
            client = redis.Redis.from_url(url)
            deadline = time.monotonic() + 10
            while True:
                if server.poll() is not None:
                    raise RuntimeError(f"redis-server on port {port} exited: {server.returncode}")
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            handlers = Path(tmp) / "handlers"
            handlers.mkdir()
            (handlers / "coldstart_tasks.py").write_text(HANDLERS)
            samples: dict[str, list[float]] = {name: [] for name in pythons}
            for python in pythons.values():  # a first, untimed start each (page cache, .pyc)
                start_once(python, url, client, handlers)
            for _ in range(args.starts):
                for name, python in pythons.items():
                    samples[name].append(start_once(python, url, client, handlers))
            print(f"worker cold start, exec -> first task done, {args.starts} alternating starts:")
            for name, python in pythons.items():
                got = sorted(samples[name])
                shares = ", ".join(f"{pkg} {ms:.0f}" for pkg, ms in import_shares(python, handlers))
                print(
                    f"  {name}: median {statistics.median(got):.0f} ms"
                    f" (min {got[0]:.0f}, max {got[-1]:.0f}); imports by package, ms: {shares}"
                )
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
