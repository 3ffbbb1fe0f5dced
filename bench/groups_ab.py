"""The cost of groups on the drain, alternating on one fresh redis-server: this venv's
drain of ungrouped tasks and its drain with every task in one of 100 groups, and, with
``BASE_PYTHON`` (another checkout's venv), that build's ungrouped drain as "before".
Rounds whose order rotates each time (PAIRS=3 by default). Each run gives its drain
rate and, steadier on a shared machine, the worker processes' and redis-server's CPU per
task over the same window. Figures, never pass/fail.

    .venv/bin/python -m bench.groups_ab
    BASE_PYTHON=/path/to/other/.venv/bin/python .venv/bin/python -m bench.groups_ab
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import redis

from bench.run import SYSTEMS_DIR, parse_args, redis_server

PAIRS = int(os.environ.get("PAIRS", "3"))
BASE = os.environ.get("BASE_PYTHON", "")
#: What each run reports: the drain rate, the workers' and Redis's CPU per task.
FIGURES = ("drain_per_s", "drain_worker_cpu_us", "drain_redis_cpu_us")


def drain(python: Path, variant: str | None, url: str, n: int, tmp: Path) -> dict[str, float]:
    """One harness run without latency samples and cold starts: its drain figures."""
    out = tmp / "row.json"
    argv = [
        str(python), str(SYSTEMS_DIR / "harness.py"), "--system", "taskfleet",
        "--redis-url", url, "--out", str(out), "--n", str(n), "--latency-samples", "1",
        "--latency-warmup", "0", "--cold-starts", "0", *(["--variant", variant] if variant else []),
    ]  # fmt: skip
    subprocess.run(argv, check=True, timeout=900)
    row = json.loads(out.read_text())
    return {key: float(row[key]) for key in FIGURES}


def main() -> int:
    args = parse_args(
        ["--no-write", "--n", os.environ.get("N", "20000"), "--latency-samples", "10"]
    )
    runs = [
        ("ungrouped", Path(sys.executable), None),
        ("grouped", Path(sys.executable), "groups"),
    ]
    if BASE:
        runs.insert(0, ("before", Path(BASE), None))
    rows: dict[str, list[dict[str, float]]] = {key: [] for key, _, _ in runs}
    with redis_server() as (url, _), tempfile.TemporaryDirectory() as tmp:
        client = redis.Redis.from_url(url)
        for i in range(PAIRS):
            turn = i % len(runs)
            for key, python, variant in runs[turn:] + runs[:turn]:
                client.flushall()
                rows[key].append(drain(python, variant, url, args.n, Path(tmp)))
        client.close()
    print(f"\ngroups, {PAIRS} rotating rounds, N = {args.n}:")
    for key, values in rows.items():
        rates = ", ".join(f"{v['drain_per_s']:,.0f}" for v in values)
        workers = ", ".join(f"{v['drain_worker_cpu_us']:.0f}" for v in values)
        redis_cpu = ", ".join(f"{v['drain_redis_cpu_us']:.0f}" for v in values)
        print(f"  {key:>9}: drain /s {rates}; CPU us/task: workers {workers}, Redis {redis_cpu}")
    base = "before" if BASE else "ungrouped"
    for key in [k for k in rows if k != base]:
        for figure in FIGURES:
            ref = statistics.mean(v[figure] for v in rows[base])
            mean = statistics.mean(v[figure] for v in rows[key])
            print(f"  {key}: mean {figure} {(mean - ref) / ref * 100:+.1f} % against {base}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
