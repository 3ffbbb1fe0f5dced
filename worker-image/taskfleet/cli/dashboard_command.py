"""``taskfleet dashboard``: serve the web dashboard (docs/dashboard.md).

The dashboard's package and its web stack (the ``dashboard`` extra) load inside the
command, so ``taskfleet --help`` and the worker's start never import them.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from taskfleet.cli.logs import configure_logging
from taskfleet.cli.options import BadInput, FiniteFloat, IntRange, redis_option
from taskfleet.protocol.keys import validate_queue_name, validate_quota_name

#: Where ``--actions`` finds its token without ``--token-file``.
TOKEN_ENV = "TASKFLEET_DASHBOARD_TOKEN"
#: More names the dashboard answers for, comma-separated (as --allowed-host).
ALLOWED_HOSTS_ENV = "TASKFLEET_DASHBOARD_ALLOWED_HOSTS"
#: As ``dashboard.settings.MIN_TOKEN_CHARS`` (that module loads with the web stack only).
MIN_TOKEN_CHARS = 16


def _queue_names(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    for name in value:
        try:
            validate_queue_name(name)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return value


def _quota_names(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    for name in value:
        try:
            validate_quota_name(name)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return value


def _host_names(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    from_env = [n for n in os.environ.get(ALLOWED_HOSTS_ENV, "").split(",") if n.strip()]
    names = []
    for raw in (*from_env, *value):
        name = raw.strip().lower().removeprefix("[").removesuffix("]")
        if not name or (any(c in name for c in "/ @,:") and not _ipv6(name)):
            raise click.BadParameter(
                f"{raw!r} is not a host name (a name or address, without port or scheme)",
                ctx,
                param,
            )
        names.append(name)
    return tuple(names)


def _ipv6(name: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(name).version == 6
    except ValueError:
        return False


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
    "--provider-quota",
    "quotas",
    multiple=True,
    callback=_quota_names,
    help="A provider quota to show (repeat for more); without --queue, every quota found "
    "in this Redis is shown too.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; 0.0.0.0 in a pod, reached through its Service.",
)
@click.option("--port", type=IntRange(1, 65535), default=8080, show_default=True)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    callback=_host_names,
    help="Another name the dashboard answers for in the Host header (repeat for more; "
    "'*.example.com' for its subdomains). Default: localhost, 127.0.0.1, [::1] and the "
    f"--host address; also from {ALLOWED_HOSTS_ENV} (comma-separated).",
)
@click.option(
    "--refresh",
    type=FiniteFloat(0.5, 3600),
    default=2.0,
    show_default=True,
    help="Seconds between two live refreshes of an open page.",
)
@click.option(
    "--actions",
    "with_actions",
    is_flag=True,
    help="Enable retry, cancel and purge for whoever logs in with the token "
    "(TASKFLEET_DASHBOARD_TOKEN or --token-file). Without it: read-only.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A file holding the actions token (a mounted Secret); overrides "
    "TASKFLEET_DASHBOARD_TOKEN.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="The dashboard's log lines (every action is one): key=value or JSON.",
)
def dashboard(  # noqa: PLR0917 (click passes every option)
    redis_url: str,
    queues: tuple[str, ...],
    quotas: tuple[str, ...],
    host: str,
    port: int,
    allowed_hosts: tuple[str, ...],
    refresh: float,
    with_actions: bool,
    token_file: Path | None,
    log_format: str,
) -> None:
    """Serve a web dashboard of the queues: depths, rates, tasks by state, a task's
    payload and error, workers. Read-only unless started with --actions (and a token).
    Listens on 127.0.0.1 unless told otherwise."""
    try:
        from taskfleet.dashboard.app import serve
        from taskfleet.dashboard.settings import (
            LOOPBACK_HOSTS,
            DashboardSettings,
            with_bind_address,
        )
    except ImportError as exc:
        raise BadInput(
            f"the dashboard needs the 'dashboard' extra ({exc.name or exc} is missing): "
            "pip install 'taskfleet[dashboard]'"
        ) from None
    token = _token(token_file) if with_actions else None
    settings = DashboardSettings(
        redis_url=redis_url,
        queues=queues,
        quotas=quotas,
        refresh_s=refresh,
        read_only=not with_actions,
        token=token,
        allowed_hosts=with_bind_address((*LOOPBACK_HOSTS, *allowed_hosts), host),
    )
    configure_logging(log_format, "info")
    mode = "actions for whoever logs in with the token" if with_actions else "read-only"
    click.echo(f"taskfleet dashboard on http://{host}:{port}/ ({mode})", err=True)
    serve(settings, host, port)


def _token(token_file: Path | None) -> str:
    """The actions token: the file's content (one trailing newline dropped), else the
    environment's; one clear error (exit 2) when neither holds one long enough."""
    if token_file is not None:
        try:
            token = token_file.read_text().removesuffix("\n").removesuffix("\r")
        except OSError as exc:
            raise BadInput(f"cannot read --token-file {token_file}: {exc.strerror}") from None
        where = f"--token-file {token_file}"
    else:
        token = os.environ.get(TOKEN_ENV, "")
        where = TOKEN_ENV
    if not token:
        raise BadInput(
            f"--actions needs a token: set {TOKEN_ENV} or pass --token-file "
            "(a mounted Secret); without --actions the dashboard is read-only"
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise BadInput(f"the token in {where} is shorter than {MIN_TOKEN_CHARS} characters")
    return token
