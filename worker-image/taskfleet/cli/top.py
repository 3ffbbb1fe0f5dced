"""``taskfleet top``: a live view of queues in the terminal.

Every ``--interval`` seconds it reads each queue in one pipelined round trip (sizes by
state, counters, workers, the head of pending, the newest dead tasks) and redraws in
place: depths (and a line for the tasks waiting for their dependencies), done and failed
per second (from the counters between two reads), the age of the oldest ready task, each
worker with what it holds, its held slots, its heartbeat's age and its level (a line
under the table for live 0.1.x workers), the biggest groups (most pending, an "other"
line for the rest; none when the queue has no groups) and the last dead tasks with their
reason. Plain ANSI through rich: it works over SSH and in ``kubectl exec -it``. ``q``
(or Ctrl-C) quits; without a terminal it prints one frame.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from taskfleet.cli.options import BadInput, redis_option, terminal_safe
from taskfleet.protocol.connect import connect
from taskfleet.protocol.keys import validate_queue_name

if TYPE_CHECKING:
    from taskfleet.producer.overview import QueueView
    from taskfleet.protocol.groups import GroupRow

__all__ = ["render", "top"]


def render(views: list[QueueView], before: dict[str, QueueView]) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from taskfleet.producer.overview import rate
    from taskfleet.producer.reading import older_note
    from taskfleet.protocol.records import CURRENT_LEVEL

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
        alive = sum(1 for w in view.workers if w.alive)
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
            for column in ("pod", "holds", "held", "heartbeat", "state", "level"):
                workers.add_column(column, justify="left" if column == "pod" else "right")
            for w in view.workers:
                state = "draining" if w.draining else "running"
                age = _age(w.heartbeat_age_s)
                level = Text(str(w.level))
                if w.level < CURRENT_LEVEL:  # a 0.1.x worker: see the line under the table
                    level = Text(f"{w.level} (0.1.x)", style="red")
                pod = terminal_safe(w.pod)
                # slots kept by calls given up on that still run: red, it can't use them
                held = Text(str(w.held), style="red") if w.held else Text("0")
                workers.add_row(pod, f"{w.holds}/{w.slots}", held, f"{age} ago", state, level)
            parts.append(workers)
            note = older_note(view.workers)
            if note:
                parts.append(Text(f"{view.name}: {terminal_safe(note)}", style="red"))
        if view.groups.shown:
            parts.append(_groups(view))
        # lines, not columns: the table stays within 80 columns
        if view.counts.get("waiting"):
            waiting = view.counts["waiting"]
            parts.append(Text(f"{view.name}: {waiting:,} waiting for their dependencies"))
        if view.counts.get("cancelled"):
            parts.append(Text(f"{view.name}: {view.counts['cancelled']:,} cancelled (retained)"))
        for dead in view.dead:
            line = f"{view.name}: dead {dead.id} ({dead.reason or '?'}) {dead.error[:80]}"
            line = terminal_safe(line)  # a handler's error may hold escape sequences
            parts.append(Text(line, style="red", overflow="ellipsis", no_wrap=True))
    return Group(*parts)


def _groups(view: QueueView) -> Any:
    """The queue's biggest groups and an "other" line (``overview.GroupsView``)."""
    from rich.table import Table

    g = view.groups
    title = f"{view.name}: groups ({g.groups:,} with pending)"
    table = Table(title=title, title_justify="left")
    for column in ("group", "pending", "running", "held"):
        table.add_column(column, justify="left" if column == "group" else "right", no_wrap=True)
    for row in g.shown:
        held = _held(row, view.at_ms)
        table.add_row(terminal_safe(row.group), f"{row.pending:,}", f"{row.running:,}", held)
    if g.other_groups or g.other_pending or g.other_running:
        running = f"{g.other_running:,}" + ("" if g.complete else "+")
        table.add_row(f"other ({g.other_groups:,})", f"{g.other_pending:,}", running, "")
    return table


def _held(row: GroupRow, now_ms: int) -> str:
    """Why a group's own limits hold it back: its concurrency cap (until one of its tasks
    ends), or its rate limit (for how long)."""
    if row.held == "rate" and row.held_until_ms is not None:
        return f"rate {_age(max(0.0, (row.held_until_ms - now_ms) / 1000))}"
    return row.held


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
    oldest ready task, workers and what they hold, the biggest groups, the newest dead
    tasks. q quits."""
    from rich.console import Console
    from rich.live import Live

    # the queue reader loads with the command: the worker's start never imports it
    from taskfleet.producer.overview import discover, read

    client = connect(redis_url)
    try:
        names = list(queues) or discover(client)
        for name in names:
            try:
                validate_queue_name(name)  # before anything is read
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
