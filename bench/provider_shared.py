"""One provider quota shared by three queues in two languages, and groups fair by spend.

``python -m bench.provider_shared`` (``make bench-provider`` runs it after
``bench.provider``) starts a fresh redis-server and a fake provider: a local HTTP server
that takes a call's input tokens (its request says how many), answers 429 past
``LIMIT`` input tokens per fixed window of ``PERIOD`` seconds (windows from the epoch,
as a quota's), and counts what it received, per window and per queue.

**Shared quota.** Three queues call it: ``py-a`` and ``py-b`` (a Python worker process
each) and ``node-c`` (a ``taskfleet-node worker``), 4 slots each, a backlog each. Every
task estimates ``EST`` input tokens and really uses 3x that. Two runs, one after the
other on the same provider settings:

- ``quota``: every task names the quota ``provider`` (limit ``LIMIT`` input tokens per
  ``PERIOD``); the handler settles the real use; a 429 raises ``RateLimited(quota=...)``;
- ``per-queue``: today's per-queue limits: each queue's own ``rate_limit_cost`` of a third
  of the limit per ``PERIOD``, the task's cost its estimate, ``report_cost`` (Node
  ``reportCost``) of the real use; a 429 raises ``RateLimited`` (that queue's claim pause).

Reported per full window: the input tokens the provider accepted (the settled use)
against the limit, and the requests it refused (over its limit), from the second window
on (the first is the ramp, as the estimates are low until the first settlements).

**Fair by spend.** One queue, two groups of weight 1, a Python worker of 4 slots: ``small``
tasks use 100 output tokens, ``big`` ones 1,000; each estimates a third. The provider
takes 0.1 ms per output token, so the slots are the bottleneck. Fair by claims, then fair
by spend (``set_fair_by("output_tokens")``): output tokens per minute of each group.

``PROVIDER_SHORT=1``: 20 s runs of 2 s windows (a check while developing); else 60 s
runs of 5 s windows. Figures, never pass/fail; results to bench/results/.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from taskfleet import Queue, QueueConfig, Quota, RateLimited, current_task

REPO = Path(__file__).resolve().parents[1]
NODE_CLIENT = REPO / "clients" / "node" / "dist" / "src"
SHORT = os.environ.get("PROVIDER_SHORT", "") not in ("", "0")
RUN_S = 20.0 if SHORT else 60.0
PERIOD = 2.0 if SHORT else 5.0
EST = 100
REAL = 3 * EST
#: input tokens the provider takes per window: 20 (short) or 50 calls' real use
LIMIT = (20 if SHORT else 50) * REAL
QUOTA = "provider"
QUEUES = ("py-a", "py-b", "node-c")
SLOTS = 4
#: the provider's time per output token (fair-by-spend runs), s
PER_TOKEN_S = 0.0001


@dataclass
class Provider:
    """Fixed windows of ``period_s`` (from the epoch), ``limit`` input tokens each (0: none)."""

    limit: int
    period_s: float
    tokens: Counter[int] = field(default_factory=Counter)
    accepted: Counter[int] = field(default_factory=Counter)
    refused: Counter[int] = field(default_factory=Counter)
    by_queue: Counter[str] = field(default_factory=Counter)
    output: dict[str, list[tuple[float, int]]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, call: dict[str, Any]) -> tuple[int, float]:
        """(status, seconds to the window's end) for a call now."""
        now = time.time()
        window = math.floor(now / self.period_s)
        n = int(call.get("input_tokens", 0))
        with self.lock:
            if self.limit and self.tokens[window] + n > self.limit:
                self.refused[window] += 1
                return 429, (window + 1) * self.period_s - now
            self.tokens[window] += n
            self.accepted[window] += 1
            self.by_queue[call.get("queue", "")] += n
            if call.get("group"):
                self.output[call["group"]].append((now, int(call.get("output_tokens", 0))))
        return 200, 0.0

    def windows(self, start: float, end: float) -> list[tuple[int, int, int]]:
        """(input tokens accepted, calls accepted, calls refused) of each full window."""
        first, last = math.ceil(start / self.period_s), math.floor(end / self.period_s)
        return [(self.tokens[w], self.accepted[w], self.refused[w]) for w in range(first, last)]


@contextmanager
def serve(provider: Provider) -> Iterator[str]:
    """The provider on a local port: yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            time.sleep(PER_TOKEN_S * int(body.get("output_tokens", 0)))
            status, left = provider.answer(body)
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", f"{max(left, 0.05):.3f}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def call(payload: dict[str, Any]) -> str:
    """The Python handler: one call to the provider, then settle (or report) the real use;
    a 429 pauses the quota (mode ``quota``) or the queue's claims (``per-queue``)."""
    task = current_task()
    body: dict[str, Any] = {
        k: payload[k] for k in ("input_tokens", "output_tokens", "group") if k in payload
    }
    body["queue"] = task.queue
    request = urllib.request.Request(payload["url"], data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            reply.read()
    except urllib.error.HTTPError as error:
        if error.code != 429:
            raise
        after = float(error.headers.get("Retry-After", "1"))
        if payload["mode"] == "per-queue":
            raise RateLimited(after, "429 from the provider") from None
        raise RateLimited(after, "429 from the provider", quota=QUOTA) from None
    used = {k: int(payload[k]) for k in ("input_tokens", "output_tokens") if k in payload}
    if payload["mode"] == "per-queue":
        task.report_cost(used["input_tokens"])
    else:
        task.settle(QUOTA, **used)
    return "ok"


def python_worker(url: str, queue: str, tmp: str, extra: list[str] | None = None) -> list[str]:
    return [
        *(sys.executable, "-m", "taskfleet", "worker", "--queue", queue),
        *("--handler", "bench.provider_shared:call", "--redis-url", url),
        *("--concurrency", str(SLOTS), "--log-level", "error", "--pod", f"{queue}-0"),
        *("--runtime-dir", f"{tmp}/{queue}", *(extra or [])),
    ]


def node_worker(url: str, queue: str, tmp: str) -> list[str]:
    return [
        *("node", str(NODE_CLIENT / "taskfleet-node.js"), "worker", "--queue", queue),
        *("--handler", "./provider_shared.mjs:call", "--app-dir", str(REPO / "bench" / "node")),
        *("--concurrency", str(SLOTS), "--pod", f"{queue}-0", "--runtime-dir", f"{tmp}/{queue}"),
        *("--log-level", "error", "--redis-url", url),
    ]


@contextmanager
def processes(argvs: list[list[str]]) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = dict(os.environ, PYTHONPATH=str(REPO), TASKFLEET_NODE_ENTRY=str(NODE_CLIENT / "index.js"))
    procs = [subprocess.Popen(argv, cwd=REPO, env=env) for argv in argvs]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_calls(provider: Provider, procs: list[subprocess.Popen[bytes]], n: int) -> None:
    deadline = time.monotonic() + 90
    while sum(provider.accepted.values()) + sum(provider.refused.values()) < n:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError("the workers did not start calling the provider")
        time.sleep(0.05)


def shared_run(redis_url: str, mode: str) -> dict[str, Any]:
    """The three queues against a fresh provider for RUN_S, ``mode`` ``quota`` or ``per-queue``."""
    provider = Provider(LIMIT, PERIOD)
    quota = Quota(QUOTA, redis_url=redis_url)
    quota.configure(limits={"input_tokens": LIMIT}, period_s=PERIOD)
    quota.resume()
    backlog = int(RUN_S / PERIOD * LIMIT / REAL * 2) + 100
    with serve(provider) as url, tempfile.TemporaryDirectory(prefix="bench-pq-") as tmp:
        for name in QUEUES:
            with Queue(name, redis_url) as q:
                q.purge()
                q.resume_claims()
                if mode == "per-queue":
                    share = LIMIT // 3  # a third of the limit each, charged at the estimate
                    q.configure(QueueConfig(rate_limit_cost=share, rate_limit_period_s=PERIOD))
                else:
                    q.configure(QueueConfig())
                quotas = {QUOTA: {"input_tokens": EST}} if mode == "quota" else None
                item: dict[str, Any] = {"payload": {"url": url, "mode": mode, "input_tokens": REAL}}
                if mode == "per-queue":
                    item["cost"] = EST
                else:
                    item["quotas"] = quotas
                q.enqueue_many([item] * backlog)
        argvs = [python_worker(redis_url, q, tmp) for q in QUEUES[:2]]
        argvs.append(node_worker(redis_url, QUEUES[2], tmp))
        with processes(argvs) as procs:
            wait_calls(provider, procs, 3)
            start = time.time()
            end = (math.floor(start / PERIOD) + round(RUN_S / PERIOD) + 1) * PERIOD
            # the quota's use as the claims see it (settled, plus the estimates in flight):
            # its highest value in each window
            used: Counter[int] = Counter()
            while time.time() < end + 0.1:
                got = quota.get() if mode == "quota" else None
                if got is not None and "input_tokens" in got.units:
                    w = math.floor(got.window_ms / 1000 / PERIOD)
                    used[w] = max(used[w], got.units["input_tokens"].used)
                time.sleep(0.05)
            windows = provider.windows(start, end)
            by_queue = dict(provider.by_queue)
            first = math.ceil(start / PERIOD)
            quota_used = [used[w] for w in range(first, first + len(windows))]
    quota.close()
    later = windows[1:]
    return {
        "mode": mode,
        "windows": [{"tokens": t, "calls": a, "refused": r} for t, a, r in windows],
        "quota_used": quota_used if mode == "quota" else None,
        "max_tokens": max(t for t, _, _ in windows),
        "mean_tokens": sum(t for t, _, _ in windows) / len(windows),
        "refused_after_first": sum(r for _, _, r in later),
        "input_tokens_by_queue": by_queue,
    }


def fair_run(redis_url: str, fair_by: str | None) -> dict[str, Any]:
    """Two groups, weight 1 each, one of 10x larger tasks; output tokens/min of each."""
    provider = Provider(0, PERIOD)
    quota = Quota(QUOTA, redis_url=redis_url)
    quota.configure(limits={"output_tokens": 10**9}, period_s=PERIOD)
    quota.resume()
    sizes = {"small": 100, "big": 1000}
    with serve(provider) as url, tempfile.TemporaryDirectory(prefix="bench-fair-") as tmp:
        with Queue("fair", redis_url) as q:
            q.purge()
            q.configure(QueueConfig())
            q.set_fair_by(fair_by)
            for group, size in sizes.items():
                item = {
                    "payload": {"url": url, "mode": "fair", "output_tokens": size, "group": group},
                    "group": group,
                    "quotas": {QUOTA: {"output_tokens": size // 3}},
                }
                q.enqueue_many([item] * int(RUN_S * 200))
        with processes([python_worker(redis_url, "fair", tmp)]) as procs:
            wait_calls(provider, procs, 3)
            start = time.time() + 2.0  # the first claims' estimates settle in the first 2 s
            time.sleep(RUN_S + 2.0)
            end = time.time()
            with provider.lock:
                seen = {g: [n for t, n in provider.output[g] if start <= t < end] for g in sizes}
    per_min = {g: sum(ns) * 60 / (end - start) for g, ns in seen.items()}
    calls = {g: len(ns) for g, ns in seen.items()}
    quota.close()
    low, high = min(per_min.values()), max(per_min.values())
    return {
        "fair_by": fair_by or "claims",
        "output_tokens_per_min": {g: round(v) for g, v in per_min.items()},
        "calls": calls,
        "spread_pct": round(100 * (high - low) / ((high + low) / 2), 1) if high else 0.0,
    }


def main() -> int:
    from bench.native import prepare
    from bench.run import redis_server

    prepare("taskfleet-node")
    load = os.getloadavg()[0]
    print(
        f"provider: {LIMIT} input tokens per {PERIOD:g} s window, 429 past it; tasks estimate "
        f"{EST}, use {REAL}; queues {', '.join(QUEUES)} ({SLOTS} slots each; the last a Node "
        f"worker); {RUN_S:g} s runs; {os.cpu_count()} cores, load {load:.2f} (under load)"
    )
    result: dict[str, Any] = {
        "when": datetime.now(UTC).strftime("%Y-%m-%dT%H%MZ"),
        "short": SHORT,
        "limit": LIMIT,
        "period_s": PERIOD,
        "run_s": RUN_S,
        "load_before": load,
        "shared": [],
        "fair": [],
    }
    with redis_server() as (url, version):
        result["redis"] = version
        for mode in ("quota", "per-queue"):
            run = shared_run(url, mode)
            result["shared"].append(run)
            per = " ".join(f"{w['tokens']}/{w['refused']}" for w in run["windows"])
            seen = " ".join(str(u) for u in run["quota_used"] or [])
            print(
                f"  {mode:<9} per window tokens/refused: {per}\n"
                + (f"            the quota's highest use per window: {seen}\n" if seen else "")
                + f"            "
                f"max {run['max_tokens']} (limit {LIMIT}), mean "
                f"{run['mean_tokens']:.0f}; "
                f"refused after the first window {run['refused_after_first']}; by queue "
                f"{run['input_tokens_by_queue']}"
            )
        for fair_by in (None, "output_tokens"):
            run = fair_run(url, fair_by)
            result["fair"].append(run)
            print(
                f"  fair by {run['fair_by']:<13} output tokens/min {run['output_tokens_per_min']}"
                f" calls {run['calls']}; spread {run['spread_pct']} %"
            )
    result["load_after"] = os.getloadavg()[0]
    out = REPO / "bench" / "results" / f"provider-shared-{result['when']}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
