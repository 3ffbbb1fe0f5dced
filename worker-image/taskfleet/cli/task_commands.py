"""Commands about a queue's tasks after their enqueue: ls, cancel, retry, purge, and the
queue's workers (who holds what).

Each opens a ``Queue`` for its calls and closes it. A queue with nothing stored (no
config, counters or workers: a typo) and a task id that names no task end with one
error line and exit code 1; input the command can't use with exit code 2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from taskfleet.cli.options import (
    BadInput,
    FiniteFloat,
    IntRange,
    redis_option,
    redis_url_in_use,
    terminal_safe,
)
from taskfleet.cli.queue_commands import open_queue
from taskfleet.protocol import bounds
from taskfleet.protocol.calls import run
from taskfleet.protocol.redisurl import redact_redis_url

STATES = ("pending", "delayed", "running", "waiting", "done", "dead", "cancelled")
FINISHED = ("done", "dead", "cancelled")


@contextmanager
def _existing(name: str, redis_url: str) -> Iterator[Any]:
    q = open_queue(name, redis_url)
    try:
        if not q.exists():
            where = redact_redis_url(redis_url_in_use() or redis_url)
            raise click.ClickException(
                f"queue {name!r} not found at {where}: nothing of it is stored "
                "(no config, counters or workers); check the name and --redis-url"
            )
        yield q
    finally:
        q.close()


def _filters(func: Any) -> Any:
    func = click.option("--reason", default=None, help="Only tasks with this reason.")(func)
    func = click.option(
        "--older-than",
        type=FiniteFloat(min=0, max=bounds.MAX_DURATION_S),
        default=None,
        metavar="SECONDS",
        help="Only tasks finished (or, not finished, created) more than this long ago.",
    )(func)
    return click.option(
        "--newer-than",
        type=FiniteFloat(min=0, max=bounds.MAX_DURATION_S),
        default=None,
        metavar="SECONDS",
        help="Only tasks finished (or created) less than this long ago.",
    )(func)


def _group_filter(func: Any) -> Any:
    return click.option("--group", default=None, help="Only tasks of this group.")(func)


def _json_flag(func: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")(func)


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[: width - 1] + "…"


@click.command("ls")
@click.argument("queue")
@click.argument("state", type=click.Choice(STATES))
@click.option("--limit", type=IntRange(1, 10_000), default=50, show_default=True, help="Page size.")
@click.option("--cursor", default=None, help="The next page, as the previous page said.")
@_filters
@_group_filter
@_json_flag
@redis_option
def ls(
    *,
    queue: str,
    state: str,
    limit: int,
    cursor: str | None,
    reason: str | None,
    group: str | None,
    older_than: float | None,
    newer_than: float | None,
    as_json: bool,
    redis_url: str,
) -> None:
    """List QUEUE's tasks in STATE: pending in run order, delayed by due time, running by
    lease, waiting (for the tasks in their after) by when they began to wait, finished
    ones newest first."""
    from taskfleet.protocol.errors import InvalidArgument

    with _existing(queue, redis_url) as q:
        try:
            page = q.list(
                state,
                limit=limit,
                cursor=cursor,
                reason=reason,
                older_than=older_than,
                newer_than=newer_than,
                group=group,
            )
        except InvalidArgument as exc:
            raise BadInput(str(exc)) from None
    if as_json:
        tasks = [t.model_dump(mode="json") for t in page.tasks]
        click.echo(json.dumps({"tasks": tasks, "cursor": page.cursor}, sort_keys=True))
        return
    for t in page.tasks:
        when = t.finished_at or t.run_at or t.created_at
        detail = t.error or (t.progress if t.progress is not None else "")
        parts = [t.id, t.state.value, f"attempts={t.attempts}"]
        if when is not None:
            parts.append(when.isoformat(timespec="seconds"))
        if t.reason:
            parts.append(f"reason={t.reason}")
        if t.group:
            parts.append(f"group={t.group}")
        if detail:
            parts.append(_short(detail))
        click.echo(terminal_safe("  ".join(parts)))
    if page.cursor is not None:
        click.echo(f"taskfleet: more: --cursor {page.cursor}", err=True)


@click.command()
@click.argument("queue")
@click.argument("task_ids", nargs=-1)
@click.option("--group", default=None, help="Cancel every unfinished task of this group.")
@_json_flag
@redis_option
def cancel(
    queue: str, task_ids: tuple[str, ...], group: str | None, as_json: bool, redis_url: str
) -> None:
    """Cancel tasks of QUEUE (the TASK_IDS, or --group's): pending or delayed ones never
    run; running ones are cancelled by their worker at its next heartbeat and end
    cancelled. Exit 1 when an id names no task (the others are cancelled)."""
    if bool(task_ids) == (group is not None):
        raise BadInput("name the tasks to cancel: task ids, or --group, not both")
    if group is not None:
        from taskfleet.protocol.groups import check_group

        try:
            check_group(group)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        with _existing(queue, redis_url) as q:
            counts = {o.value: n for o, n in q.cancel_group(group).items()}
        if as_json:
            click.echo(json.dumps(counts, sort_keys=True))
        else:
            for outcome, n in sorted(counts.items()):
                click.echo(f"{n}  {_CANCEL_WORDS.get(outcome, outcome)}")
        return
    with _existing(queue, redis_url) as q:
        outcomes = q.cancel_many(list(task_ids))
    shown = {task_id: outcome.value for task_id, outcome in outcomes.items()}
    if as_json:
        click.echo(json.dumps(shown, sort_keys=True))
    else:
        for task_id, outcome in shown.items():
            click.echo(f"{task_id}  {_CANCEL_WORDS.get(outcome, outcome)}")
    missing = [i for i, o in shown.items() if o == "not_found"]
    if missing:
        raise click.ClickException(f"task {missing[0]!r} not found in queue {queue!r}")


_CANCEL_WORDS = {
    "cancelled": "cancelled (it will not run)",
    "requested": "cancelling (running: its worker stops it at its next heartbeat)",
    "done": "not cancelled: done already",
    "dead": "not cancelled: dead already",
    "finished": "cancelled already",
    "not_found": "not found",
}


@click.command()
@click.argument("queue")
@click.argument("task_ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every dead task (within the filters).")
@click.option(
    "--max-attempts",
    type=IntRange(bounds.MIN_ATTEMPTS, bounds.MAX_ATTEMPTS),
    default=None,
    help="The new attempt budget [default: the task's own, or the queue's].",
)
@_filters
@_group_filter
@_json_flag
@redis_option
def retry(
    *,
    queue: str,
    task_ids: tuple[str, ...],
    every: bool,
    max_attempts: int | None,
    reason: str | None,
    group: str | None,
    older_than: float | None,
    newer_than: float | None,
    as_json: bool,
    redis_url: str,
) -> None:
    """Send dead tasks of QUEUE back to pending with a new attempt budget: the TASK_IDS
    given, or --all of them, or those matching --reason / --group / --older-than /
    --newer-than."""
    filtered = (
        reason is not None or group is not None or older_than is not None or newer_than is not None
    )
    if task_ids and (every or filtered):
        raise BadInput("give task ids, or --all / filters, not both")
    if not task_ids and not (every or filtered):
        raise BadInput("name the dead tasks to retry: task ids, --all, or a filter")
    with _existing(queue, redis_url) as q:
        if task_ids:
            states = {i: q.get(i) for i in task_ids}
            missing = [i for i, t in states.items() if t is None]
            if missing:
                raise click.ClickException(f"task {missing[0]!r} not found in queue {queue!r}")
            count = q.retry(list(task_ids), max_attempts=max_attempts)
            skipped = {i: t.state.value for i, t in states.items() if t and t.state != "dead"}
        else:
            count = q.retry(
                reason=reason,
                group=group,
                older_than=older_than,
                newer_than=newer_than,
                max_attempts=max_attempts,
            )
            skipped = {}
    if as_json:
        click.echo(json.dumps({"retried": count, "skipped": skipped}, sort_keys=True))
        return
    click.echo(f"{count} dead task(s) back to pending")
    for task_id, state in skipped.items():
        click.echo(f"taskfleet: {task_id} is {state}, not dead: left as it is", err=True)


@click.command()
@click.argument("queue")
@click.option("--done", "state", flag_value="done", help="Delete done tasks.")
@click.option("--dead", "state", flag_value="dead", help="Delete dead tasks.")
@click.option("--cancelled", "state", flag_value="cancelled", help="Delete cancelled tasks.")
@_filters
@_json_flag
@redis_option
def purge(
    *,
    queue: str,
    state: str | None,
    reason: str | None,
    older_than: float | None,
    newer_than: float | None,
    as_json: bool,
    redis_url: str,
) -> None:
    """Delete QUEUE's finished tasks of one state now, rather than at the end of their
    retention. Pending, delayed and running tasks are never touched."""
    if state is None:
        raise BadInput("say which finished tasks to delete: --done, --dead or --cancelled")
    with _existing(queue, redis_url) as q:
        count = q.purge_tasks(state, reason=reason, older_than=older_than, newer_than=newer_than)
    if as_json:
        click.echo(json.dumps({"state": state, "deleted": count}))
    else:
        click.echo(f"{count} {state} task(s) deleted")


@click.command()
@click.argument("queue")
@_json_flag
@redis_option
def workers(queue: str, as_json: bool, redis_url: str) -> None:
    """QUEUE's workers: what each holds, its heartbeat's age, whether it drains."""
    with _existing(queue, redis_url) as q:
        found = q.workers()
        held = q.holdings([w.pod for w in found])
        now_ms = run(q.client, q.reads.clock())
    rows = [
        {
            "pod": w.pod,
            "incarnation": w.incarnation,
            "alive": w.alive,
            "heartbeat_age_s": round(max(0, now_ms - w.heartbeat_ms) / 1000, 1),
            "inflight": w.inflight,
            "concurrency": w.concurrency,
            "draining": w.draining,
            "holds": held.get(w.pod, []),
        }
        for w in found
    ]
    if as_json:
        click.echo(json.dumps(rows, sort_keys=True))
        return
    if not rows:
        click.echo(f"no workers of {queue!r} are registered")
    for row in rows:
        state = "draining" if row["draining"] else ("alive" if row["alive"] else "silent")
        holds = ",".join(row["holds"]) or "-"
        line = (
            f"{row['pod']}  {state}  beat {row['heartbeat_age_s']}s ago  "
            f"holds {len(row['holds'])}/{row['concurrency']}  {_short(holds)}"
        )
        click.echo(terminal_safe(line))
