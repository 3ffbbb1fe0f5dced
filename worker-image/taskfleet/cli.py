"""The ``taskfleet`` command: enqueue, worker, drain, stats, task.

Every option can also come from the environment (``TASKFLEET_<OPTION>``, e.g.
``TASKFLEET_REDIS_URL``, ``TASKFLEET_CONCURRENCY``; the worker's ``--timeout`` is
``TASKFLEET_TASK_TIMEOUT``), which is how the operator configures worker pods. Bad input
(Redis refusing the credentials or the user's rights included) ends with one
``taskfleet: error: ...`` line on stderr and exit code 2; an unreachable Redis or a
missing task with exit code 1; no tracebacks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import secrets
import signal
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar

import click
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from taskfleet.protocol import bounds, environment
from taskfleet.protocol.errors import NameInUse, TaskfleetError, auth_failure
from taskfleet.protocol.redisurl import InvalidRedisURL, parse_redis_url, redact_redis_url, scrub

__all__ = ["main", "mask_url"]

DEFAULT_REDIS_URL = "redis://localhost:6379/0"
#: Tasks per enqueue script call for --count: one call is atomic but blocks Redis for
#: everyone while it runs, so a big --count goes in calls of this size.
ENQUEUE_CHUNK = 1000
MAX_COUNT = 1_000_000

F = TypeVar("F", bound=Callable[..., Any])


class BadInput(click.ClickException):
    """Input the command can't use; exit code 2 like click's own usage errors."""

    exit_code = 2


# The former name of `redact_redis_url`, kept for callers that import it from here.
mask_url = redact_redis_url
# The Redis URL the command was given (for error messages, redacted), once options parsed.
_redis_url_in_use: str | None = None


class FiniteFloat(click.FloatRange):
    """A FloatRange that refuses nan and inf: nan slips past every bound (it compares
    false) and inf means "never", neither of which any option here can use."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):  # before the range: "inf is not in 0<x<=1" misleads
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


def _check_redis_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Refuse a URL redis-py would misread or reject late, while parsing options: before
    the worker forks, loads its handler or retries a connection that can never work. The
    message says what is wrong and never quotes the URL (it may hold a password)."""
    global _redis_url_in_use  # noqa: PLW0603 - one command per process
    _redis_url_in_use = value
    try:
        parse_redis_url(value)
    except InvalidRedisURL as exc:
        raise click.BadParameter(
            f"not a Redis URL taskfleet can use: {exc}; expected "
            "redis://[[user]:password@]host[:port][/db], rediss://... "
            "or unix:///path",
            ctx,
            param,
        ) from None
    return value


def redis_option(func: F) -> F:
    return click.option(
        "--redis-url",
        envvar=environment.REDIS_URL,
        default=DEFAULT_REDIS_URL,
        show_default=True,
        show_envvar=True,
        callback=_check_redis_url,
        help="Redis to use; a password in it is never printed.",
    )(func)


# ----------------------------------------------------------------------------- logging


class _KeyValueFormatter(logging.Formatter):
    """``ts=... level=info event=task_done task=... ms=12.3``: one greppable line per event."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _record_fields(record)
        return " ".join(f"{key}={_kv(value)}" for key, value in fields.items())


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_record_fields(record), default=str)


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
        "level": record.levelname.lower(),
        "event": record.getMessage(),
    }
    fields.update(getattr(record, "fields", {}))
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        fields["error"] = f"{type(exc).__name__}: {exc}"
    return fields


def _kv(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if text == "" or any(c in text for c in ' "=\n\t'):
        return json.dumps(text)
    return text


def configure_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


# ----------------------------------------------------------------------------- commands


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="taskfleet")
def cli() -> None:
    """taskfleet: a Redis task queue whose workers drain gracefully and never lose a task."""


def _queue(name: str, redis_url: str) -> Any:
    from taskfleet.producer.queue import Queue

    try:
        return Queue(name, redis_url=redis_url)
    except ValueError as exc:
        raise BadInput(_scrub(str(exc))) from None


def _no_constant(name: str) -> NoReturn:
    # Python's json reads NaN / Infinity, which are not JSON and could never be stored.
    raise ValueError(f"{name} is not a JSON value")


def _parse_payload(text: str) -> dict[str, Any]:
    try:
        payload = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:  # JSONDecodeError is one
        raise BadInput(f"--payload is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise BadInput(f"--payload must be a JSON object, got {type(payload).__name__}")
    return payload


@cli.command()
@click.argument("queue")
@click.option("--payload", default="{}", show_default=True, help="Task payload, a JSON object.")
@click.option(
    "--priority",
    type=click.IntRange(bounds.PRIORITY_MIN, bounds.PRIORITY_MAX),
    default=0,
    show_default=True,
    help="Higher runs first.",
)
@click.option(
    "--delay",
    type=FiniteFloat(min=0, max=bounds.MAX_DELAY_S),
    default=None,
    help="Seconds before it may run (at most 100 years).",
)
@click.option(
    "--deadline",
    type=FiniteFloat(min=0, min_open=True, max=bounds.MAX_DEADLINE_S),
    default=None,
    help="Seconds from now by which it must have started, else it goes dead as expired.",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(bounds.MIN_ATTEMPTS, bounds.MAX_ATTEMPTS),
    default=None,
    help="Starts allowed [default: the queue's].",
)
@click.option(
    "--timeout",
    type=FiniteFloat(min=0, min_open=True, max=bounds.MAX_TIMEOUT_S),
    default=None,
    help="Seconds a run may take (at most a year) [default: the queue's].",
)
@click.option(
    "--cost",
    type=click.IntRange(bounds.MIN_COST, bounds.MAX_COST),
    default=1,
    show_default=True,
    help="Units it takes from the queue's cost rate limit.",
)
@click.option(
    "--id",
    "task_id",
    default=None,
    help="Task id: enqueueing the same task again changes nothing (said on stderr); "
    "another payload or option under an existing id is an error (exit 1).",
)
@click.option(
    "--count",
    type=click.IntRange(min=1, max=MAX_COUNT),
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
    task_id: str | None,
    count: int,
    redis_url: str,
) -> None:
    """Add tasks to QUEUE; prints one task id per line."""
    data = _parse_payload(payload)
    if task_id is not None and count > 1:
        raise BadInput("--id names one task; it can't be combined with --count > 1")
    q = _queue(queue, redis_url)
    options: dict[str, Any] = {
        "priority": priority,
        "delay": delay,
        "deadline": deadline,
        "max_attempts": max_attempts,
        "timeout": timeout,
        "cost": cost,
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


@cli.command()
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
    from taskfleet.protocol.config import QueueConfig

    changes: dict[str, str | None] = {}
    for item in settings:
        field, sep, value = item.partition("=")
        if not sep or field not in QueueConfig.model_fields:
            known = ", ".join(QueueConfig.model_fields)
            raise BadInput(f"--set takes FIELD=VALUE with FIELD one of: {known}; got {item!r}")
        changes[field] = value or None
    if lease_ttl is not None:
        changes["lease_ttl_s"] = repr(lease_ttl)
    q = _queue(queue, redis_url)
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
            except ValueError as exc:
                first = str(exc).splitlines()
                raise BadInput(f"invalid queue config: {' '.join(first[1:3]).strip()}") from None
            q.configure(current)
        shown = current.model_dump()
        if as_json:
            click.echo(json.dumps(shown))
        else:
            for field, value in shown.items():
                click.echo(f"{field}: {'' if value is None else value}")
    finally:
        q.close()


@cli.command()
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@redis_option
def stats(queue: str, as_json: bool, redis_url: str) -> None:
    """Counts of QUEUE's tasks by state, its workers and its counters."""
    data = _queue(queue, redis_url).stats()
    if as_json:
        click.echo(json.dumps(data, sort_keys=True, default=str))
        return
    width = max((len(str(key)) for key in data), default=0)
    for key, value in data.items():
        click.echo(f"{key:<{width}}  {value}")


@cli.command()
@click.argument("queue")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@redis_option
def task(queue: str, task_id: str, as_json: bool, redis_url: str) -> None:
    """Show one task of QUEUE."""
    q = _queue(queue, redis_url)
    try:
        found = q.get(task_id)
    finally:
        q.close()
    if found is None:
        raise click.ClickException(f"task {task_id!r} not found in queue {queue!r}")
    data = found.model_dump(mode="json")
    if as_json:
        click.echo(json.dumps(data, sort_keys=True))
        return
    width = max(len(key) for key in data)
    for key, value in data.items():
        if value is None or value == "":
            continue
        # JSON for structures and for text a terminal can't take (a lone surrogate)
        plain = not isinstance(value, dict | list) and _printable(str(value))
        shown = value if plain else json.dumps(value)
        click.echo(f"{key:<{width}}  {shown}")


def _printable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@cli.command()
@click.option("--wait", is_flag=True, help="Return only when the worker holds no task.")
@click.option(
    "--timeout",
    type=FiniteFloat(min=0),
    default=None,
    help="With --wait: give up after this many seconds (exit 1).",
)
@click.option(
    "--runtime-dir",
    envvar=environment.RUNTIME_DIR,
    default=None,
    show_envvar=True,
    help="Where the worker keeps worker.json [default: $XDG_RUNTIME_DIR/taskfleet, else "
    "/tmp/taskfleet-<uid>].",
)
def drain(wait: bool, timeout: float | None, runtime_dir: str | None) -> None:
    """Tell the worker in this container to drain (the Kubernetes preStop hook)."""
    from taskfleet.worker.runtime import (
        FILE_NAME,
        DrainError,
        UnsafeRuntimeDir,
        prepare_runtime_dir,
        request_drain,
    )

    try:
        path = prepare_runtime_dir(runtime_dir, create=False) / FILE_NAME
        drained = request_drain(path, wait=wait, timeout=timeout)
    except (DrainError, UnsafeRuntimeDir) as exc:
        raise click.ClickException(str(exc)) from None
    if not drained:
        raise click.ClickException(f"worker still holds tasks after {timeout:g}s")


@cli.command()
@click.option("--queue", envvar=environment.QUEUE, required=True, show_envvar=True)
@click.option(
    "--handler",
    envvar=environment.HANDLER,
    required=True,
    show_envvar=True,
    help="The task function, 'package.module:function' (sync or async).",
)
@click.option(
    "--concurrency",
    envvar=environment.CONCURRENCY,
    type=int,
    default=1,
    show_default=True,
    show_envvar=True,
    help="Tasks this process runs at once.",
)
@click.option(
    "--prefetch",
    envvar=environment.PREFETCH,
    type=int,
    default=None,
    show_envvar=True,
    help="Claimed tasks a sync handler's worker may hold waiting for a free slot, while "
    "its tasks are short (a typical run under 10 ms); one that waits 1 s goes back to the "
    "queue. 0 = none [default: twice --concurrency].",
)
@click.option(
    "--drain-timeout",
    envvar=environment.DRAIN_TIMEOUT,
    type=FiniteFloat(),
    default=30.0,
    show_default=True,
    show_envvar=True,
    help="Seconds in-flight tasks may finish after SIGTERM before they are released; "
    "keep it below the pod's terminationGracePeriodSeconds.",
)
@click.option(
    "--heartbeat-interval",
    envvar=environment.HEARTBEAT_INTERVAL,
    type=FiniteFloat(),
    default=5.0,
    show_default=True,
    show_envvar=True,
)
@click.option(
    "--lease-ttl",
    envvar=environment.LEASE_TTL,
    type=FiniteFloat(),
    default=None,
    show_envvar=True,
    help="The lease TTL this worker expects. The queue's config sets it for all its "
    "workers (taskfleet configure QUEUE --lease-ttl S, or the TaskQueue); the worker only "
    "reads it and logs lease_ttl_differs when the queue says otherwise [default: the "
    "queue's setting, 30].",
)
@click.option(
    "--timeout",
    "task_timeout",
    envvar=environment.TASK_TIMEOUT,
    type=FiniteFloat(),
    default=None,
    show_envvar=True,
    help="Seconds a task may run unless it sets its own timeout [default: none].",
)
@click.option(
    "--pod",
    envvar=environment.POD_NAME,
    default=None,
    show_envvar=True,
    help="Worker name, unique among the queue's live workers (in Kubernetes: the pod's "
    "name). A restart under the same name takes back its earlier tasks; a start under "
    "the name of a live worker is refused [default: <hostname>-<pid>-<random>, new per "
    "process].",
)
@click.option(
    "--runtime-dir",
    envvar=environment.RUNTIME_DIR,
    default=None,
    show_envvar=True,
    help="Where worker.json lives, for `taskfleet drain` (made with mode 0700 if missing) "
    "[default: $XDG_RUNTIME_DIR/taskfleet, else /tmp/taskfleet-<uid>; refused unless "
    "private].",
)
@click.option(
    "--log-format",
    envvar=environment.LOG_FORMAT,
    type=click.Choice(["kv", "json"]),
    default="kv",
    show_default=True,
    show_envvar=True,
)
@click.option(
    "--log-level",
    envvar=environment.LOG_LEVEL,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    show_envvar=True,
)
@redis_option
def worker(
    *,
    queue: str,
    handler: str,
    concurrency: int,
    prefetch: int | None,
    drain_timeout: float,
    heartbeat_interval: float,
    lease_ttl: float | None,
    task_timeout: float | None,
    pod: str | None,
    runtime_dir: str | None,
    log_format: str,
    log_level: str,
    redis_url: str,
) -> None:
    """Run tasks of a queue until SIGTERM/SIGINT or `taskfleet drain`, then drain and exit 0.

    A second signal releases the tasks still running at once and exits (also 0: nothing
    is lost, the released tasks run elsewhere).
    """
    from taskfleet.worker import WorkerSettings
    from taskfleet.worker.handlers import HandlerLoadError, load_handler
    from taskfleet.worker.identity import default_pod_name
    from taskfleet.worker.reaper import run_as_init
    from taskfleet.worker.runtime import UnsafeRuntimeDir, prepare_runtime_dir

    try:
        runtime_dir = str(prepare_runtime_dir(runtime_dir, create=True))
    except UnsafeRuntimeDir as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:
        raise BadInput(f"runtime directory: {exc}") from None

    settings = WorkerSettings(
        queue=queue,
        redis_url=redis_url,
        pod=pod or default_pod_name(),
        # Fresh per process start: tells this run's claims from an earlier container's.
        incarnation=secrets.token_hex(6),
        concurrency=concurrency,
        prefetch=prefetch,
        drain_timeout=drain_timeout,
        heartbeat_interval=heartbeat_interval,
        lease_ttl=lease_ttl,
        default_timeout=task_timeout,
        runtime_dir=runtime_dir,
    )
    try:
        settings.validate()
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    # Before anything can start a thread: as PID 1 we fork into init + worker here.
    run_as_init()
    try:
        resolved = load_handler(handler)
    except HandlerLoadError as exc:
        raise BadInput(str(exc)) from None
    configure_logging(log_format, log_level)
    # Not asyncio.run(): closing the loop would join the default executor, and a handler's
    # hung asyncio.to_thread() call must not keep a drained worker from exiting.
    code = asyncio.Runner().run(_serve(settings, resolved))
    _exit_now(code)


async def _serve(settings: Any, handler: Any) -> int:
    from taskfleet.worker import Worker, log_event
    from taskfleet.worker.handlers import format_error

    worker = Worker(settings, handler)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.request_drain)
    try:
        return await worker.run()
    except NameInUse as exc:  # refused at start: bad configuration, like a bad option
        click.echo(f"taskfleet: error: {exc}", err=True)
        return 2
    except Exception as exc:  # one log line, not a traceback, and a restartable exit
        log_event(logging.ERROR, "worker_failed", error=format_error(exc))
        return 1


def _exit_now(code: int) -> NoReturn:
    """Exit without joining handler threads: a timed-out sync handler may never return."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# ----------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> NoReturn:
    """Console-script entry: one line per error, exit 2 for bad input, 1 for failures."""
    try:
        rv = cli.main(args=argv, prog_name="taskfleet", standalone_mode=False)
    except click.UsageError as exc:
        _fail(exc.format_message(), 2)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    except click.Abort:
        _fail("aborted", 1)
    except TaskfleetError as exc:
        code = 2 if isinstance(exc, ValueError) else 1
        _fail(_scrub(str(exc)), code)
    except RedisError as exc:
        url = _redis_url_in_use or os.environ.get(environment.REDIS_URL, "")
        where = f" at {redact_redis_url(url)}" if url else ""
        kind = auth_failure(exc)
        if kind == "authentication":
            _fail(
                f"Redis{where} refused the credentials ({_scrub(str(exc))}); check the user "
                "and password of --redis-url (TASKFLEET_REDIS_URL)",
                2,
            )
        if kind == "permission":
            _fail(
                f"Redis{where} refused a command for this user ({_scrub(str(exc))}); the "
                "user needs the queue's keys (~tf:{<queue>}:*) and scripting (EVALSHA, "
                "SCRIPT LOAD) besides the commands used",
                2,
            )
        if isinstance(exc, RedisConnectionError | RedisTimeoutError):
            _fail(f"cannot reach Redis{where}: {_scrub(str(exc))}", 1)
        _fail(f"redis error: {_scrub(str(exc))}", 1)
    sys.exit(rv if isinstance(rv, int) else 0)


def _scrub(text: str) -> str:
    """The message with the Redis URL's secrets and any URL in it masked."""
    return scrub(text, _redis_url_in_use or os.environ.get(environment.REDIS_URL))


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"taskfleet: error: {message}", err=True)
    sys.exit(code)
