"""``taskfleet quota show|pause|resume|budget``: a queue's claim pause and spend budget.

``pause`` stops every worker of the queue from claiming (as a handler's ``RateLimited``
does), ``resume`` ends it; ``budget`` sets the spend budget at run time, over the
config's (a TaskQueue's ``spec.budget``). Bad values are refused with one line (exit 2).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from taskfleet.cli.options import BadInput, FiniteFloat, redis_option, terminal_safe
from taskfleet.cli.queue_commands import open_queue
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


@click.group()
def quota() -> None:
    """A queue's claim pause (provider rate limits) and spend budget."""


@quota.command("show")
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
@redis_option
def show(*, queue: str, as_json: bool, redis_url: str) -> None:
    """Show QUEUE's claim pause and its budget's spend."""
    with open_queue(queue, redis_url) as q:
        _show(q.quota(), as_json)


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
@redis_option
def pause(*, queue: str, seconds: float | None, reason: str, redis_url: str) -> None:
    """Stop every worker of QUEUE from claiming tasks for a while."""
    with open_queue(queue, redis_url) as q:
        until = q.pause_claims(seconds, reason=reason)
    click.echo(f"claims paused until {_when(until)}")


@quota.command("resume")
@click.argument("queue")
@redis_option
def resume(*, queue: str, redis_url: str) -> None:
    """End QUEUE's claim pause now."""
    with open_queue(queue, redis_url) as q:
        q.resume_claims()
    click.echo("claims resumed")


@quota.command("budget")
@click.argument("queue")
@click.option("--day", default=None, help="Cost units per UTC day; 'none', or 'default'.")
@click.option("--month", default=None, help="Cost units per UTC month; 'none', or 'default'.")
@redis_option
def budget(*, queue: str, day: str | None, month: str | None, redis_url: str) -> None:
    """Set QUEUE's spend budget at run time ('default': the TaskQueue's / config's)."""
    if day is None and month is None:
        raise BadInput("give --day and/or --month")
    day_limit, month_limit = _limit(day, "day"), _limit(month, "month")
    with open_queue(queue, redis_url) as q:
        q.set_budget(day=day_limit, month=month_limit)
        _show(q.quota(), False)
