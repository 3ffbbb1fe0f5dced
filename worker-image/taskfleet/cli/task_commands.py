"""Commands about a queue's tasks after their enqueue: ls, cancel, promote, retry, purge,
and the queue's workers (who holds what).

Each opens a ``Queue`` for its calls and closes it. A queue with nothing stored (no
config, counters or workers: a typo) and a task id that names no task end with one
error line and exit code 1; input the command can't use with exit code 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
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
from taskfleet.producer.reading import older_note
from taskfleet.protocol import bounds
from taskfleet.protocol.calls import run
from taskfleet.protocol.records import CURRENT_LEVEL
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


def _counts(counts: dict[str, int], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(counts, sort_keys=True))
    else:
        for outcome, n in sorted(counts.items()):
            click.echo(f"{n}  {_CANCEL_WORDS.get(outcome, outcome)}")


def _flow_flags(verb: str) -> Callable[[Any], Any]:
    """--flow / --branch: act on the flow or the branch of one task (docs/flows.md)."""

    def add(f: Any) -> Any:
        f = click.option(
            "--branch",
            "scope",
            flag_value="branch",
            help=f"{verb} the task and every task that waits for it, transitively.",
        )(f)
        return click.option(
            "--flow",
            "scope",
            flag_value="flow",
            help=f"{verb} every task linked to the task by after, either way.",
        )(f)

    return add


def _flow_target(scope: str, task_ids: tuple[str, ...], other: str | None) -> str:
    if other is not None:
        raise BadInput(f"--{scope} acts on one task's {scope}: not with {other}")
    if len(task_ids) != 1:
        raise BadInput(f"--{scope} takes exactly one task id, not {len(task_ids)}")
    return task_ids[0]


def _on_flow(q: Any, queue: str, task_id: str, action: Any) -> Any:
    from taskfleet.protocol.errors import TaskNotFound

    try:
        return action()
    except TaskNotFound:
        raise BadInput(f"task {task_id!r} not found in queue {queue!r}") from None


@click.command()
@click.argument("queue")
@click.argument("task_ids", nargs=-1)
@click.option("--group", default=None, help="Cancel every unfinished task of this group.")
@_flow_flags("Cancel")
@_json_flag
@redis_option
def cancel(
    *,
    queue: str,
    task_ids: tuple[str, ...],
    group: str | None,
    scope: str | None,
    as_json: bool,
    redis_url: str,
) -> None:
    """Cancel tasks of QUEUE (the TASK_IDS, or --group's, or the --flow / --branch of
    one task): pending, delayed or waiting ones never run; running ones are cancelled by
    their worker at its next heartbeat and end cancelled. Exit 1 when an id names no task
    (the others are cancelled)."""
    if scope is not None:
        task_id = _flow_target(scope, task_ids, "--group" if group is not None else None)
        with _existing(queue, redis_url) as q:
            outcomes = _on_flow(
                q, queue, task_id, lambda: q.cancel_flow(task_id, branch=scope == "branch")
            )
        tally: dict[str, int] = {}
        for outcome in outcomes.values():
            tally[outcome.value] = tally.get(outcome.value, 0) + 1
        _counts(tally, as_json)
        return
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
        _counts(counts, as_json)
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


@click.command()
@click.argument("queue")
@click.argument("task_ids", nargs=-1)
@_json_flag
@redis_option
def promote(*, queue: str, task_ids: tuple[str, ...], as_json: bool, redis_url: str) -> None:
    """Run delayed tasks of QUEUE now (TASK_IDS: scheduled for later, or waiting out a
    retry's backoff): each goes to pending at its priority. Exit 1 when an id was not
    delayed (nothing changed for it; the others are promoted)."""
    if not task_ids:
        raise BadInput("name the delayed tasks to promote: one or more task ids")
    with _existing(queue, redis_url) as q:
        promoted = q.promote_many(list(task_ids))
    if as_json:
        click.echo(json.dumps(promoted, sort_keys=True))
    else:
        for task_id, done in promoted.items():
            click.echo(
                f"{task_id}  {'promoted: pending now' if done else 'not delayed: unchanged'}"
            )
    left = [i for i, done in promoted.items() if not done]
    if left:
        raise click.ClickException(f"task {left[0]!r} of queue {queue!r} is not delayed")


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
@_flow_flags("Retry")
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
    scope: str | None,
    as_json: bool,
    redis_url: str,
) -> None:
    """Send dead tasks of QUEUE back to pending with a new attempt budget: the TASK_IDS
    given, or --all of them, or those matching --reason / --group / --older-than /
    --newer-than; or every dead or cancelled task of the --flow / --branch of one task,
    dependencies first."""
    filtered = (
        reason is not None or group is not None or older_than is not None or newer_than is not None
    )
    if scope is not None:
        other = "--all or filters" if every or filtered else None
        if max_attempts is not None:
            other = "--max-attempts"
        task_id = _flow_target(scope, task_ids, other)
        with _existing(queue, redis_url) as q:
            count = _on_flow(
                q, queue, task_id, lambda: q.retry_flow(task_id, branch=scope == "branch")
            )
        if as_json:
            click.echo(json.dumps({"retried": count}, sort_keys=True))
        else:
            click.echo(
                f"{count} dead or cancelled task(s) of the {scope} back "
                "(pending, or waiting for their dependencies)"
            )
        return
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
            again = _ended_again(q, [i for i in task_ids if i not in skipped])
            count -= len(again)
        else:
            count = q.retry(
                reason=reason,
                group=group,
                older_than=older_than,
                newer_than=newer_than,
                max_attempts=max_attempts,
            )
            skipped = {}
            again = {}
    if as_json:
        out = {"retried": count, "skipped": skipped, "ended_again": again}
        click.echo(json.dumps(out, sort_keys=True))
        return
    click.echo(f"{count} dead task(s) back (pending, or waiting for their dependencies)")
    for task_id, state in skipped.items():
        click.echo(f"taskfleet: {task_id} is {state}, not dead: left as it is", err=True)
    for task_id, error in again.items():
        click.echo(
            terminal_safe(
                f"taskfleet: {task_id} ended again at once: {error}; retry that one first, "
                f"or the whole flow with --flow"
            ),
            err=True,
        )


def _ended_again(q: Any, task_ids: list[str]) -> dict[str, str]:
    """The retried tasks a dependency still dead or cancelled (or gone) ended again by
    their policy in the retry itself: id -> its error (``dependency <id> ended <how>``)."""
    from taskfleet.protocol.flows import DEPENDENCY_FAILED

    out: dict[str, str] = {}
    for task_id in task_ids:
        t = q.get(task_id)
        if t is not None and t.state == "dead" and t.reason == DEPENDENCY_FAILED:
            out[task_id] = t.error
    return out


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
    """QUEUE's workers: what each holds, its held slots (calls given up on that still run),
    its heartbeat's age, whether it drains, and the level it serves (1: a 0.1.x worker,
    which does not serve flows, groups, claim pauses or spend budgets)."""
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
            "held": w.held,
            "concurrency": w.concurrency,
            "draining": w.draining,
            "holds": held.get(w.pod, []),
            "level": w.level,
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
        level = f"level {row['level']}" + (" (0.1.x)" if row["level"] < CURRENT_LEVEL else "")
        # held slots: calls given up on that still run (the worker can take that many fewer)
        kept = f"  held {row['held']}" if row["held"] else ""
        line = (
            f"{row['pod']}  {state}  beat {row['heartbeat_age_s']}s ago  {level}  "
            f"holds {len(row['holds'])}/{row['concurrency']}{kept}  {_short(holds)}"
        )
        click.echo(terminal_safe(line))
    note = older_note(found)
    if note:
        click.echo(terminal_safe(note))
