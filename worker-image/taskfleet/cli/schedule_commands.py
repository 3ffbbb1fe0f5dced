"""``taskfleet schedule add|ls|rm|pause|resume``: a queue's schedules, at run time.

Each command opens a ``Queue`` for its call and closes it. A bad cron expression or an
unknown time zone is refused with one line (exit 2), before anything is stored.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from taskfleet.cli.options import (
    BadInput,
    FiniteFloat,
    IntRange,
    deadline_option,
    priority_option,
    redis_option,
    terminal_safe,
    timeout_option,
)
from taskfleet.cli.queue_commands import _parse_payload, _queue
from taskfleet.protocol import bounds

__all__ = ["schedule"]


def _when(slot: int | None) -> str:
    if slot is None:
        return "-"
    return datetime.fromtimestamp(slot, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _show(items: list[Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([s.to_json() for s in items], sort_keys=True))
        return
    click.echo(f"{'NAME':<24} {'CRON':<20} {'TZ':<18} {'STATE':<7} {'NEXT (UTC)':<21} FIRED")
    for s in items:
        state = "paused" if s.paused else "active"
        row = f"{s.name:<24} {s.cron:<20} {s.tz:<18} {state:<7} {_when(s.next_slot):<21} {s.fired}"
        click.echo(terminal_safe(row + (f"  error: {s.error}" if s.error else "")))


@click.group()
def schedule() -> None:
    """A queue's schedules: tasks enqueued once per cron slot, fired by the workers."""


@schedule.command("add")
@click.argument("queue")
@click.argument("name")
@click.argument("cron")
@click.option("--payload", default="{}", show_default=True, help="Task payload, a JSON object.")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone of the cron.")
@click.option(
    "--catchup",
    type=click.Choice(["latest", "all"]),
    default="latest",
    show_default=True,
    help="After downtime: fire the latest missed slot, or every missed slot (--catchup-limit).",
)
@click.option("--catchup-limit", type=IntRange(1, 10_000), default=100, show_default=True)
@click.option(
    "--jitter",
    type=FiniteFloat(min=0, max=86_400),
    default=0.0,
    show_default=True,
    help="Fire each slot up to this many seconds late (a fixed draw per slot).",
)
@priority_option()
@click.option("--max-attempts", type=IntRange(1, bounds.MAX_ATTEMPTS), default=None)
@timeout_option("Seconds each task may run [default: the queue's].")
@deadline_option("Seconds after its slot fired by which each task must start.")
@click.option("--group", default=None, help="Each task's group (fair claiming between groups).")
@click.option("--paused", is_flag=True, help="Store it paused.")
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
@redis_option
def add(
    *,
    queue: str,
    name: str,
    cron: str,
    payload: str,
    tz: str,
    catchup: str,
    catchup_limit: int,
    jitter: float,
    priority: int,
    max_attempts: int | None,
    timeout: float | None,
    deadline: float | None,
    group: str | None,
    paused: bool,
    as_json: bool,
    redis_url: str,
) -> None:
    """Create or change schedule NAME of QUEUE to fire CRON (quote it: '0 3 * * *')."""
    body = _parse_payload(payload)
    with _queue(queue, redis_url) as q:
        try:
            stored = q.schedule(
                name,
                cron,
                body,
                tz=tz,
                catchup=catchup,
                catchup_limit=catchup_limit,
                jitter=jitter,
                priority=priority,
                max_attempts=max_attempts,
                timeout=timeout,
                deadline=deadline,
                paused=paused,
                group=group,
            )
        except ValueError as exc:  # InvalidArgument, InvalidPayload, ScheduleOwned
            raise BadInput(str(exc)) from None
    if as_json:
        click.echo(json.dumps(stored.to_json(), sort_keys=True))
    else:
        click.echo(f"{stored.name}: next slot {_when(stored.next_slot)}")


@schedule.command("ls")
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of the schedules.")
@redis_option
def ls(*, queue: str, as_json: bool, redis_url: str) -> None:
    """List QUEUE's schedules."""
    with _queue(queue, redis_url) as q:
        _show(q.schedules(), as_json)


@schedule.command("rm")
@click.argument("queue")
@click.argument("names", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print {name: deleted} as JSON.")
@redis_option
def rm(*, queue: str, names: tuple[str, ...], as_json: bool, redis_url: str) -> None:
    """Delete schedules of QUEUE (tasks they fired stay); exit 1 if one was not there."""
    done: dict[str, bool] = {}
    with _queue(queue, redis_url) as q:
        for name in names:
            try:
                done[name] = q.unschedule(name)
            except ValueError as exc:
                raise BadInput(str(exc)) from None
    if as_json:
        click.echo(json.dumps(done, sort_keys=True))
    else:
        for name, deleted in done.items():
            click.echo(f"{name}: {'deleted' if deleted else 'no such schedule'}")
    if not all(done.values()):
        raise click.exceptions.Exit(1)


def _toggle(queue: str, names: tuple[str, ...], pause: bool, as_json: bool, url: str) -> None:
    from taskfleet.protocol.errors import ScheduleNotFound

    changed: dict[str, bool] = {}
    with _queue(queue, url) as q:
        for name in names:
            try:
                changed[name] = q.pause_schedule(name) if pause else q.resume_schedule(name)
            except ScheduleNotFound as exc:
                raise click.ClickException(str(exc)) from None
            except ValueError as exc:
                raise BadInput(str(exc)) from None
    if as_json:
        click.echo(json.dumps(changed, sort_keys=True))
    else:
        word = "paused" if pause else "resumed"
        for name, did in changed.items():
            click.echo(f"{name}: {word if did else 'already ' + word}")


@schedule.command("pause")
@click.argument("queue")
@click.argument("names", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print {name: changed} as JSON.")
@redis_option
def pause(*, queue: str, names: tuple[str, ...], as_json: bool, redis_url: str) -> None:
    """Pause schedules of QUEUE: slots that pass while paused are not fired."""
    _toggle(queue, names, True, as_json, redis_url)


@schedule.command("resume")
@click.argument("queue")
@click.argument("names", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print {name: changed} as JSON.")
@redis_option
def resume(*, queue: str, names: tuple[str, ...], as_json: bool, redis_url: str) -> None:
    """Resume schedules of QUEUE from their first slot after now."""
    _toggle(queue, names, False, as_json, redis_url)
