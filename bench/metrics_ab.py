"""The cost of worker metrics on the drain, alternating: sync rows without and with
``--metrics-port``, in pairs whose order flips each time, on one fresh redis-server.

    make bench-metrics            # PAIRS=6 by default

``make bench`` prints a metrics-on row too, but always after the async row: across runs
its distance from the sync row swings by more than 10 % with the machine's state. This
takes the order out of it. Figures, never pass/fail.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

import redis

from bench.run import parse_args, redis_server, run_system

PAIRS = int(os.environ.get("PAIRS", "6"))


def main() -> int:
    args = parse_args(["--no-write", "--n", "20000", "--latency-samples", "10"])
    rows: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    with redis_server() as (url, _), tempfile.TemporaryDirectory() as tmp:
        client = redis.Redis.from_url(url)
        for i in range(PAIRS):
            for variant in (None, "metrics") if i % 2 == 0 else ("metrics", None):
                client.flushall()
                r = run_system(
                    "taskfleet", variant, Path(sys.executable), url=url, args=args, tmp=Path(tmp)
                )
                rows["on" if variant else "off"].append(
                    (r["drain_per_s"], r["drain_worker_cpu_us"])
                )
        client.close()
    print(f"\nmetrics off / on, {PAIRS} alternating pairs, N = {args.n}:")
    for key, values in rows.items():
        rates = ", ".join(f"{rate:,.0f}" for rate, _ in values)
        print(
            f"  {key:>3}: drain /s {rates}; worker CPU µs/task "
            f"{statistics.mean(cpu for _, cpu in values):.1f}"
        )
    off = statistics.mean(rate for rate, _ in rows["off"])
    on = statistics.mean(rate for rate, _ in rows["on"])
    change = (on - off) / off * 100
    print(f"  metrics on: mean drain {change:+.1f} % (budget: at most 3 % lower)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
