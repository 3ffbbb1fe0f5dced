"""`make bench`: taskfleet's throughput and latency, optionally with peers side by side.

Starts one fresh redis-server (free port, temp dir, persistence off), then runs each
system's bench (bench/systems/harness.py with that system's adapter) one after another
against it, flushing Redis between systems. taskfleet runs in the project venv; each peer
runs in its own venv under bench/.peers/<name>, created from the pins below on first use
(their Redis client pins clash). Prints one table, writes bench/results/<stamp>.json, its
chart (bench/results/charts/peers.png and .svg) and, for a complete run with peers, the
results section of bench/README.md.

    python -m bench.run                          # taskfleet only (about a minute)
    python -m bench.run --peers rq,arq,celery,dramatiq
    python -m bench.run --peers taskfleet-node,bullmq,asynq   # Node and Go
    PEERS=1 make bench                           # every peer, and taskfleet's Node rows
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from bench import native

BENCH_DIR = Path(__file__).resolve().parent
SYSTEMS_DIR = BENCH_DIR / "systems"
PEERS_DIR = BENCH_DIR / ".peers"
RESULTS_DIR = BENCH_DIR / "results"
README = BENCH_DIR / "README.md"
README_START = "<!-- results:start -->"
README_END = "<!-- results:end -->"

# One venv per peer: rq and celery want redis-py 6+, arq pins redis<6.
PEER_PINS: dict[str, str] = {
    "rq": "rq==2.12.0",
    "arq": "arq==0.28.0",
    "celery": "celery[redis]==5.7.0",
    "dramatiq": "dramatiq[redis]==2.2.1",
}
# Systems outside Python (bench/native.py prepares them): peer name -> (the harness's
# system, its variant, what bench/native.py must prepare). Their harness runs in the
# project venv; their producers and workers are Node or Go processes.
NATIVE_PEERS: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "taskfleet-node": ("taskfleet_node", None, ("node", "taskfleet-node")),
    "taskfleet-node8": ("taskfleet_node", "8", ("node", "taskfleet-node")),
    "bullmq": ("bullmq", None, ("node",)),
    "bullmq8": ("bullmq", "8", ("node",)),
    "bullmq32": ("bullmq", "32", ("node",)),
    "asynq": ("asynq", None, ("asynq",)),
}
KNOWN_PEERS = [*PEER_PINS, *NATIVE_PEERS]
SYSTEM_TIMEOUT_S = 600.0
#: Metrics on may cost the drain at most this much, in %.
METRICS_COST_GOAL = 3
#: The drain counted from the workers' exec, in % of the drain from 10 % done: at least.
RAMP_GOAL = 85
# The project's goals for taskfleet: (result field, label, goal, higher is better).
TARGETS = [
    ("drain_per_s", "drain", 10_000, True),
    ("enqueue_batch_per_s", "batched enqueue", 20_000, True),
    ("latency_p50_ms", "idle p50 ms", 1.5, False),
    ("cold_start_ms", "cold start ms", 150, False),
]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def redis_server() -> Iterator[tuple[str, str]]:
    """A fresh redis-server for this run: yields (url, version)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: install it (make deps)")
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        port = free_port()
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
             "--save", "", "--appendonly", "no", "--logfile", f"{tmp}/redis.log"],
        )  # fmt: skip
        url = f"redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(url)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"redis-server did not start on port {port}") from None
                    time.sleep(0.02)
            yield url, str(client.info("server")["redis_version"])
        finally:
            client.close()
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def peer_python(name: str) -> Path:
    """The peer's venv interpreter, (re)created when missing or its pin changed."""
    venv = PEERS_DIR / name
    python = venv / "bin" / "python"
    stamp = venv / ".bench-req"
    pin = PEER_PINS[name]
    if python.exists() and stamp.exists() and stamp.read_text().strip() == pin:
        return python
    log(f"creating {venv} with {pin}")
    if venv.exists():
        shutil.rmtree(venv)
    base = shutil.which("python3") or sys.executable
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", pin], check=True)
    stamp.write_text(pin + "\n")
    return python


def machine() -> dict[str, Any]:
    load = Path("/proc/loadavg").read_text().split()[:3]
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_before": [float(x) for x in load],
    }


def run_system(
    name: str, variant: str | None, python: Path, *, url: str, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    label = f"{name}-{variant}" if variant else name
    out = tmp / f"{label}.json"
    argv = [
        str(python), str(SYSTEMS_DIR / "harness.py"), "--system", name,
        "--redis-url", url, "--out", str(out), "--n", str(args.n), "--batch", str(args.batch),
        "--workers", str(args.workers), "--latency-samples", str(args.latency_samples),
    ]  # fmt: skip
    if variant:
        argv += ["--variant", variant]
    env = dict(
        os.environ,
        BENCH_TASKFLEET_CONCURRENCY=str(args.taskfleet_concurrency),
        BENCH_TASKFLEET_LOG_LEVEL=args.taskfleet_log_level,
    )
    log(f"{label}: {python}")
    started = time.monotonic()
    try:
        subprocess.run(argv, check=True, timeout=SYSTEM_TIMEOUT_S, env=env)
        result: dict[str, Any] = json.loads(out.read_text())
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        # One system failing must not cost the others' figures; the row says it failed.
        log(f"{label}: failed: {exc}")
        result = {"system": label, "version": "?", "failed": str(exc)}
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def table(results: list[dict[str, Any]]) -> str:
    header = (
        "| system | enqueue 1-by-1 /s | enqueue batched /s | drain /s (2 procs, from 10 %) "
        "| drain /s from start | first done ms | cold start ms "
        "| worker CPU µs/task | Redis CPU µs/task | p50 ms | p99 ms |"
    )
    rows = [header, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in results:
        if "failed" in r:
            rows.append(f"| {r['system']} | failed | | | | | | | | | |")
            continue
        rows.append(
            f"| {r['system']} {r['version']} | {fmt(r['enqueue_single_per_s'])} "
            f"| {fmt(r['enqueue_batch_per_s'])} | {fmt(r['drain_per_s'])} "
            f"| {fmt(r.get('drain_from_start_per_s'))} | {fmt(r.get('drain_first_done_ms'))} "
            f"| {fmt(r.get('cold_start_ms'))} "
            f"| {fmt(r.get('drain_worker_cpu_us'))} | {fmt(r.get('drain_redis_cpu_us'))} "
            f"| {fmt(r['latency_p50_ms'], 2)} | {fmt(r['latency_p99_ms'], 2)} |"
        )
    return "\n".join(rows)


def summary(report: dict[str, Any]) -> str:
    m = report["machine"]
    load = m["loadavg_before"]
    busy = load[0] > 0.5 * (m["nproc"] or 1)
    results = report["results"]
    lines = [
        f"Run {report['started']} on {m['nproc']} cores ({m['cpu']}), Linux {m['kernel']}, "
        f"Redis {report['redis_version']} (fresh server, persistence off).",
        f"Load average before the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, after: "
        + " ".join(f"{x:.2f}" for x in report["loadavg_after"])
        + (" - the machine was busy, figures are pessimistic." if busy else "."),
        f"N = {report['n']} no-op tasks per measurement (batches of {report['batch']}), "
        f"{report['workers']} worker processes, latency over {report['latency_samples']} "
        "sequential tasks after a warm-up.",
        "",
        table(results),
        "",
    ]
    for r in results:
        if "failed" in r:
            lines.append(f"- {r['system']}: failed ({r['failed']}); see the log above.")
            continue
        share = "/".join(str(x) for x in r["drain_share"])
        batch = r["batch_method"] or "no batch API"
        lines.append(
            f"- {r['system']}: {r['worker_config']}; batches: {batch}; "
            f"drain share per process {share}."
        )
        lines.extend(f"  - note: {note}" for note in r["notes"])
    lines += ["", *targets(results, report.get("floor"))]
    return "\n".join(lines)


def floor_line(plain: dict[str, Any] | None, floor: dict[str, float] | None) -> list[str]:
    """The Python worker's drain as a share of what this machine allows, measured in the run."""
    if not (plain and floor and plain.get("drain_per_s")):
        return []
    share = plain["drain_per_s"] / floor["bound_per_s"]
    verdict = "met" if share >= FLOOR_GOAL else "missed"
    return [
        f"Floor: taskfleet drain {fmt(plain['drain_per_s'])} is {share * 100:.0f} % of this"
        f" run's bound {fmt(floor['bound_per_s'])}/s ({floor['cores']:.0f} cores / the handler's"
        f" write {floor['write_cpu_us']:.0f} + {floor['write_redis_us']:.0f} us and the queue's"
        f" own {floor['queue_cpu_us']:.0f} + {floor['queue_redis_us']:.0f} us per task;"
        f" goal >= {FLOOR_GOAL * 100:.0f} %: {verdict}){idle_note(plain, floor)}."
    ]


def idle_note(plain: dict[str, Any], floor: dict[str, float]) -> str:
    """How much of the cores the drain left idle, whoever else ran: near 0 on a shared
    machine, the bound's cores were busy (with other work too), not waiting on the drain."""
    idle = plain.get("drain_idle_cores")
    if idle is None:
        return ""
    return f"; cores idle over the drain: {idle:.2f} of {floor['cores']:.0f}"


def fastest_python_peer(by_name: dict[str, dict[str, Any]]) -> list[str]:
    """taskfleet's drain against the fastest of the Python peers that ran."""
    plain = by_name.get("taskfleet")
    peers = [r for n, r in by_name.items() if n.split(" ")[0] in PEER_PINS and r.get("drain_per_s")]
    if not (plain and plain.get("drain_per_s") and peers):
        return []
    best = max(peers, key=lambda r: r["drain_per_s"])
    ratio = plain["drain_per_s"] / best["drain_per_s"]
    goal = dict((k, g) for k, _, g in PEER_GOALS)["drain_per_s"]
    return [
        f"taskfleet vs the fastest Python peer ({best['system']}): drain {ratio:.2f}x"
        f" (goal >= {goal}x: {'met' if ratio >= goal else 'missed'})."
    ]


def targets(results: list[dict[str, Any]], floor: dict[str, float] | None = None) -> list[str]:
    """One line per taskfleet row: each figure next to the project's goal for it."""
    out = []
    for r in results:
        if not r["system"].startswith("taskfleet") or "failed" in r:
            continue
        parts = []
        for key, label, goal, higher in TARGETS:
            value = r.get(key)
            met = value is not None and (value >= goal if higher else value < goal)
            shown = fmt(value, 2 if not higher else 0)
            bound = f">= {goal:,}" if higher else f"< {goal}"
            parts.append(f"{label} {shown} (goal {bound}: {'met' if met else 'missed'})")
        steady, from_start = r.get("drain_per_s"), r.get("drain_from_start_per_s")
        if steady and from_start:
            share = round(from_start / steady * 100)
            met = share >= RAMP_GOAL
            parts.append(
                f"drain from start {share:.0f} % of the steady drain (goal >= {RAMP_GOAL} %:"
                f" {'met' if met else 'missed'}; the workers' start weighs less as N grows)"
            )
        out.append(f"Goals, {r['system']}: " + "; ".join(parts) + ".")
    by_name = {r["system"]: r for r in results if "failed" not in r}
    out += floor_line(by_name.get("taskfleet"), floor)
    out += peer_ratios(by_name)
    out += fastest_python_peer(by_name)
    plain, metered = by_name.get("taskfleet"), by_name.get("taskfleet (metrics on)")
    if plain and metered and plain.get("drain_per_s") and metered.get("drain_per_s"):
        cost = (1 - metered["drain_per_s"] / plain["drain_per_s"]) * 100
        verdict = "met" if cost <= METRICS_COST_GOAL else "missed"
        out.append(
            f"Metrics on: drain {fmt(metered['drain_per_s'])} vs {fmt(plain['drain_per_s'])} "
            f"without: {abs(cost):.1f} % {'lower' if cost >= 0 else 'higher'} (goal: at most "
            f"{METRICS_COST_GOAL} % lower; one run, noisy: {verdict})."
        )
    return out


#: taskfleet's goals against the peers in the same run: (figure, label, at least x peer).
PEER_GOALS = [("enqueue_single_per_s", "enqueue 1-by-1", 1.5), ("drain_per_s", "drain", 4.0)]
#: The Python worker's drain against the bound the same run measures (``bench.floors.floor``).
FLOOR_GOAL = 0.9
#: The same against the Node and Go peers (by name up to its first space), and what the
#: Node rows must do against a peer's row with the same slots per process (taskfleet-node8
#: beside bullmq8, taskfleet-node's 32 beside bullmq32); figures without a goal are printed
#: as ratios alone.
NATIVE_GOALS: dict[str, dict[str, float]] = {
    "bullmq": {"drain_per_s": 2.0},
    "asynq": {"drain_per_s": 1.5, "enqueue_single_per_s": 1.0},
}
NODE_GOALS: dict[str, dict[str, float]] = {"bullmq": {"drain_per_s": 2.0}}
RATIO_FIGURES = [
    ("enqueue_single_per_s", "enqueue 1-by-1"),
    ("enqueue_batch_per_s", "batched"),
    ("drain_per_s", "drain"),
]


def ratio_line(ours: dict[str, Any], peer: dict[str, Any], goals: dict[str, float]) -> str:
    parts = []
    for key, label in RATIO_FIGURES:
        mine, theirs = ours.get(key), peer.get(key)
        if not (mine and theirs):
            continue
        ratio = mine / theirs
        part = f"{label} {ratio:.2f}x"
        if key in goals:
            part += f" (goal >= {goals[key]}x: {'met' if ratio >= goals[key] else 'missed'})"
        parts.append(part)
    return f"{ours['system']} vs {peer['system']}: " + "; ".join(parts) + "."


def peer_ratios(by_name: dict[str, dict[str, Any]]) -> list[str]:
    """One line per peer: taskfleet's figures as multiples of the peer's, next to the goal."""
    plain = by_name.get("taskfleet")
    nodes = [row for name, row in by_name.items() if name.startswith("taskfleet (Node")]
    out = []
    for name, peer in by_name.items():
        if name.startswith("taskfleet"):
            continue
        family = name.split(" ")[0]
        if family in NATIVE_GOALS:
            if plain is not None:
                out.append(ratio_line(plain, peer, NATIVE_GOALS[family]))
            for node in nodes:
                # The Node rows' goal holds against the peer's row with as many slots.
                same = node.get("concurrency") is not None and (
                    node.get("concurrency") == peer.get("concurrency")
                )
                out.append(ratio_line(node, peer, NODE_GOALS.get(family, {}) if same else {}))
            continue
        if plain is None:
            continue
        parts = []
        for key, label, goal in PEER_GOALS:
            ours, theirs = plain.get(key), peer.get(key)
            if ours and theirs:
                ratio = ours / theirs
                verdict = "met" if ratio >= goal else "missed"
                parts.append(f"{label} {ratio:.2f}x (goal >= {goal}x: {verdict})")
        if parts:
            out.append(f"taskfleet vs {name}: " + "; ".join(parts) + ".")
    return out


def write_readme(text: str, markers: tuple[str, str] = (README_START, README_END)) -> None:
    if not README.exists():
        return
    content = README.read_text()
    start, end = content.find(markers[0]), content.find(markers[1])
    if start < 0 or end < start:
        log(f"{README} has no results markers; not updated")
        return
    new = content[: start + len(markers[0])] + "\n" + text + "\n" + content[end:]
    README.write_text(new)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="taskfleet throughput and latency, optionally next to its peers."
    )
    parser.add_argument(
        "--peers",
        default=os.environ.get("PEERS", ""),
        help="comma-separated peers to run too (rq,arq,celery,dramatiq, taskfleet-node: the "
        "Node client's rows, taskfleet-node8: the same at concurrency 8, bullmq, bullmq8, "
        "bullmq32: BullMQ at concurrency 8 and 32, asynq), or 1/all for "
        "every one; default from $PEERS, else none",
    )
    parser.add_argument("--no-taskfleet", action="store_true", help="run only the peers")
    parser.add_argument(
        "--no-floor",
        action="store_true",
        help="skip the floor (bench.floors.floor: the bound on this machine for the reference"
        " handler, measured first in the same run)",
    )
    parser.add_argument("--n", type=int, default=20_000, help="tasks per measurement")
    parser.add_argument("--batch", type=int, default=1_000, help="tasks per enqueue batch")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--latency-samples", type=int, default=300)
    parser.add_argument(
        "--taskfleet-concurrency", type=int, default=32, help="slots per taskfleet worker process"
    )
    parser.add_argument(
        "--taskfleet-log-level",
        default="",
        help="--log-level of the taskfleet workers; default: none given, the worker's own "
        "default (info), as a user runs it",
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print only; no results file, no README"
    )
    args = parser.parse_args(argv)
    for name in ("n", "batch", "workers", "latency_samples", "taskfleet_concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.n < args.batch:
        parser.error("--n must be at least --batch")
    raw = args.peers.strip().lower()
    if raw in ("", "0", "no", "none"):
        args.peer_list = []
    elif raw in ("1", "yes", "all"):
        args.peer_list = list(KNOWN_PEERS)
    else:
        args.peer_list = [p.strip() for p in raw.split(",") if p.strip()]
        unknown = [p for p in args.peer_list if p not in KNOWN_PEERS]
        if unknown:
            parser.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(KNOWN_PEERS)}")
    if args.no_taskfleet and not args.peer_list:
        parser.error("--no-taskfleet needs --peers")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # taskfleet three times: the sync handler most users write, the async one, and the
    # sync one with metrics on (their cost on the drain: compare with the sync row).
    systems: list[tuple[str, str | None, Path]] = []
    if not args.no_taskfleet:
        systems += [("taskfleet", None, Path(sys.executable))]
        systems += [("taskfleet", "async", Path(sys.executable))]
        systems += [("taskfleet", "metrics", Path(sys.executable))]
    for name in args.peer_list:
        if name in NATIVE_PEERS:
            system, variant, needs = NATIVE_PEERS[name]
            native.prepare(*needs)
            systems.append((system, variant, Path(sys.executable)))
        else:
            systems.append((name, None, peer_python(name)))

    started = datetime.now(UTC)
    report: dict[str, Any] = {
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "n": args.n,
        "batch": args.batch,
        "workers": args.workers,
        "latency_samples": args.latency_samples,
        "taskfleet_concurrency": args.taskfleet_concurrency,
        "taskfleet_log_level": args.taskfleet_log_level or "default",
        "results": [],
    }
    with redis_server() as (url, version), tempfile.TemporaryDirectory() as tmp:
        report["redis_version"] = version
        if not (args.no_taskfleet or args.no_floor):
            from bench.floors import floor  # imports this module: loaded when it runs

            log("floor: the reference handler's write and the queue's own cost per task")
            report["floor"] = floor(url, min(args.n, 20_000))
        client = redis.Redis.from_url(url)
        for name, variant, python in systems:
            client.flushall()
            result = run_system(name, variant, python, url=url, args=args, tmp=Path(tmp))
            report["results"].append(result)
        client.close()
    report["loadavg_after"] = [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]

    failed = any("failed" in r for r in report["results"])
    text = summary(report)
    print(text)
    if not args.no_write:
        RESULTS_DIR.mkdir(exist_ok=True)
        path = RESULTS_DIR / f"{started.strftime('%Y-%m-%dT%H%MZ')}.json"
        path.write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {path}")
        from bench import charts  # matplotlib: loaded only when a chart is drawn

        # "Latest results" in the README shows the newest complete run with peers; older
        # runs stay in bench/results/ and bench/journal/. So does peers.png.
        peers = set(PEER_PINS) | set(NATIVE_PEERS)
        chart = "peers" if peers & set(args.peer_list) else "taskfleet"
        for written in charts.peers(report, RESULTS_DIR, chart):
            log(f"wrote {written}")
        if not failed and peers & set(args.peer_list):
            write_readme(text)
            log(f"updated {README}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
