"""``taskfleet group``: a queue's groups (pending and running tasks of each), and one
group's own settings, shown or changed at run time."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import click

from taskfleet.cli.options import BadInput, redis_option, terminal_safe
from taskfleet.cli.queue_commands import open_queue
from taskfleet.protocol.groups import GroupSettings

#: A group's own settings, as the protocol names them.
_FIELDS = tuple(f.name for f in dataclasses.fields(GroupSettings))


@click.command("group")
@click.argument("queue")
@click.argument("group_name", metavar="[GROUP]", required=False)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="FIELD=VALUE",
    help=f"One of GROUP's own settings ({', '.join(_FIELDS)}), repeatable; FIELD= (empty) "
    "returns it to the queue's default for every group (the config's group_* fields).",
)
@click.option(
    "--fair-by",
    metavar="UNIT|claims",
    help="Make QUEUE's groups fair by their settled use of UNIT of the provider quotas their "
    "tasks name (output_tokens, say), weighted as by claims; 'claims': by claims (the default).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@redis_option
def group(
    queue: str,
    group_name: str | None,
    *,
    settings: tuple[str, ...],
    fair_by: str | None,
    as_json: bool,
    redis_url: str,
) -> None:
    """Without GROUP: QUEUE's groups with pending or running tasks, most pending first
    (and the end of a group's own claim pause, if one holds); with --fair-by, what they
    are fair by is set first and shown.
    With GROUP: its own settings (weight, concurrency cap, rate limits), changed by --set;
    the next claim applies them."""
    from taskfleet.protocol.errors import InvalidArgument
    from taskfleet.protocol.groups import check_fair_by, check_group

    if fair_by is not None:
        if group_name is not None:
            raise BadInput("--fair-by is the queue's, for every group: give no GROUP")
        try:
            unit = check_fair_by(fair_by)
        except InvalidArgument as exc:
            raise BadInput(str(exc)) from None
        q = open_queue(queue, redis_url)
        try:
            q.set_fair_by(unit)
        finally:
            q.close()
        if as_json:
            click.echo(json.dumps({"fair_by": unit or "claims"}))
        else:
            click.echo(f"fair_by: {unit or 'claims'}")
        return
    if group_name is None:
        if settings:
            raise BadInput("--set needs a GROUP")
        q = open_queue(queue, redis_url)
        try:
            counts = q.groups()
        finally:
            q.close()
        if as_json:
            click.echo(json.dumps([dataclasses.asdict(c) for c in counts]))
            return
        for c in counts:
            line = f"{c.group}  pending={c.pending}  running={c.running}"
            if c.paused_until_ms:
                line += f"  paused_until={_when(c.paused_until_ms)}"
            click.echo(terminal_safe(line))
        return
    try:
        check_group(group_name)
    except InvalidArgument as exc:
        raise BadInput(str(exc)) from None
    changes: dict[str, str] = {}
    for item in settings:
        field, sep, value = item.partition("=")
        if not sep or field not in _FIELDS:
            raise BadInput(f"--set takes FIELD=VALUE with FIELD one of: {', '.join(_FIELDS)}")
        changes[field] = value
    q = open_queue(queue, redis_url)
    try:
        current = q.group_settings(group_name)
        if changes:
            data = dataclasses.asdict(current)
            try:
                for name, text in changes.items():
                    data[name] = _number(name, text) if text else None
                current = GroupSettings(**data)
            except ValueError as exc:  # InvalidArgument is one
                raise BadInput(f"--set: {exc}") from None
            q.set_group(group_name, current)
    finally:
        q.close()
    shown = dataclasses.asdict(current)
    if as_json:
        click.echo(json.dumps(shown))
        return
    for field, value in shown.items():
        click.echo(f"{field}: {'' if value is None else value}")


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _number(name: str, text: str) -> float | int:
    """A setting's value as typed: the weight may be a fraction, the others are counts.
    Text that is not a number is refused naming the field, not with Python's own words."""
    try:
        return float(text) if name == "weight" else int(text)
    except ValueError:
        kind = "a number" if name == "weight" else "an integer"
        raise ValueError(f"{name} must be {kind}, not {text!r}") from None
