"""A rate-limited provider behind a fleet: quota-wide backoff against per-task retries.

``python -m bench.provider [--workers 4] [--limit 20] [--window 5] [--windows 4]`` starts
a fresh redis-server and a simulated provider: a local HTTP server that accepts
``--limit`` requests per fixed window of ``--window`` seconds and answers 429 (with a
Retry-After to the window's end) past that. ``--workers`` worker processes (concurrency 1
each, default prefetch) run tasks whose handler makes one request to it, twice:

- ``RateLimited``: a 429 raises ``RateLimited(retry_after=...)``: the whole fleet stops
  claiming until then (the queue's claim pause);
- ``RetryAfter``: a 429 raises ``RetryAfter(...)``, what a handler could do before: that
  task waits, the other workers go on calling.

It prints the requests the provider saw per full window, accepted and refused. With the
claim pause a window sees at most the limit plus one request per worker (each worker's
request in flight when the limit is met); without it, many more. Figures only, never
pass/fail (tests/producer/test_quota_fleet.py asserts the bound loosely).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from taskfleet import Queue, RateLimited, RetryAfter

REPO = Path(__file__).resolve().parents[1]
QUEUE = "provider"


@dataclass
class Provider:
    """Fixed windows of ``window_s`` (aligned to the epoch), ``limit`` requests each."""

    limit: int
    window_s: float
    accepted: Counter[int] = field(default_factory=Counter)
    refused: Counter[int] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self) -> tuple[int, float]:
        """(status, seconds to the window's end) for a request now."""
        now = time.time()
        window = math.floor(now / self.window_s)
        with self.lock:
            if self.accepted[window] < self.limit:
                self.accepted[window] += 1
                return 200, 0.0
            self.refused[window] += 1
        return 429, (window + 1) * self.window_s - now

    def full_windows(self, start: float, end: float) -> list[tuple[int, int]]:
        """(accepted, refused) of each window wholly within [start, end]."""
        first = math.ceil(start / self.window_s)
        last = math.floor(end / self.window_s)
        return [(self.accepted[w], self.refused[w]) for w in range(first, last)]


@contextmanager
def serve(provider: Provider) -> Iterator[str]:
    """The provider on a local port: yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, left = provider.answer()
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", str(max(1, math.ceil(left))))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def call(payload: dict[str, Any]) -> str:
    """The handler: one request to the provider; a 429 raises as ``payload["mode"]`` says."""
    try:
        with urllib.request.urlopen(payload["url"], timeout=10) as reply:
            return str(reply.status)
    except urllib.error.HTTPError as error:
        if error.code != 429:
            raise
        after = float(error.headers.get("Retry-After", "1"))
        if payload["mode"] == "pause":
            raise RateLimited(after, "429 from the provider") from None
        raise RetryAfter(after, "429 from the provider") from None


@dataclass
class FleetRun:
    mode: str
    windows: list[tuple[int, int]]  # (accepted, refused) per full window

    @property
    def worst(self) -> int:
        return max(a + r for a, r in self.windows)

    @property
    def mean(self) -> float:
        return sum(a + r for a, r in self.windows) / len(self.windows)


def run_fleet(
    redis_url: str,
    mode: str,
    *,
    workers: int = 4,
    limit: int = 20,
    window_s: float = 5.0,
    windows: int = 4,
    tasks: int = 5000,
) -> FleetRun:
    """``workers`` worker processes against a fresh provider for ``windows`` full windows."""
    provider = Provider(limit, window_s)
    procs: list[subprocess.Popen[bytes]] = []
    with (
        serve(provider) as url,
        Queue(QUEUE, redis_url) as queue,
        tempfile.TemporaryDirectory(prefix="bench-provider-") as tmp,
    ):
        queue.purge()
        queue.resume_claims()
        queue.enqueue_many([{"payload": {"url": url, "mode": mode}} for _ in range(tasks)])
        env = dict(os.environ, PYTHONPATH=str(REPO))
        try:
            for i in range(workers):
                argv = [
                    *(sys.executable, "-m", "taskfleet", "worker", "--queue", QUEUE),
                    *("--handler", "bench.provider:call", "--redis-url", redis_url),
                    *("--concurrency", "1", "--log-level", "warning", "--pod", f"w{i}"),
                    *("--runtime-dir", f"{tmp}/w{i}"),
                ]
                procs.append(subprocess.Popen(argv, cwd=REPO, env=env))
            # from the first window every worker has begun in, for `windows` full windows
            deadline = time.monotonic() + 60
            while sum(provider.accepted.values()) + sum(provider.refused.values()) < workers:
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError("the workers did not start calling the provider")
                time.sleep(0.05)
            start = time.time()
            end = (math.floor(start / window_s) + windows + 1) * window_s
            time.sleep(max(0.0, end - time.time()) + 0.05)
            return FleetRun(mode, provider.full_windows(start, end))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    from bench.run import redis_server

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--windows", type=int, default=4)
    args = parser.parse_args(argv)
    bound = args.limit + args.workers
    print(f"provider: {args.limit} requests per {args.window:g} s window, 429 past it; "
          f"{args.workers} worker processes (concurrency 1); bound limit + workers = {bound}; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")  # fmt: skip
    with redis_server() as (url, _version):
        for mode, name in (
            ("pause", "RateLimited (claim pause)"),
            ("retry", "RetryAfter (per task)"),
        ):
            run = run_fleet(
                url, mode, workers=args.workers, limit=args.limit, window_s=args.window,
                windows=args.windows,
            )  # fmt: skip
            per = ", ".join(f"{a}+{r}" for a, r in run.windows)
            print(f"  {name:<26} requests per window (accepted+refused): {per}; "
                  f"worst {run.worst}, mean {run.mean:.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
