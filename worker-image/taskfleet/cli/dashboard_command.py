"""``taskfleet dashboard``: serve the web dashboard (docs/dashboard.md).

The dashboard's package and its web stack (the ``dashboard`` extra) load inside the
command, so ``taskfleet --help`` and the worker's start never import them.
"""

from __future__ import annotations

import click

from taskfleet.cli.options import BadInput, FiniteFloat, redis_option
from taskfleet.protocol.keys import validate_queue_name


def _queue_names(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    for name in value:
        try:
            validate_queue_name(name)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return value


@click.command()
@redis_option
@click.option(
    "--queue",
    "queues",
    multiple=True,
    callback=_queue_names,
    help="A queue to show (repeat for more); default: every queue found in this Redis.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; 0.0.0.0 in a pod, reached through its Service.",
)
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@click.option(
    "--refresh",
    type=FiniteFloat(0.5, 3600),
    default=2.0,
    show_default=True,
    help="Seconds between two live refreshes of an open page.",
)
def dashboard(
    redis_url: str, queues: tuple[str, ...], host: str, port: int, refresh: float
) -> None:
    """Serve a read-only web dashboard of the queues: depths, rates, tasks by state,
    a task's payload and error, workers. Listens on 127.0.0.1 unless told otherwise."""
    try:
        from taskfleet.dashboard.app import serve
        from taskfleet.dashboard.settings import DashboardSettings
    except ImportError as exc:
        raise BadInput(
            f"the dashboard needs the 'dashboard' extra ({exc.name or exc} is missing): "
            "pip install 'taskfleet[dashboard]'"
        ) from None
    settings = DashboardSettings(redis_url=redis_url, queues=queues, refresh_s=refresh)
    click.echo(f"taskfleet dashboard on http://{host}:{port}/ (read-only)", err=True)
    serve(settings, host, port)
