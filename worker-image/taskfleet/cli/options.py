"""What every command shares: ``--redis-url`` (checked while options are parsed), finite
floats, ``BadInput``, and the Redis URL in use for error messages (redacted)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from taskfleet.protocol import bounds, environment
from taskfleet.protocol.redisurl import InvalidRedisURL, parse_redis_url, scrub

DEFAULT_REDIS_URL = "redis://localhost:6379/0"

F = TypeVar("F", bound=Callable[..., Any])


class BadInput(click.ClickException):
    """Input the command can't use; exit code 2 like click's own usage errors."""

    exit_code = 2


# The Redis URL the command was given (for error messages, redacted), once options parsed.
_redis_url_in_use: str | None = None


def redis_url_in_use() -> str | None:
    """The Redis URL of this command: the option's once parsed, else the environment's."""
    return _redis_url_in_use or os.environ.get(environment.REDIS_URL)


def scrub_message(text: str) -> str:
    """The message with the Redis URL's secrets and any URL in it masked."""
    return scrub(text, redis_url_in_use())


#: What a number given as text may look like: ASCII digits only (``int()`` and ``float()``
#: also read other scripts' digits, ``_`` separators and surrounding spaces).
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(
    r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(nan|inf|infinity)", re.I
)


class IntRange(click.IntRange):
    """click's IntRange over ASCII digits only."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _INTEGER_TEXT.fullmatch(value):
            self.fail(f"{value!r} is not a valid integer.", param, ctx)
        return super().convert(value, param, ctx)


#: Characters a terminal acts on instead of showing: C0 and C1 controls (escape sequences
#: can move the cursor, rewrite lines, set the window title), DEL, and the bidirectional
#: overrides that make text read otherwise than it is stored.
_UNSHOWABLE = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in (*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))
}


def terminal_safe(text: object) -> str:
    """Stored text (a handler's error, a payload, a worker's host) as a terminal shows it
    safely: control characters as escapes (``\\x1b``), on one line. For human output only;
    JSON output is exact (``json.dumps`` escapes them its own way)."""
    return str(text).translate(_UNSHOWABLE)


class FiniteFloat(click.FloatRange):
    """A FloatRange that refuses nan and inf: nan slips past every bound (it compares
    false) and inf means "never", neither of which any option here can use."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _FLOAT_TEXT.fullmatch(value):
            self.fail(f"{value!r} is not a valid float.", param, ctx)
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


# The options a task takes, shared by `enqueue` and `schedule add` (each with its own help).


def priority_option(help: str | None = None) -> Callable[[F], F]:
    """``--priority``: higher runs first, within the protocol's bounds."""
    return click.option(
        "--priority",
        type=IntRange(bounds.PRIORITY_MIN, bounds.PRIORITY_MAX),
        default=0,
        show_default=True,
        help=help,
    )


def timeout_option(help: str) -> Callable[[F], F]:
    """``--timeout``: seconds a run may take, at most a year."""
    return click.option(
        "--timeout",
        type=FiniteFloat(min=0, min_open=True, max=bounds.MAX_TIMEOUT_S),
        default=None,
        help=help,
    )


def deadline_option(help: str) -> Callable[[F], F]:
    """``--deadline``: seconds by which a task must have started."""
    return click.option(
        "--deadline",
        type=FiniteFloat(min=0, min_open=True, max=bounds.MAX_DEADLINE_S),
        default=None,
        help=help,
    )
