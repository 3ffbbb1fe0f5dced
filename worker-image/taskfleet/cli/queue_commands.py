"""Commands about a queue, run from anywhere: enqueue, flow, configure, stats, task (with
the tree of a flow, ``flowtree``).

Each opens a ``Queue`` (the producer API) for the one call it makes, and closes it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

import click

from taskfleet.cli.options import (
    BadInput,
    FiniteFloat,
    IntRange,
    deadline_option,
    priority_option,
    redis_option,
    scrub_message,
    terminal_safe,
    timeout_option,
)
from taskfleet.protocol import bounds
from taskfleet.protocol.jsondepth import nested_too_deep

if TYPE_CHECKING:
    from pydantic import ValidationError

    from taskfleet.protocol.flows import FlowRecord
    from taskfleet.protocol.tasks import Attempt

#: Tasks per enqueue script call for --count: one call is atomic but blocks Redis for
#: everyone while it runs, so a big --count goes in calls of this size.
ENQUEUE_CHUNK = 1000
MAX_COUNT = 1_000_000


def open_queue(name: str, redis_url: str) -> Any:
    """The queue, or ``BadInput`` (exit 2) for a name no queue can have."""
    from taskfleet.producer.queue import Queue

    try:
        return Queue(name, redis_url=redis_url)
    except ValueError as exc:
        raise BadInput(scrub_message(str(exc))) from None


_queue = open_queue  # the name other command modules import


def _no_constant(name: str) -> NoReturn:
    # Python's json reads NaN / Infinity, which are not JSON and could never be stored.
    raise ValueError(f"{name} is not a JSON value")


class _DuplicateKeyError(ValueError):
    pass


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: an object naming a key twice is refused (the
    parser would keep the last silently; what was meant is unknowable)."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(f"has the key {json.dumps(key)[:100]} twice in one object")
            seen.add(key)
    return data


def _parse_payload(text: str) -> dict[str, Any]:
    # before parsing: the parser's recursion fails past ~1000 levels, with a traceback
    if nested_too_deep(text):
        raise BadInput(
            f"--payload is nested more than {bounds.MAX_PAYLOAD_DEPTH} levels of arrays and "
            "objects deep"
        )
    try:
        payload = json.loads(text, parse_constant=_no_constant, object_pairs_hook=unique_keys)
    except RecursionError:  # a stack already deep; the check above makes this rare
        raise BadInput("--payload is nested too deep to read") from None
    except _DuplicateKeyError as exc:
        raise BadInput(f"--payload {exc}; each key may appear once") from None
    except ValueError as exc:  # JSONDecodeError is one
        raise BadInput(f"--payload is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise BadInput(f"--payload must be a JSON object, got {type(payload).__name__}")
    return payload


@click.command()
@click.argument("queue")
@click.option("--payload", default="{}", show_default=True, help="Task payload, a JSON object.")
@priority_option("Higher runs first.")
@click.option(
    "--delay",
    type=FiniteFloat(min=0, max=bounds.MAX_DELAY_S),
    default=None,
    help="Seconds before it may run (at most 100 years).",
)
@deadline_option("Seconds from now by which it must have started, else it goes dead as expired.")
@click.option(
    "--max-attempts",
    type=IntRange(bounds.MIN_ATTEMPTS, bounds.MAX_ATTEMPTS),
    default=None,
    help="Starts allowed [default: the queue's].",
)
@timeout_option("Seconds a run may take (at most a year) [default: the queue's].")
@click.option(
    "--cost",
    type=IntRange(bounds.MIN_COST, bounds.MAX_COST),
    default=1,
    show_default=True,
    help="Units it takes from the queue's cost rate limit.",
)
@click.option(
    "--task",
    "task_name",
    default=None,
    metavar="NAME",
    help="The name of the handler that runs it (workers' --handler NAME=module:function) "
    "[default: none, the workers' default handler].",
)
@click.option(
    "--group",
    default=None,
    metavar="GROUP",
    help="The group it belongs to (a tenant, a customer): claims are fair between groups "
    "[default: none].",
)
@click.option(
    "--id",
    "task_id",
    default=None,
    help="Task id: enqueueing the same task again changes nothing (said on stderr); "
    "another payload or option under an existing id is an error (exit 1).",
)
@click.option(
    "--after",
    multiple=True,
    metavar="ID",
    help="A task it waits for (repeatable): it runs once every one is done (docs/flows.md).",
)
@click.option(
    "--on-dep-fail",
    type=click.Choice(["fail", "ignore", "cancel"]),
    default=None,
    help="With --after, when one ends dead or cancelled: fail it (default), ignore that "
    "one, or cancel it and the rest.",
)
@click.option(
    "--count",
    type=IntRange(min=1, max=MAX_COUNT),
    default=1,
    show_default=True,
    help=f"Tasks to add; each {ENQUEUE_CHUNK} go in one atomic call, not all of them at once.",
)
@redis_option
def enqueue(
    *,
    queue: str,
    payload: str,
    priority: int,
    delay: float | None,
    deadline: float | None,
    max_attempts: int | None,
    timeout: float | None,
    cost: int,
    task_name: str | None,
    group: str | None,
    task_id: str | None,
    after: tuple[str, ...],
    on_dep_fail: str | None,
    count: int,
    redis_url: str,
) -> None:
    """Add tasks to QUEUE; prints one task id per line."""
    data = _parse_payload(payload)
    if task_id is not None and count > 1:
        raise BadInput("--id names one task; it can't be combined with --count > 1")
    q = open_queue(queue, redis_url)
    options: dict[str, Any] = {
        "priority": priority,
        "delay": delay,
        "deadline": deadline,
        "max_attempts": max_attempts,
        "timeout": timeout,
        "cost": cost,
        "task": task_name,
        "after": list(after) if after else None,
        "on_dep_fail": on_dep_fail,
        "group": group,
    }
    try:
        if count == 1:
            result = q.enqueue_result(data, task_id=task_id, **options)
            click.echo(result.task_id)
            if not result.created:
                click.echo(f"taskfleet: task {result.task_id!r} exists (unchanged)", err=True)
            return
        for start in range(0, count, ENQUEUE_CHUNK):
            size = min(ENQUEUE_CHUNK, count - start)
            ids = q.enqueue_many([{"payload": data, **options} for _ in range(size)])
            click.echo("\n".join(ids))
    finally:
        q.close()


@click.command()
@click.argument("queue")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="FIELD=VALUE",
    help="A QueueConfig field to set (repeatable), e.g. --set lease_ttl_s=60; "
    "FIELD= (empty) returns it to its default.",
)
@click.option("--lease-ttl", type=FiniteFloat(), default=None, help="Same as --set lease_ttl_s=S.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@redis_option
def configure(
    queue: str, settings: tuple[str, ...], lease_ttl: float | None, as_json: bool, redis_url: str
) -> None:
    """Show or change the queue's shared settings (what the operator writes from a
    TaskQueue; outside Kubernetes, this is how they are set)."""
    from pydantic import ValidationError

    from taskfleet.protocol.config import QueueConfig

    if lease_ttl is not None:  # the option's help: "Same as --set lease_ttl_s=S"
        settings = (*settings, f"lease_ttl_s={lease_ttl!r}")
    changes: dict[str, str | None] = {}
    for item in settings:
        field, sep, value = item.partition("=")
        if not sep or field not in QueueConfig.model_fields:
            known = ", ".join(QueueConfig.model_fields)
            raise BadInput(f"--set takes FIELD=VALUE with FIELD one of: {known}; got {item!r}")
        changes[field] = value or None
    q = open_queue(queue, redis_url)
    try:
        current = q.config()
        if changes:
            data: dict[str, object] = {
                k: v for k, v in current.model_dump().items() if v is not None
            }
            for name, text in changes.items():
                if text is None:
                    data.pop(name, None)
                else:
                    data[name] = text
            try:
                current = QueueConfig.model_validate(data, strict=False)
            except ValidationError as exc:
                raise BadInput(f"invalid queue config: {_first_error(exc)}") from None
            q.configure(current)
        shown = current.model_dump()
        if as_json:
            click.echo(json.dumps(shown))
        else:
            for field, value in shown.items():
                click.echo(f"{field}: {'' if value is None else value}")
    finally:
        q.close()


def _first_error(exc: ValidationError) -> str:
    """The first thing to fix, as ``field: what``, without pydantic's type tags and links."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    what = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {what}" if where else what


#: Groups `taskfleet stats` shows (most pending first); `taskfleet group QUEUE` lists all.
TOP_GROUPS = 10


@click.command()
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@redis_option
def stats(queue: str, as_json: bool, redis_url: str) -> None:
    """Counts of QUEUE's tasks by state, its workers and its counters.

    Warns on stderr when the server's maxmemory-policy may delete tasks (docs/redis.md).
    """
    q = open_queue(queue, redis_url)
    data = q.stats()
    policy = _eviction_policy(q.client)
    groups = q.groups()
    paused = sum(1 for g in groups if g.paused_until_ms)
    if as_json:
        top = [dataclasses.asdict(g) for g in groups[:TOP_GROUPS]]
        shown = {**data, "groups": len(groups), "groups_paused": paused, "top_groups": top}
        click.echo(json.dumps(shown, sort_keys=True, default=str))
    else:
        width = max((len(str(key)) for key in data), default=0)
        for key, value in data.items():
            click.echo(f"{key:<{width}}  {terminal_safe(value)}")
        if groups:
            click.echo(f"{'groups':<{width}}  {len(groups)} (most pending first)")
            if paused:
                click.echo(f"{'groups_paused':<{width}}  {paused}")
            for g in groups[:TOP_GROUPS]:
                line = f"  {g.group}  pending={g.pending}  running={g.running}"
                if g.paused_until_ms:
                    line += f"  paused_until_ms={g.paused_until_ms}"
                click.echo(terminal_safe(line))
    if policy is not None and policy != "noeviction":
        click.echo(
            f"taskfleet: warning: Redis maxmemory-policy is {policy!r}: a full Redis deletes "
            "tasks; set maxmemory-policy noeviction",
            err=True,
        )


def _eviction_policy(client: Any) -> str | None:
    """The server's maxmemory-policy (the server probe), None if refused."""
    from taskfleet.protocol.serverprobe import probe

    return probe(client).eviction_policy


@click.command()
@click.argument("queue")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@redis_option
def task(queue: str, task_id: str, as_json: bool, redis_url: str) -> None:
    """Show one task of QUEUE."""
    from taskfleet.cli.flowtree import tree_lines

    q = open_queue(queue, redis_url)
    try:
        found = q.get(task_id)
        tree = tree_lines(q, task_id) if found is not None else []
        record = q.flow(found.flow) if found is not None and found.flow else None
    finally:
        q.close()
    if found is None:
        raise click.ClickException(f"task {task_id!r} not found in queue {queue!r}")
    data = found.model_dump(mode="json")
    if as_json:
        click.echo(json.dumps(data, sort_keys=True))
        return
    data.pop("history", None)  # shown as lines of its own, after the fields
    width = max(len(key) for key in data)
    for key, value in data.items():
        if value is None or value == "":
            continue
        # JSON for structures and for text a terminal can't take (a lone surrogate)
        plain = not isinstance(value, dict | list) and _printable(str(value))
        shown = value if plain else json.dumps(value)
        click.echo(f"{key:<{width}}  {terminal_safe(shown)}")
    if record is not None:  # the flow it belongs to, as its record stands
        click.echo(f"{'flow_state':<{width}}  {_flow_state(record)}")
    for line in history_lines(found.history):
        click.echo(terminal_safe(line))
    if tree:  # what it waits for, what those wait for, what waits on it (docs/flows.md)
        click.echo("flow tree:")
        click.echo("\n".join("  " + line for line in tree))


def history_lines(history: Sequence[Attempt]) -> list[str]:
    """A task's attempts, one line each, then the latest traceback (docs/worker.md)."""
    if not history:
        return []

    def when(value: datetime | None) -> str:
        return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else "-"

    lines = ["history:"]
    for a in history:
        error = a.error or ""
        error = error if len(error) <= 80 else error[:79] + "…"
        lines.append(
            f"  {a.attempt:>3}  {a.outcome or '-':<9}  {a.pod or '-'}  "
            f"{when(a.started_at)} .. {when(a.ended_at)}  {error}".rstrip()
        )
    last = next((a for a in reversed(history) if a.traceback), None)
    if last is not None and last.traceback:
        lines.append(f"traceback of attempt {last.attempt}:")
        lines.extend("  " + line for line in last.traceback.rstrip().splitlines())
    return lines


def _flow_state(record: FlowRecord) -> str:
    counts = f"open={record.open} done={record.done} dead={record.dead}"
    counts += f" cancelled={record.cancelled}"
    if record.ended_at is None:
        return f"running  {counts}"
    return f"ended {record.outcome} at {record.ended_at.isoformat()}  {counts}"


def _printable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@click.command()
@click.argument("queue")
@click.argument("source", type=click.File("r", encoding="utf-8"), default="-")
@redis_option
def flow(queue: str, source: Any, redis_url: str) -> None:
    """Enqueue the flow in SOURCE (a JSON file, '-' for stdin) into QUEUE, every task or
    none; prints one task id per line. A part is a task ({"payload": {...}, "task": ...,
    "task_id": ...}, the options of enqueue) or {"chain": [parts]}, {"group": [parts]},
    {"chord": [group, callback]}."""
    from taskfleet.producer.flows import MAX_FLOW_DEPTH, from_json
    from taskfleet.protocol.errors import InvalidArgument

    text = source.read()
    # before parsing: the parser (and from_json) recurse, and fail past ~1000 levels with
    # Python's own words; a part nests 2 levels ({"chain": [...]}), a payload its own
    limit = 2 * MAX_FLOW_DEPTH + bounds.MAX_PAYLOAD_DEPTH + 2
    if nested_too_deep(text, limit):
        raise BadInput(
            f"the flow nests more than {limit} levels of arrays and objects deep (chains and "
            f"groups at most {MAX_FLOW_DEPTH} levels, a payload {bounds.MAX_PAYLOAD_DEPTH})"
        )
    try:
        value = json.loads(text, parse_constant=_no_constant, object_pairs_hook=unique_keys)
    except _DuplicateKeyError as exc:
        raise BadInput(f"the flow {exc}; each key may appear once") from None
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"the flow is not valid JSON: {str(exc)[:200]}") from None
    try:
        parsed = from_json(value)
    except InvalidArgument as exc:
        raise BadInput(str(exc)) from None
    q = open_queue(queue, redis_url)
    try:
        ids = q.enqueue_flow(parsed).ids
    finally:
        q.close()
    click.echo("\n".join(ids))
