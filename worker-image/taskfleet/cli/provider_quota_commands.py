"""``taskfleet provider-quota configure|show|pause|resume NAME``: a provider quota
shared by every queue that names it (docs/quotas.md).

``taskfleet quota`` is a queue's own claim pause and budget; a provider quota belongs to
no queue: its limits hold for every queue, group and language whose tasks name it
(``enqueue(..., quotas={NAME: {...}})``). Bad values are refused with one line (exit 2).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import click

from taskfleet.cli.options import BadInput, FiniteFloat, redis_option, terminal_safe
from taskfleet.producer.providerquota import Quota
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.provider_quota import QuotaUse

__all__ = ["provider_quota"]


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextmanager
def _quota(name: str, redis_url: str) -> Iterator[Quota]:
    try:
        quota = Quota(name, redis_url=redis_url)
    except InvalidArgument as e:
        raise BadInput(str(e)) from None
    try:
        yield quota
    except InvalidArgument as e:
        raise BadInput(str(e)) from None
    finally:
        quota.close()


def _show(use: QuotaUse, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(use.as_dict(), sort_keys=True))
        return
    cap = "none" if use.max_concurrency == 0 else str(use.max_concurrency)
    click.echo(
        f"quota {use.name}: window {use.period_ms} ms from {_when(use.window_ms)}; "
        f"concurrency {use.reserved} of {cap}"
    )
    if use.paused_until_ms:
        line = f"claims paused until {_when(use.paused_until_ms)}"
        click.echo(terminal_safe(line + (f": {use.reason}" if use.reason else "")))
    else:
        click.echo("claims not paused")
    for unit, value in use.units.items():
        limit = "no limit" if value.limit == 0 else f"of {value.limit}"
        click.echo(f"{unit}: {value.used} {limit}")


def _limits(pairs: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for pair in pairs:
        unit, sep, value = pair.partition("=")
        if not sep or not value.isdigit():
            raise BadInput(f"--limit must be UNIT=N (e.g. input_tokens=200000), not {pair!r}")
        out[unit] = int(value)
    if not out:
        raise BadInput("give at least one --limit UNIT=N")
    return out


@click.group("provider-quota")
def provider_quota() -> None:
    """Provider quotas shared by every queue that names them (requests, tokens per period)."""


@provider_quota.command("configure")
@click.argument("name")
@click.option("--limit", "limits", multiple=True, metavar="UNIT=N", help="Units per period.")
@click.option(
    "--period",
    type=FiniteFloat(min=0, min_open=True, max=3_153_600_000),
    default=60.0,
    show_default=True,
    help="The window, in seconds.",
)
@click.option("--max-concurrency", type=int, default=None, help="Most runs at once.")
@redis_option
def configure(
    *,
    name: str,
    limits: tuple[str, ...],
    period: float,
    max_concurrency: int | None,
    redis_url: str,
) -> None:
    """Set NAME's limits (--limit requests=500 --limit input_tokens=200000)."""
    checked = _limits(limits)
    with _quota(name, redis_url) as quota:
        _show(quota.configure(checked, period_s=period, max_concurrency=max_concurrency), False)


@provider_quota.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
@redis_option
def show(*, name: str, as_json: bool, redis_url: str) -> None:
    """Show NAME's limits, this window's use, reservations and pause."""
    with _quota(name, redis_url) as quota:
        use = quota.get()
    if use is None:
        raise BadInput(f"no provider quota {name!r}: configure it first")
    _show(use, as_json)


@provider_quota.command("pause")
@click.argument("name")
@click.option(
    "--for",
    "seconds",
    type=FiniteFloat(min=0, min_open=True, max=3_153_600_000),
    required=True,
    help="Seconds, above 0.",
)
@click.option("--reason", default="", help="Why, shown with the pause.")
@redis_option
def pause(*, name: str, seconds: float, reason: str, redis_url: str) -> None:
    """Stop every claim of a task naming NAME, in every queue, for a while."""
    with _quota(name, redis_url) as quota:
        use = quota.pause(seconds, reason)
    click.echo(f"quota {use.name}: claims paused until {_when(use.paused_until_ms)}")


@provider_quota.command("resume")
@click.argument("name")
@redis_option
def resume(*, name: str, redis_url: str) -> None:
    """End NAME's pause now."""
    with _quota(name, redis_url) as quota:
        quota.resume()
    click.echo(f"quota {name}: claims resumed")
