"""``taskfleet quota show|pause|resume|budget``: a queue's claim pause and spend budget.

``pause`` stops every worker of the queue from claiming (as a handler's ``RateLimited``
does), ``resume`` ends it; ``budget`` sets the spend budget at run time, over the
config's (a TaskQueue's ``spec.budget``). ``--group G``: the same for one group of the
queue alone (its other groups are claimed as before). Bad values are refused with one
line (exit 2).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from taskfleet.cli.options import BadInput, FiniteFloat, redis_option, terminal_safe
from taskfleet.cli.queue_commands import open_queue
from taskfleet.protocol.groups import group_problem
from taskfleet.protocol.quota import BudgetLimit, QuotaState

__all__ = ["quota"]


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _show(state: QuotaState, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(state.as_dict(), sort_keys=True))
        return
    if state.paused:
        line = f"claims paused until {_when(state.paused_until_ms)} ({state.pause_left_ms} ms left)"
        if state.reason:
            line += f": {state.reason}"
        click.echo(terminal_safe(line))
    else:
        click.echo("claims not paused")
    click.echo(f"rate limits in a row: {state.streak}; pauses so far: {state.pauses}")
    for name, limit, spent, left, ends, period in (
        ("day", state.day_limit, state.day_spent, state.day_left, state.day_end_ms, state.day),
        (
            "month",
            state.month_limit,
            state.month_spent,
            state.month_left,
            state.month_end_ms,
            state.month,
        ),
    ):
        if limit <= 0:
            click.echo(f"budget per {name}: none")
        else:
            click.echo(
                f"budget per {name} ({period}): {spent} of {limit} spent, {left} left, "
                f"resets {_when(ends)}"
            )


def _limit(value: str | None, name: str) -> BudgetLimit:
    if value is None:
        return None
    if value == "default":
        return "default"
    if value == "none":
        return 0
    if not value.isdigit() or int(value) > 10**9:
        raise BadInput(f"--{name} must be cost units 0..1000000000, 'none' or 'default'")
    return int(value)


def _group(value: str | None) -> str | None:
    if value is not None and (problem := group_problem(value)):
        raise BadInput(f"--group: {problem}")
    return value


_group_option = click.option(
    "--group",
    "group",
    default=None,
    metavar="G",
    help="One group of the queue alone, not the whole queue.",
)


@click.group()
def quota() -> None:
    """A queue's claim pause (provider rate limits) and spend budget."""


@quota.command("show")
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
@_group_option
@redis_option
def show(*, queue: str, as_json: bool, group: str | None, redis_url: str) -> None:
    """Show QUEUE's (or one group's) claim pause and its budget's spend."""
    group = _group(group)
    with open_queue(queue, redis_url) as q:
        _show(q.quota(group=group), as_json)
        if group is None and not as_json:
            for c in q.groups():
                if c.paused_until_ms:
                    line = f"group {c.group}: claims paused until {_when(c.paused_until_ms)}"
                    click.echo(terminal_safe(line))


@quota.command("pause")
@click.argument("queue")
@click.option(
    "--for",
    "seconds",
    type=FiniteFloat(min=0, min_open=True, max=3_153_600_000),
    default=None,
    help="Seconds, above 0 (`quota resume` ends a pause) [default: the adaptive pause, "
    "as a rate limit without a retry-after].",
)
@click.option("--reason", default="", help="Why, shown with the pause.")
@_group_option
@redis_option
def pause(
    *, queue: str, seconds: float | None, reason: str, group: str | None, redis_url: str
) -> None:
    """Stop every worker of QUEUE from claiming tasks (of one group) for a while."""
    group = _group(group)
    with open_queue(queue, redis_url) as q:
        until = q.pause_claims(seconds, reason=reason, group=group)
    where = "" if group is None else f"group {group}: "
    click.echo(f"{where}claims paused until {_when(until)}")


@quota.command("resume")
@click.argument("queue")
@_group_option
@redis_option
def resume(*, queue: str, group: str | None, redis_url: str) -> None:
    """End QUEUE's (or one group's) claim pause now."""
    group = _group(group)
    with open_queue(queue, redis_url) as q:
        q.resume_claims(group=group)
    click.echo("claims resumed" if group is None else f"group {group}: claims resumed")


@quota.command("budget")
@click.argument("queue")
@click.option("--day", default=None, help="Cost units per UTC day; 'none', or 'default'.")
@click.option("--month", default=None, help="Cost units per UTC month; 'none', or 'default'.")
@_group_option
@redis_option
def budget(
    *, queue: str, day: str | None, month: str | None, group: str | None, redis_url: str
) -> None:
    """Set QUEUE's (or one group's) spend budget at run time ('default': the TaskQueue's /
    config's, for a group its group_budget_*)."""
    if day is None and month is None:
        raise BadInput("give --day and/or --month")
    day_limit, month_limit = _limit(day, "day"), _limit(month, "month")
    group = _group(group)
    with open_queue(queue, redis_url) as q:
        q.set_budget(day=day_limit, month=month_limit, group=group)
        _show(q.quota(group=group), False)
