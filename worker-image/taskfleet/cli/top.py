"""``taskfleet top``: a live view of queues in the terminal.

Every ``--interval`` seconds it reads each queue in one pipelined round trip (sizes by
state, counters, workers, the head of pending, the newest dead tasks) and redraws in
place: depths, done and failed per second (from the counters between two reads), the age
of the oldest ready task, each worker with what it holds and its heartbeat's age, and the
last dead tasks with their reason. Plain ANSI through rich: it works over SSH and in
``kubectl exec -it``. ``q`` (or Ctrl-C) quits; without a terminal it prints one frame.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import click

from taskfleet.cli.options import BadInput, redis_option
from taskfleet.protocol.connect import SyncClient, connect, server_ms
from taskfleet.protocol.keys import PREFIX, QueueKeys
from taskfleet.protocol.scripts import text

#: Dead tasks shown per queue, newest first.
DEAD_SHOWN = 3


@dataclass
class WorkerView:
    pod: str
    holds: int
    slots: int
    heartbeat_age_s: float
    draining: bool


@dataclass
class DeadView:
    id: str
    reason: str
    error: str


@dataclass
class QueueView:
    """One queue as read at ``at_ms`` (Redis's clock)."""

    name: str
    at_ms: int
    counts: dict[str, int]
    counters: dict[str, int]
    oldest_pending_s: float | None
    workers: list[WorkerView] = field(default_factory=list)
    dead: list[DeadView] = field(default_factory=list)


#: The states whose sizes a view shows.
STATES = ("pending", "delayed", "running", "done", "dead", "cancelled")


def discover(client: SyncClient) -> list[str]:
    """Every queue with counters in this Redis (its ``stats`` hash), by name."""
    names = set()
    for key in client.scan_iter(match=f"{PREFIX}:{{*}}:stats", count=1000):
        raw = text(key)
        names.add(raw[len(PREFIX) + 2 : -len("}:stats")])
    return sorted(names)


def read(client: SyncClient, name: str) -> QueueView:
    """One queue in two round trips: everything, then the hashes of the tasks it named."""
    keys = QueueKeys(name)
    # The clock of the queue's server, on its own: a cluster pipeline refuses TIME.
    now_ms = server_ms(client, keys.stats)
    pipe = client.pipeline(transaction=False)
    for state in STATES:
        pipe.zcard(getattr(keys, state))
    pipe.hgetall(keys.stats)
    pipe.hgetall(keys.workers)
    pipe.zrange(keys.pending, 0, 0)
    pipe.zrevrange(keys.dead, 0, DEAD_SHOWN - 1)
    *sizes, stats, workers, head, dead_ids = pipe.execute()
    counts = dict(zip(STATES, map(int, sizes), strict=True))
    counters = {text(k): _int(v) for k, v in stats.items()}
    ids = [text(i) for i in (*head, *dead_ids)]
    pods = sorted(text(pod) for pod in workers)
    pipe = client.pipeline(transaction=False)
    for task_id in ids:
        pipe.hmget(keys.task(task_id), "run_at", "reason", "error")
    for pod in pods:  # what each holds by the queue's own records (exact, unlike heartbeats)
        pipe.scard(keys.pod(pod))
    replies = pipe.execute() if ids or pods else []
    hashes = dict(zip(ids, replies[: len(ids)], strict=True))
    held = dict(zip(pods, map(int, replies[len(ids) :]), strict=True))
    oldest = None
    if head:
        run_at = _int(hashes[text(head[0])][0])
        oldest = max(0.0, (now_ms - run_at) / 1000) if run_at else None
    view = QueueView(name, now_ms, counts, counters, oldest)
    for pod, record in sorted(workers.items()):
        with contextlib.suppress(ValueError, KeyError, TypeError):
            rec = json.loads(record)
            view.workers.append(
                WorkerView(
                    text(pod),
                    held.get(text(pod), 0),
                    int(rec.get("concurrency", 0)),
                    max(0.0, (now_ms - int(rec["heartbeat_ms"])) / 1000),
                    bool(rec.get("draining", False)),
                )
            )
    for task_id in (text(i) for i in dead_ids):
        _, reason, error = hashes.get(task_id) or (None, None, None)
        view.dead.append(DeadView(task_id, text(reason or b""), text(error or b"")))
    return view


def _int(raw: Any) -> int:
    try:
        return int(float(text(raw)))
    except (TypeError, ValueError):
        return 0


def rate(now: QueueView, before: QueueView | None, counter: str) -> float | None:
    """``counter`` per second between two reads of one queue (None before the second)."""
    if before is None or now.at_ms <= before.at_ms:
        return None
    delta = now.counters.get(counter, 0) - before.counters.get(counter, 0)
    return max(0, delta) / ((now.at_ms - before.at_ms) / 1000)


def render(views: list[QueueView], before: dict[str, QueueView]) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    queues = Table(title="taskfleet top  (q quits)", title_justify="left", expand=False)
    shown = ("pending", "delayed", "running", "dead")
    for column in ("queue", *shown, "done/s", "failed/s"):
        queues.add_column(column, justify="left" if column == "queue" else "right", no_wrap=True)
    queues.add_column("oldest", justify="right", no_wrap=True)
    queues.add_column("workers", justify="right", no_wrap=True)
    parts: list[Any] = [queues]
    for view in views:
        old = before.get(view.name)
        done, failed = rate(view, old, "completed"), rate(view, old, "failed")
        alive = sum(1 for w in view.workers if w.heartbeat_age_s < 60)
        queues.add_row(
            view.name,
            *(f"{view.counts[s]:,}" for s in shown),
            "…" if done is None else f"{done:,.1f}",
            "…" if failed is None else f"{failed:,.1f}",
            "-" if view.oldest_pending_s is None else _age(view.oldest_pending_s),
            f"{alive}/{len(view.workers)}",
        )
    for view in views:
        if view.workers:
            workers = Table(title=f"{view.name}: workers", title_justify="left")
            for column in ("pod", "holds", "heartbeat", "state"):
                workers.add_column(column, justify="left" if column == "pod" else "right")
            for w in view.workers:
                state = "draining" if w.draining else "running"
                age = _age(w.heartbeat_age_s)
                workers.add_row(w.pod, f"{w.holds}/{w.slots}", f"{age} ago", state)
            parts.append(workers)
        if view.counts.get("cancelled"):  # a line, not a column: the table stays narrow
            parts.append(Text(f"{view.name}: {view.counts['cancelled']:,} cancelled (retained)"))
        for dead in view.dead:
            line = f"{view.name}: dead {dead.id} ({dead.reason or '?'}) {dead.error[:80]}"
            parts.append(Text(line, style="red", overflow="ellipsis", no_wrap=True))
    return Group(*parts)


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


@contextlib.contextmanager
def _keys_unbuffered() -> Iterator[int | None]:
    """stdin in cbreak mode (keys arrive one by one, unechoed) while the view runs; None
    when stdin is not a terminal."""
    if not sys.stdin.isatty():
        yield None
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _quit_pressed(fd: int | None, wait_s: float) -> bool:
    if fd is None:
        time.sleep(wait_s)
        return False
    ready, _, _ = select.select([fd], [], [], wait_s)
    return bool(ready) and os.read(fd, 1) in (b"q", b"Q")


@click.command()
@click.argument("queues", nargs=-1)
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 3600),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--once", is_flag=True, help="Print one frame and exit (also without a terminal).")
@click.option("--json", "as_json", is_flag=True, help="One snapshot, machine-readable.")
@redis_option
def top(
    queues: tuple[str, ...], interval: float, once: bool, as_json: bool, redis_url: str
) -> None:
    """A live view of QUEUES (default: every queue in this Redis): depths, rates, the
    oldest ready task, workers and what they hold, the newest dead tasks. q quits."""
    from rich.console import Console
    from rich.live import Live

    client = connect(redis_url)
    try:
        names = list(queues) or discover(client)
        for name in names:
            try:
                QueueKeys(name)  # the queue-name rules, before anything is read
            except ValueError as exc:
                raise BadInput(str(exc)) from None
        views = [read(client, n) for n in names]
        if as_json:
            click.echo(json.dumps([asdict(v) for v in views], sort_keys=True))
            return
        console = Console()
        if once or not console.is_terminal:
            console.print(render(views, {}) if views else "no queues in this Redis")
            return
        before = {v.name: v for v in views}
        with _keys_unbuffered() as fd, Live(console=console, auto_refresh=False) as live:
            live.update(render(views, {}), refresh=True)
            with contextlib.suppress(KeyboardInterrupt):
                while not _quit_pressed(fd, interval):
                    names = list(queues) or discover(client)
                    views = [read(client, n) for n in names]
                    live.update(render(views, before), refresh=True)
                    before = {v.name: v for v in views}
    finally:
        client.close()
