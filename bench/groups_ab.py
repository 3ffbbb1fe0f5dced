"""The cost of groups on the drain, alternating on one fresh redis-server: the drain of
ungrouped tasks before groups (the main checkout's venv, ``BASE_PYTHON``) and with them
(this venv), and this venv's drain with every task in one of 100 groups. Rounds whose
order rotates each time (PAIRS=3 by default). Figures, never pass/fail.

    BASE_PYTHON=/path/to/main/.venv/bin/python .venv/bin/python -m bench.groups_ab
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
BASE = Path(os.environ.get("BASE_PYTHON", "/work/main/.venv/bin/python"))


def drain(python: Path, variant: str | None, url: str, n: int, tmp: Path) -> float:
    """One harness run without latency samples and cold starts: its drain rate."""
    out = tmp / "row.json"
    argv = [
        str(python), str(SYSTEMS_DIR / "harness.py"), "--system", "taskfleet",
        "--redis-url", url, "--out", str(out), "--n", str(n), "--latency-samples", "1",
        "--latency-warmup", "0", "--cold-starts", "0", *(["--variant", variant] if variant else []),
    ]  # fmt: skip
    subprocess.run(argv, check=True, timeout=900)
    return float(json.loads(out.read_text())["drain_per_s"])


def main() -> int:
    args = parse_args(
        ["--no-write", "--n", os.environ.get("N", "20000"), "--latency-samples", "10"]
    )
    rows: dict[str, list[float]] = {"before": [], "ungrouped": [], "grouped": []}
    runs = [
        ("before", BASE, None),
        ("ungrouped", Path(sys.executable), None),
        ("grouped", Path(sys.executable), "groups"),
    ]
    with redis_server() as (url, _), tempfile.TemporaryDirectory() as tmp:
        client = redis.Redis.from_url(url)
        for i in range(PAIRS):
            for key, python, variant in runs[i % 3 :] + runs[: i % 3]:
                client.flushall()
                rows[key].append(drain(python, variant, url, args.n, Path(tmp)))
        client.close()
    print(f"\ngroups, {PAIRS} rotating rounds, N = {args.n}:")
    for key, values in rows.items():
        print(f"  {key:>9}: drain /s {', '.join(f'{v:,.0f}' for v in values)}")
    before = statistics.mean(rows["before"])
    for key in ("ungrouped", "grouped"):
        change = (statistics.mean(rows[key]) - before) / before * 100
        print(f"  {key}: mean drain {change:+.1f} % against before")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
