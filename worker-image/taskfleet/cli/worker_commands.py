"""Commands of a worker's container: ``worker`` runs the worker, ``drain`` (the
Kubernetes preStop hook) tells it to drain.

The worker's modules load inside the commands, so ``drain`` starts without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
from typing import Any, NoReturn

import click

from taskfleet.cli.logs import configure_logging
from taskfleet.cli.options import BadInput, FiniteFloat, IntRange, redis_option
from taskfleet.protocol import environment
from taskfleet.protocol.defaults import DEFAULT
from taskfleet.protocol.errors import NameInUse, PodGone, RedisEvicts
from taskfleet.protocol.workernames import PROCESS_SEPARATOR, process_name
from taskfleet.worker.settings import DEFAULT_HELD_GRACE_S

#: Upper bound of --processes.
MAX_PROCESSES = 256


@click.command()
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


@click.command()
@click.option("--queue", envvar=environment.QUEUE, required=True, show_envvar=True)
@click.option(
    "--app-dir",
    envvar=environment.APP_DIR,
    default=None,
    show_envvar=True,
    help="Import handlers from this directory first (it goes to the front of the import "
    "path, as with `python -m`) [default: the current directory].",
)
@click.option(
    "--handler",
    "handlers",
    envvar=environment.HANDLER,
    required=True,
    multiple=True,
    show_envvar=True,
    help="The task function, 'package.module:function' (sync or async), for tasks without "
    "a name; 'NAME=package.module:function' for tasks enqueued with task=NAME; or "
    "'package.module:REGISTRY', a dict of names to functions. Repeat it to serve several "
    "(in the variable: separated by spaces).",
)
@click.option(
    "--concurrency",
    envvar=environment.CONCURRENCY,
    type=IntRange(),
    default=1,
    show_default=True,
    show_envvar=True,
    help="Tasks this process runs at once.",
)
@click.option(
    "--processes",
    envvar=environment.PROCESSES,
    type=IntRange(1, MAX_PROCESSES),
    default=1,
    show_default=True,
    show_envvar=True,
    help="Worker processes, each with --concurrency slots: a CPU-bound sync handler uses one "
    "core per process. Above 1 this process stays a supervisor that re-forks a process "
    "that dies and drains them all on SIGTERM; process i is the worker <pod>#i.",
)
@click.option(
    "--isolation",
    envvar=environment.ISOLATION,
    type=click.Choice(["thread", "process"]),
    default="thread",
    show_default=True,
    show_envvar=True,
    help="Where a task runs: 'thread', on one of this process's --concurrency threads "
    "(cheapest; a sync handler can only be asked to stop, cancelled()); 'process', in a "
    "child process per slot that cancel, timeout, a lost lease and the drain deadline "
    "stop (SIGTERM, then SIGKILL 5 s later), and whose death fails only its attempt. "
    "Async handlers then run on the child's own event loop.",
)
@click.option(
    "--max-tasks-per-child",
    envvar=environment.MAX_TASKS_PER_CHILD,
    type=click.IntRange(min=1),
    default=None,
    show_envvar=True,
    help="With --isolation process: replace a slot's child process after this many tasks, "
    "so the memory a leaking handler holds goes back [default: never].",
)
@click.option(
    "--prefetch",
    envvar=environment.PREFETCH,
    type=IntRange(),
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
    "--held-grace",
    envvar=environment.HELD_GRACE,
    type=FiniteFloat(),
    default=DEFAULT_HELD_GRACE_S,
    show_default=True,
    show_envvar=True,
    help="Seconds a slot may stay held by a call given up on (its task timed out, its lease "
    "was lost) before it is stuck; when every slot is stuck the worker drains and exits 3 "
    "to be restarted.",
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
    help="Deprecated, ignored with a warning (lease_ttl_option_ignored): the queue's config "
    "sets the lease TTL for all its workers (taskfleet configure QUEUE --lease-ttl S, or the "
    "TaskQueue's heartbeat.ttlSeconds) [queue default: "
    f"{DEFAULT.lease_ttl_s:g}].",
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
    "--fire-schedules/--no-fire-schedules",
    envvar=environment.FIRE_SCHEDULES,
    default=True,
    show_default=True,
    show_envvar=True,
    help="Fire the queue's due schedules in the background (every worker does; each slot "
    "fires once however many do).",
)
@click.option(
    "--allow-eviction",
    envvar=environment.ALLOW_EVICTION,
    is_flag=True,
    default=False,
    show_envvar=True,
    help="Start even if Redis's maxmemory-policy may delete keys (anything but "
    "noeviction): a full Redis then deletes tasks it acknowledged. Warned at start and "
    "exported as taskfleet_worker_redis_evicting [default: refuse to start, exit 2].",
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
@click.option(
    "--metrics-port",
    envvar=environment.METRICS_PORT,
    type=IntRange(0, 65535),
    default=0,
    show_default=True,
    show_envvar=True,
    help="Serve Prometheus metrics on this port, all interfaces (needs the 'metrics' "
    "extra); 0 = off. With --processes N, process i serves on this port + i - 1. The "
    "operator's pods serve them on 9100 (docs/metrics.md).",
)
@redis_option
def worker(
    *,
    queue: str,
    app_dir: str | None,
    handlers: tuple[str, ...],
    concurrency: int,
    processes: int,
    isolation: str,
    max_tasks_per_child: int | None,
    prefetch: int | None,
    drain_timeout: float,
    held_grace: float,
    heartbeat_interval: float,
    lease_ttl: float | None,
    task_timeout: float | None,
    pod: str | None,
    runtime_dir: str | None,
    fire_schedules: bool,
    allow_eviction: bool,
    log_format: str,
    log_level: str,
    metrics_port: int,
    redis_url: str,
) -> None:
    """Run tasks of a queue until SIGTERM/SIGINT or `taskfleet drain`, then drain and exit 0.

    A second signal releases the tasks still running at once and exits (also 0: nothing
    is lost, the released tasks run elsewhere).
    """
    from taskfleet.worker import WorkerSettings
    from taskfleet.worker.earlystop import at_start
    from taskfleet.worker.handlers import HandlerLoadError, put_app_dir_first
    from taskfleet.worker.identity import default_pod_name
    from taskfleet.worker.reaper import run_as_init
    from taskfleet.worker.runtime import UnsafeRuntimeDir, prepare_runtime_dir

    # Installed already by `main` when the command line says worker (before the imports);
    # a SIGTERM from then on drains the worker once it runs.
    early = at_start()
    if pod is not None and PROCESS_SEPARATOR in pod:
        raise BadInput(
            f"--pod must not contain {PROCESS_SEPARATOR!r}: it separates a pod's name from "
            "the number of its worker process"
        )
    try:
        # Before any fork: every worker process imports handlers from the same place.
        put_app_dir_first(app_dir)
    except HandlerLoadError as exc:
        raise BadInput(str(exc)) from None
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
        held_grace=held_grace,
        heartbeat_interval=heartbeat_interval,
        lease_ttl=lease_ttl,
        default_timeout=task_timeout,
        runtime_dir=runtime_dir,
        fire_schedules=fire_schedules,
        allow_eviction=allow_eviction,
        isolation=isolation,
        max_tasks_per_child=max_tasks_per_child,
    )
    try:
        settings.validate()
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    configure_logging(log_format, log_level)
    if processes > 1:
        _exit_now(_supervise(settings, handlers, processes, metrics_port, early))
    # Before anything can start a thread: as PID 1 we fork into init + worker here.
    run_as_init()
    _run_worker(settings, handlers, early, metrics_port)


def _supervise(
    settings: Any, handlers: tuple[str, ...], processes: int, metrics_port: int, early: Any
) -> int:
    """Fork ``processes`` workers named ``<pod>#<i>`` and watch them (see ``supervisor``).
    Process i serves its metrics on ``metrics_port + i - 1``."""
    import dataclasses

    # Loaded once here, shared by every fork: a re-forked worker starts without imports.
    import taskfleet.worker.core  # noqa: F401
    from taskfleet.worker.earlystop import EarlyStop
    from taskfleet.worker.supervisor import Supervisor, child_runtime_dir

    def start_child(index: int) -> NoReturn:
        directory = child_runtime_dir(settings.runtime_dir, index)
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)
        child = dataclasses.replace(
            settings,
            pod=process_name(settings.pod, index),
            incarnation=secrets.token_hex(6),
            runtime_dir=directory,
        )
        try:
            port = metrics_port + index - 1 if metrics_port else 0
            _run_worker(child, handlers, EarlyStop().install(), port)
        except BadInput as exc:
            click.echo(f"taskfleet: error: {exc.format_message()}", err=True)
            _exit_now(2)

    supervisor = Supervisor(
        processes,
        start_child,
        runtime_dir=settings.runtime_dir,
        pod=settings.pod,
        queue=settings.queue,
        early=early,
    )
    return supervisor.run()


def _run_worker(
    settings: Any, handlers: tuple[str, ...], early: Any, metrics_port: int
) -> NoReturn:
    from taskfleet.worker.handlers import HandlerLoadError
    from taskfleet.worker.named import load_handlers

    try:
        resolved = load_handlers(handlers)
        if settings.isolated:
            from taskfleet.worker.isolation import check_sendable

            check_sendable(resolved)
    except (HandlerLoadError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    from taskfleet.worker.children import end_children

    # Not asyncio.run(): closing the loop would join the default executor, and a handler's
    # hung asyncio.to_thread() call must not keep a drained worker from exiting.
    code = asyncio.Runner().run(_serve(settings, resolved, early, metrics_port))
    end_children()  # what handlers forked and left running must not outlive us
    _exit_now(code)


async def _serve(settings: Any, handler: Any, early: Any, metrics_port: int) -> int:
    from taskfleet.worker import Worker, log_event
    from taskfleet.worker.handlers import format_error
    from taskfleet.worker.metrics import MetricsUnavailable, serve

    worker = Worker(settings, handler)
    if metrics_port:
        try:
            serve(worker, metrics_port)
        except MetricsUnavailable as exc:  # bad configuration, like a bad option
            click.echo(f"taskfleet: error: {exc}", err=True)
            return 2
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.request_drain)
    if early.requested:  # signalled before the loop could take it: drain at once
        worker.request_drain()
    try:
        return await worker.run()
    except (NameInUse, RedisEvicts, PodGone) as exc:  # refused at start
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
