"""Charts of the benchmarks' reports, PNG and SVG, drawn headless (matplotlib's Agg).

``bench.run`` draws the peers' table (``peers.png``/``.svg``: drain per second, and worker
and Redis CPU per task; ``taskfleet.png`` for a run without peers) and ``bench.scale``
the scale curves (``scale.png``/``.svg``, log x-axis), ``bench.operator_memory`` the
RSS per create/delete cycle (``operator-memory.png``/``.svg``) into bench/results/charts/. Each
chart's title carries its run's date and the machine's load before and after: figures
from a loaded machine say so.

    .venv/bin/python -m bench.charts bench/results/<run>.json   # draw a stored report again

matplotlib is a development dependency (pyproject.toml's ``dev`` group), never the
library's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only
# SVG text stays text (searchable, smaller) and its ids are the same from run to run
matplotlib.rcParams["svg.fonttype"] = "none"
matplotlib.rcParams["svg.hashsalt"] = "taskfleet-bench"
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

CHARTS = "charts"
FORMATS = ("png", "svg")


def load_line(report: dict[str, Any]) -> str:
    """'<date>, N cores, load X before, Y after' from a report of bench.run or bench.scale."""
    m = report.get("machine", {})
    before = m.get("loadavg_before", [float("nan")])[0]
    after = (report.get("loadavg_after") or m.get("loadavg_after") or [float("nan")])[0]
    quiet = "a quiet machine" if max(before, after) < 1.5 else "under load"
    return (
        f"{report.get('started', '?')}, {m.get('nproc', '?')} cores, "
        f"load {before:.1f} before, {after:.1f} after ({quiet})"
    )


def save(fig: Figure, out: Path, name: str) -> list[Path]:
    folder = out / CHARTS
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in FORMATS:
        path = folder / f"{name}.{fmt}"
        # no timestamps in the SVG: the same report draws the same bytes
        meta = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(path, format=fmt, dpi=100, metadata=meta)
        paths.append(path)
    plt.close(fig)
    return paths


def peers(report: dict[str, Any], out: Path, name: str = "peers") -> list[Path]:
    """The table of one bench.run: drain /s, and worker + Redis CPU µs per task."""
    rows = [r for r in report["results"] if "failed" not in r and r.get("drain_per_s")]
    names = [f"{r['system']}" for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.45 * len(rows) + 1.8))
    y = list(range(len(rows)))
    left.barh(y, [r["drain_per_s"] for r in rows], color="#4c72b0")
    left.set_yticks(y, names)
    left.invert_yaxis()
    left.set_xlabel("drain, tasks/s (higher is better)")
    worker = [r.get("drain_worker_cpu_us") or 0 for r in rows]
    redis_cpu = [r.get("drain_redis_cpu_us") or 0 for r in rows]
    right.barh(y, worker, color="#dd8452", label="worker")
    right.barh(y, redis_cpu, left=worker, color="#55a868", label="Redis")
    right.set_yticks(y, [""] * len(rows))
    right.invert_yaxis()
    right.set_xlabel("CPU µs per task while draining (lower is better)")
    right.legend(loc="upper right")
    totals = [w + r for w, r in zip(worker, redis_cpu, strict=True)]
    for ax, values in ((left, [r["drain_per_s"] for r in rows]), (right, totals)):
        for i, v in enumerate(values):
            ax.annotate(f"{v:,.0f}", (v, i), xytext=(3, 0), textcoords="offset points",
                        va="center", fontsize=8)  # fmt: skip
        ax.margins(x=0.15)
    fig.suptitle(f"make bench: {report.get('n', '?'):,} tasks, {report.get('workers', '?')} "
                 f"worker processes each\n{load_line(report)}", fontsize=10)  # fmt: skip
    fig.tight_layout()
    return save(fig, out, name)


def _curve(ax: Any, series: Sequence[dict[str, Any]], x: str, y: str, label: str) -> None:
    if series and all(y in r for r in series):  # an older report may lack a figure
        ax.plot([r[x] for r in series], [r[y] for r in series], marker="o", label=label)


def _side(ax: Any, side: dict[str, Any] | None, field: str, label: str) -> None:
    """The smallest and largest size measured in turns (bench.scale's side by side)."""
    if side and field in side:
        v = side[field]
        ax.plot([side["small"], side["large"]], [v["small"], v["large"]], linestyle="--",
                marker="s", label=f"{label} ({v['ratio']:.2f}x)")  # fmt: skip


def scale(report: dict[str, Any], out: Path) -> list[Path]:
    """bench.scale's curves against the backlog (log x), each figure's series together."""
    pending, delayed = report.get("pending", []), report.get("delayed", [])
    groups, sweep = report.get("groups", []), report.get("sweep", [])
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    panels = [
        (
            axes[0][0],
            "claim + complete, Redis µs per task (median call)",
            "claim_redis_us_per_task_p50",
        ),
        (axes[0][1], "claim call p99, server µs", "claim_call_p99_us"),
        (axes[0][2], "drain, tasks/s (2 workers)", "drain_per_s"),
        (axes[1][0], "Redis bytes per task stored", "bytes_per_task"),
    ]
    for ax, title, field in panels:
        _curve(ax, pending, "size", field, "N pending")
        _curve(ax, delayed, "size", field, "N delayed")
        for kind in ("pending", "delayed"):
            _side(ax, report.get(f"{kind}_side_by_side"), field, f"{kind}, in turns")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("backlog N (tasks)")
    ax = axes[1][1]
    _curve(ax, groups, "groups", "claim_redis_us_per_task_p50", "Redis µs per task (median call)")
    _curve(ax, groups, "groups", "claim_redis_us_per_task", "Redis µs per task (mean)")
    _side(ax, report.get("groups_side_by_side"), "claim_redis_us_per_task_p50", "in turns")
    ax.set_title("claims over G groups, Redis µs per task", fontsize=10)
    ax.set_xlabel("groups G")
    ax = axes[1][2]
    _curve(ax, sweep, "size", "promote_cpu_us_per_task", "promotion, CPU µs per task")
    _curve(ax, sweep, "size", "expire_cpu_us_per_task", "expiry, CPU µs per task")
    _curve(ax, sweep, "size", "idle_sweep_us", "a sweep, nothing due, µs")
    ax.set_title("the sweep with D delayed / expired", fontsize=10)
    ax.set_xlabel("D (tasks)")
    for ax in (a for row in axes for a in row):
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(bottom=0)
        ax.grid(True, which="major", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(f"make bench-scale: costs against the backlog (flat is the goal)\n"
                 f"{load_line(report)}", fontsize=10)  # fmt: skip
    fig.tight_layout()
    return save(fig, out, "scale")


def operator_memory(report: dict[str, Any], out: Path) -> list[Path]:
    """bench.operator_memory: each replica's RSS per create/delete cycle, full (N
    TaskQueues in place) and empty (all deleted), beside its start and the goal (the
    leader at most 0.08 MB per TaskQueue above its start)."""
    cycles = report.get("cycles", [])
    queues = int(report.get("queues", 0))
    start = report.get("start_rss_mb", {})
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = [c["cycle"] for c in cycles]
    for role, colour in (("leader", "tab:blue"), ("standby", "tab:orange")):
        ax.plot(xs, [c["rss_full_mb"][role] for c in cycles], "o-", color=colour,
                label=f"{role}, {queues:,} TaskQueues")  # fmt: skip
        emptied = [c for c in cycles if c.get("rss_empty_mb")]  # the last may be kept
        ax.plot([c["cycle"] for c in emptied], [c["rss_empty_mb"][role] for c in emptied],
                "s--", color=colour, alpha=0.6, label=f"{role}, after deleting them")  # fmt: skip
    if "leader" in start:
        ax.axhline(start["leader"], color="grey", linewidth=0.8, label="start (no TaskQueue)")
        goal = start["leader"] + OPERATOR_MB_PER_QUEUE_GOAL * queues
        label = f"goal: start + {OPERATOR_MB_PER_QUEUE_GOAL} MB per TaskQueue"
        ax.axhline(goal, color="tab:green", linestyle=":", label=label)
    ax.set_xlabel("create/delete cycle")
    ax.set_ylabel("RSS, MB")
    ax.set_xticks(xs)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    load = report.get("load_average_1m")
    shown = "?" if load is None else f"{load:.1f}"
    title = "make bench-operator-memory: RSS per cycle (flat is the goal)"
    ax.set_title(f"{title}\n{report.get('started', '?')}, load {shown} at the end", fontsize=10)
    fig.tight_layout()
    return save(fig, out, "operator-memory")


#: The operator's memory goal per TaskQueue above an idle operator, MB.
OPERATOR_MB_PER_QUEUE_GOAL = 0.08


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.charts bench/results/<run>.json", file=sys.stderr)
        return 2
    path = Path(argv[0])
    report = json.loads(path.read_text())
    draw = scale if "pending" in report else operator_memory if "start_rss_mb" in report else peers
    for written in draw(report, path.parent):
        print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
