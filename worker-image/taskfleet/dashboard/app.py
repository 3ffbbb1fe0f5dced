"""The dashboard's routes: pages rendered on the server from the reads, a fragment of the
same page for the live refresh, security headers on every response. ``serve`` runs it.

Each page is ``<page>.html`` (the frame) around ``<page>_live.html`` (what refreshes);
a request with the ``X-Live`` header gets the fragment alone, and ``static/live.js``
swaps it in. Handlers are plain functions (Starlette runs them on its thread pool) over
one client from ``protocol.connect`` (a server's or a cluster's): its connection pool
is thread-safe.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import redis
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

from taskfleet.dashboard import (
    acting,
    actions,
    alarms,
    auth,
    charts,
    display,
    output,
    providers,
    reads,
    triage,
)
from taskfleet.dashboard.sampler import Sampler, rates
from taskfleet.dashboard.settings import DashboardSettings, allows
from taskfleet.producer import flowtree, overview
from taskfleet.producer.queue import Queue
from taskfleet.protocol import flows as flow_reads
from taskfleet.protocol.calls import run
from taskfleet.protocol.connect import SyncClient, connect
from taskfleet.protocol.groups import MERGED_MAX, group_problem
from taskfleet.protocol.holdbacks import DEAD_COUNTER
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.redisurl import redact_redis_url, scrub

log = logging.getLogger("taskfleet.dashboard")

HERE = Path(__file__).parent

#: Every response: scripts and styles from this origin only (none inline), no framing,
#: no sniffing, no referrer to elsewhere; forms (the actions, later) post here only.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}

LIVE_HEADER = "x-live"
#: Schedules a queue's page lists (by name).
SCHEDULES_SHOWN = 500


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = display.age
    env.filters["duration"] = display.duration
    env.filters["short"] = display.short_id
    env.globals["ago"] = display.ago
    env.globals["ago_s"] = display.ago_s
    env.globals["epoch"] = display.epoch
    env.globals["limit_value"] = display.limit_value
    env.globals["limit_name"] = display.limit_name
    env.filters["pretty"] = display.pretty
    env.filters["capped"] = display.capped
    env.filters["chunk_text"] = output.chunk_text
    env.filters["one_line"] = display.one_line
    env.filters["url"] = display.url_part
    env.filters["level"] = display.level
    env.tests["older"] = display.older
    env.globals["when"] = display.when
    env.globals["progress_message"] = display.progress_message
    env.globals["fraction"] = display.fraction
    env.globals["older_note"] = display.older_note
    env.globals["states"] = reads.STATES
    env.globals["merged_max"] = MERGED_MAX
    env.globals["oldest_ready_s"] = alarms.OLDEST_READY_S
    return env


class Dashboard:
    """The app's state: settings, the Redis client, the sampler, the templates."""

    def __init__(self, settings: DashboardSettings, client: SyncClient | None = None) -> None:
        self.settings = settings
        self.client: SyncClient = client or connect(
            settings.redis_url, socket_timeout=5, socket_connect_timeout=5
        )
        self.sessions = auth.Sessions()
        self._queues: dict[str, Queue] = {}
        self.sampler = Sampler(
            self.client,
            settings.queues,
            sample_s=settings.sample_s,
            history_s=settings.history_s,
            discover_s=settings.discover_s,
            keep_s=alarms.DEAD_WINDOW_S,
            quotas=settings.quotas,
        )
        self.templates = _environment()
        self.streams = output.Streams(settings.max_streams)
        self.redis_shown = redact_redis_url(settings.redis_url)

    # -- helpers ------------------------------------------------------------------------

    def keys(self, name: str) -> QueueKeys:
        """The queue's keys; 404 for a name no queue can have or one outside ``--queue``."""
        try:
            keys = QueueKeys(name)
        except ValueError:
            raise HTTPException(404, "no such queue") from None
        if self.settings.queues and name not in self.settings.queues:
            raise HTTPException(404, "this dashboard shows other queues")
        return keys

    def queue_of(self, keys: QueueKeys) -> Queue:
        """The queue's ``Queue`` on the dashboard's client: what every action calls."""
        found = self._queues.get(keys.queue)
        if found is None:
            found = self._queues.setdefault(keys.queue, Queue(keys.queue, client=self.client))
        return found

    def page(
        self, request: Request, name: str, status: int = 200, *, live: bool = True, **context: Any
    ) -> Response:
        """``name``.html, or its live fragment for a refresh; ``live=False``: a page that is
        not refreshed (a form's answer: its URL takes POST only)."""
        fragment = live and request.headers.get(LIVE_HEADER) == "1"
        template = self.templates.get_template(f"{name}_live.html" if fragment else f"{name}.html")
        session = None if self.settings.read_only else auth.of(request, self.sessions)
        body = template.render(
            redis_url=self.redis_shown,
            refresh_ms=int(self.settings.refresh_s * 1000) if live else 0,
            read_only=self.settings.read_only,
            session=session,
            csrf=session.csrf if session else "",
            applies=actions.APPLIES,
            path=request.url.path,
            **context,
        )
        return HTMLResponse(body, status_code=status)

    def alarms_of(self, view: overview.QueueView) -> list[alarms.Alarm]:
        """The health alarms that hold for ``view`` (``alarms``), the dead count's rise
        from the sampler's samples."""
        samples = [
            (s.at_ms, s.counters.get(DEAD_COUNTER, 0)) for s in self.sampler.samples(view.name)
        ]
        return alarms.alarms(view, alarms.dead_rise(samples, view.at_ms))

    def chart(self, queue: str) -> Any:
        """The queue's own per-minute counts over the last hour; for a queue whose workers
        write none (older ones), the samples since the dashboard started."""
        history = self.sampler.history(queue)
        if history is not None and not history.empty:
            series = charts.minute_series(history.minutes, history.at_ms)
            return charts.rate_chart(series, charts.HOUR_MS)
        span = int(self.settings.history_s * 1000)
        return charts.rate_chart(rates(self.sampler.samples(queue)), span)

    # -- pages --------------------------------------------------------------------------

    def queues(self, request: Request) -> Response:
        names = self.sampler.queues()
        views = [overview.read(self.client, name, groups=False) for name in names]
        paused = {q.name for q in self._quotas() if q.paused}
        rows = [
            (
                v,
                self.chart(v.name),
                self._rates(v.name),
                self.alarms_of(v),
                providers.waiting_on(self.client, v.name, paused) if v.counts["delayed"] else [],
            )
            for v in views
        ]
        return self.page(request, "queues", rows=rows, discovered=self.sampler.discovered())

    def _quotas(self) -> list[providers.QuotaView]:
        return providers.read_quotas(self.client, self.sampler.quotas())

    def quotas(self, request: Request) -> Response:
        found = self._quotas()
        return self.page(
            request,
            "quotas",
            quotas=found,
            total=len(self.sampler.quotas()),
            shown_max=providers.QUOTAS_SHOWN,
            discovered=self.sampler.discovered(),
        )

    def _rates(self, queue: str) -> dict[str, float | None]:
        series = rates(self.sampler.samples(queue))
        return {name: (values[-1][1] if values else None) for name, values in series.items()}

    def queue(self, request: Request) -> Response:
        name = request.path_params["queue"]
        keys = self.keys(name)
        view = overview.read(self.client, keys.queue)
        return self.page(
            request,
            "queue",
            view=view,
            alarms=self.alarms_of(view),
            chart=self.chart(name),
            rates=self._rates(name),
            now_ms=view.at_ms,
        )

    def tasks(self, request: Request) -> Response:
        name = request.path_params["queue"]
        state = request.path_params["state"]
        keys = self.keys(name)
        if state not in reads.STATES:
            raise HTTPException(404, "no such state")
        size = self.settings.page_size
        number = _page_number(request.query_params.get("page", "1"))
        group = request.query_params.get("group") or None
        if group is not None:
            problem = group_problem(group)
            if problem or state != "pending":
                raise HTTPException(400, problem or "only pending is listed by group")
        wanted = triage.Filter(
            reason=request.query_params.get("reason", "").strip()[:200],
            group=request.query_params.get("in_group", "").strip()[:100],
            error=request.query_params.get("error", "").strip()[:200],
            name=request.query_params.get("name", "").strip()[:200],
        )
        finished = state in ("done", "dead", "cancelled")
        matches = None
        if finished and wanted.active:
            matches = triage.matching(self.client, QueueReads(keys), state, wanted)
            shown = matches.rows[(number - 1) * size : number * size]
            found = reads.TaskPage(state, len(matches.rows), (number - 1) * size, shown)
        elif state in reads.LIVE_STATES:
            found = reads.live_page(self.client, QueueReads(keys), state, (number - 1) * size, size)
        else:
            found = reads.state_page(
                self.client, QueueReads(keys), state, (number - 1) * size, size, group=group
            )
        errors = None
        if state == "dead" and number == 1:
            errors = triage.by_error(self.client, QueueReads(keys), state)
        filters = {
            "reason": wanted.reason,
            "in_group": wanted.group,
            "error": wanted.error,
            "name": wanted.name,
        }
        if group is not None:
            filters["group"] = group
        last = max(1, -(-found.total // size))
        return self.page(
            request,
            "tasks",
            queue=name,
            found=found,
            number=number,
            last=last,
            wanted=wanted,
            matches=matches,
            errors=errors,
            extra_qs=urlencode({k: v for k, v in filters.items() if v}),
            finished=finished,
            now_ms=run(self.client, QueueReads(keys).clock()),
        )

    def search(self, request: Request) -> Response:
        name = request.path_params["queue"]
        keys = self.keys(name)
        task_id = request.query_params.get("id", "").strip()
        if task_id and reads.task(self.client, QueueReads(keys), task_id) is not None:
            target = f"/queues/{display.url_part(name)}/tasks/id/{display.url_part(task_id)}"
            return RedirectResponse(target, status_code=303)
        return self.page(request, "notfound", 404, queue=name, task_id=task_id)

    def task(self, request: Request) -> Response:
        name = request.path_params["queue"]
        keys = self.keys(name)
        task_id = request.path_params["task_id"]
        found = reads.task(self.client, QueueReads(keys), task_id) if task_id else None
        if found is None:
            return self.page(request, "notfound", 404, queue=name, task_id=task_id)
        shown = None
        if found.finished:
            shown = output.read_output(self.client, keys, found.id)
        return self.page(
            request,
            "task",
            queue=name,
            task=found,
            output=shown,
            shown_chunks=output.SHOWN_CHUNKS,
            flow=flowtree.flow_tree(self.client, QueueReads(keys), found.id),
            tree_limit=flowtree.TREE_LIMIT,
            now_ms=run(self.client, QueueReads(keys).clock()),
        )

    async def output_stream(self, request: Request) -> Response:
        """The task's output as server-sent events (``output``): live while it runs."""
        name = request.path_params["queue"]
        keys = self.keys(name)
        task_id = request.path_params["task_id"]
        since = output.resume_point(
            request.headers.get("last-event-id"), request.query_params.get("since")
        )
        if not task_id or since is None:
            raise HTTPException(400, "since (or Last-Event-ID) must be an output entry's id")
        if not self.streams.take():
            return PlainTextResponse(
                f"at most {self.streams.limit} live outputs are open at once: try again later",
                status_code=503,
            )
        return output.Released(
            self.streams, self.streams.events(self.queue_of(keys), task_id, since)
        )

    def schedules(self, request: Request) -> Response:
        name = request.path_params["queue"]
        keys = self.keys(name)
        qr = QueueReads(keys)
        names = run(self.client, qr.schedule_names())
        shown = names[:SCHEDULES_SHOWN]
        found = run(self.client, qr.schedules(shown)) if shown else []
        return self.page(
            request,
            "schedules",
            queue=name,
            schedules=found,
            total=len(names),
            now_ms=run(self.client, qr.clock()),
        )

    def flows(self, request: Request) -> Response:
        name = request.path_params["queue"]
        keys = self.keys(name)
        size = self.settings.page_size
        number = _page_number(request.query_params.get("page", "1"))
        total, ids = run(self.client, flow_reads.flow_ids(keys, (number - 1) * size, size))
        records = run(self.client, flow_reads.flow_records(keys, ids)) if ids else []
        return self.page(
            request,
            "flows",
            queue=name,
            flows=list(zip(ids, records, strict=True)),
            total=total,
            number=number,
            last=max(1, -(-total // size)),
            now_ms=run(self.client, QueueReads(keys).clock()),
        )

    def workers(self, request: Request) -> Response:
        name = request.path_params.get("queue")
        names = [self.keys(name).queue] if name else self.sampler.queues()
        groups = []
        for queue in names:
            view = overview.read(self.client, queue, groups=False)
            groups.append((view, reads.held_tasks(self.client, QueueReads(QueueKeys(queue)), view)))
        return self.page(request, "workers", groups=groups, queue=name)


def _page_number(raw: str) -> int:
    try:
        number = int(raw)
    except ValueError:
        raise HTTPException(400, "page must be a whole number") from None
    if not 1 <= number <= 10**9:
        raise HTTPException(400, "page must be within 1..1e9")
    return number


#: Answered whatever the Host: it shows nothing (the kubelet's probes send the pod's IP).
UNCHECKED_PATHS = ("/healthz",)


class SecurityHeaders:
    """ASGI middleware: ``SECURITY_HEADERS`` on every response, and no caching of pages
    (they show live state); static files may be cached. A request whose Host header is
    not allowed (`settings.allows`) gets 421 and nothing else: reads need no login, so a
    page that rebinds its own name to this address must not read payloads through it."""

    def __init__(self, app: Starlette, allowed_hosts: tuple[str, ...]) -> None:
        self.app = app
        self.state = app.state
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] not in UNCHECKED_PATHS:
            host = ""
            for name, value in scope["headers"]:
                if name == b"host":
                    host = value.decode("latin-1")
            if not allows(self.allowed_hosts, host):
                await self._refuse(host, send)
                return
        static = scope["path"].startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                if not static:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _refuse(self, host: str, send: Send) -> None:
        shown = host[:100].encode("ascii", "backslashreplace").decode("ascii")
        log.warning("refused a request for Host %r (not an allowed host)", shown)
        body = (
            f"421 Misdirected Request: this dashboard does not answer for Host {shown!r}. "
            "It answers for localhost, 127.0.0.1, [::1] and its listen address; add a name "
            "with --allowed-host NAME (TASKFLEET_DASHBOARD_ALLOWED_HOSTS) to reach it by "
            "that name (docs/dashboard.md, DNS rebinding).\n"
        ).encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
            *((k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()),
        ]
        await send({"type": "http.response.start", "status": 421, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def create_app(settings: DashboardSettings, *, client: SyncClient | None = None) -> SecurityHeaders:
    """The ASGI app; its sampler runs while the app does (Starlette's lifespan)."""
    dash = Dashboard(settings, client)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        dash.sampler.start()
        try:
            yield
        finally:
            dash.sampler.stop()
            dash.streams.close()

    def redis_failed(request: Request, exc: Exception) -> Response:
        message = scrub(str(exc), settings.redis_url)
        log.warning("redis error on %s: %s", request.url.path, message)
        return dash.page(request, "error", 503, title="Redis unavailable", message=message)

    def http_failed(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        title = "Not found" if exc.status_code == 404 else "Cannot show this page"
        return dash.page(request, "error", exc.status_code, title=title, message=exc.detail)

    def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    get = ["GET"]
    routes = [
        Route("/", dash.queues, methods=get),
        Route("/healthz", health, methods=get),
        Route("/workers", dash.workers, methods=get),
        Route("/quotas", dash.quotas, methods=get),
        Route("/quotas", partial(acting.quota_act, dash), methods=["POST"]),
        Route("/queues/{queue}", dash.queue, methods=get),
        Route("/queues/{queue}/workers", dash.workers, methods=get),
        Route("/queues/{queue}/search", dash.search, methods=get),
        Route("/queues/{queue}/schedules", dash.schedules, methods=get),
        Route("/queues/{queue}/schedules", partial(acting.schedule_act, dash), methods=["POST"]),
        Route("/queues/{queue}/flows", dash.flows, methods=get),
        Route("/queues/{queue}/tasks/id/{task_id:path}", dash.task, methods=get),
        Route("/queues/{queue}/output/{task_id:path}", dash.output_stream, methods=get),
        Route("/queues/{queue}/tasks/{state}", dash.tasks, methods=get),
        Route("/login", partial(acting.login_page, dash), methods=get),
        Route("/login", partial(acting.login, dash), methods=["POST"]),
        Route("/logout", partial(acting.logout, dash), methods=["POST"]),
        Route("/queues/{queue}/actions", partial(acting.act, dash), methods=["POST"]),
        Route("/queues/{queue}/claims", partial(acting.claims, dash), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={redis.RedisError: redis_failed, HTTPException: http_failed},
    )
    app.state.dashboard = dash
    return SecurityHeaders(app, settings.allowed_hosts)


def serve(settings: DashboardSettings, host: str, port: int) -> None:
    """Run the app with uvicorn until SIGINT or SIGTERM."""
    import uvicorn

    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level="info",
        access_log=False,
        server_header=False,
        proxy_headers=False,
        # a live output's connection ends with its task: a stop does not wait for that
        timeout_graceful_shutdown=3,
    )
    uvicorn.Server(config).run()
