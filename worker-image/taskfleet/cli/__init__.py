"""The ``taskfleet`` command: enqueue, configure, stats, task, ls, cancel, promote, retry,
purge, workers, schedule, top, worker, drain.

Every option can also come from the environment (``TASKFLEET_<OPTION>``, e.g.
``TASKFLEET_REDIS_URL``, ``TASKFLEET_CONCURRENCY``; the worker's ``--timeout`` is
``TASKFLEET_TASK_TIMEOUT``), which is how the operator configures worker pods. Bad input
(Redis refusing the credentials or the user's rights included, and a flow, group, claim
pause or budget refused while an older worker serves the queue) ends with one
``taskfleet: error: ...`` line on stderr and exit code 2; an unreachable Redis or a
missing task with exit code 1; no tracebacks.

The command group and ``main`` (the console script) live here; the commands by role:

- ``queue_commands``: enqueue, flow, configure, stats, task (a queue, from anywhere);
- ``task_commands``: ls, cancel, promote, retry, purge, workers (a queue's tasks after enqueue);
- ``flowtree``: the tree of a flow ``task`` shows;
- ``schedule_commands``: schedule add|ls|rm|pause|resume (a queue's schedules);
- ``worker_commands``: worker, drain (a worker's container);
- ``dashboard_command``: dashboard (the web UI; its package loads inside the command);
- ``options``: what every command shares (``--redis-url``, ``BadInput``, finite floats);
- ``logs``: the worker's log lines (key=value or JSON).

This package sits on top: it imports the protocol, the producer API and the worker;
only ``python -m taskfleet`` (``__main__``) and the console script import it.
"""

from __future__ import annotations

import sys

from taskfleet.worker.earlystop import at_start

# A worker's stop signals are noted from here on, before click, redis and the worker load
# (up to a second on a busy node): a SIGTERM then drains the worker (exit 0), never kills
# it (-15). The container's command is `taskfleet worker ...`.
if sys.argv[1:2] == ["worker"]:
    at_start()

import importlib  # the rest after the signals
from typing import NoReturn

import click
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from taskfleet._version import __version__
from taskfleet.cli.options import redis_url_in_use, scrub_message
from taskfleet.protocol.errors import OlderWorker, TaskfleetError, auth_failure
from taskfleet.protocol.redisurl import redact_redis_url

__all__ = ["main", "mask_url"]

# The former name of `redact_redis_url`, kept for callers that import it from here.
mask_url = redact_redis_url


# Each command's module, loaded when the command runs (or when help lists them all): a
# worker's start imports the worker's command and nothing of the producer-side ones.
COMMANDS = {
    **dict.fromkeys(("enqueue", "flow", "configure", "stats", "task"), "queue_commands"),
    **dict.fromkeys(("ls", "cancel", "promote", "retry", "purge", "workers"), "task_commands"),
    "schedule": "schedule_commands",
    "quota": "quota_commands",
    "provider-quota": "provider_quota_commands",
    "group": "group_commands",
    "top": "top",
    "dashboard": "dashboard_command",
    **dict.fromkeys(("drain", "worker"), "worker_commands"),
}
# Other names users type for a command (taskfleet-node takes the same ones): not listed in
# the help, which shows each command once.
ALIASES = {"list": "ls", "show": "task"}


class _LazyGroup(click.Group):
    """A command group whose commands are imported on first use (click's lazy-loading recipe)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd_name = ALIASES.get(cmd_name, cmd_name)
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        command = getattr(
            importlib.import_module(f"taskfleet.cli.{module}"), cmd_name.replace("-", "_")
        )
        if not isinstance(command, click.Command):  # pragma: no cover - a wiring mistake
            raise TypeError(f"taskfleet.cli.{module}.{cmd_name} is not a click command")
        return command


@click.group(
    cls=_LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(version=__version__, prog_name="taskfleet")
def cli() -> None:
    """taskfleet: a Redis task queue whose workers drain gracefully and never lose a task."""


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
        # An older worker refusing a feature: the caller upgrades the workers first.
        code = 2 if isinstance(exc, ValueError | OlderWorker) else 1
        _fail(scrub_message(str(exc)), code)
    except RedisError as exc:
        url = redis_url_in_use()
        where = f" at {redact_redis_url(url)}" if url else ""
        kind = auth_failure(exc)
        if kind == "authentication":
            _fail(
                f"Redis{where} refused the credentials ({scrub_message(str(exc))}); check the user "
                "and password of --redis-url (TASKFLEET_REDIS_URL)",
                2,
            )
        if kind == "permission":
            from taskfleet.protocol.store import ACL_KEYS

            _fail(
                f"Redis{where} refused a command for this user ({scrub_message(str(exc))}); the "
                f"user needs the queue's keys (~{ACL_KEYS}) and scripting (EVALSHA, "
                "SCRIPT LOAD) besides the commands used",
                2,
            )
        if isinstance(exc, RedisConnectionError | RedisTimeoutError):
            _fail(f"cannot reach Redis{where}: {scrub_message(str(exc))}", 1)
        _fail(f"redis error: {scrub_message(str(exc))}", 1)
    sys.exit(rv if isinstance(rv, int) else 0)


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"taskfleet: error: {message}", err=True)
    sys.exit(code)
