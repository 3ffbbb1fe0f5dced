"""The routes that change something: log in and out, and the actions (``actions``).

Every POST passes the same gate (``_gate``): the dashboard runs with actions, the
request comes from one of its own pages (``auth.same_origin``), and, past the login, it
carries a live session's cookie and that session's CSRF token. A refusal is a 403 page
and a log line; the token is never logged, nor the CSRF token, nor the cookie.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from taskfleet.dashboard import actions, auth, display
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import run
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.reads import QueueReads

log = logging.getLogger("taskfleet.dashboard")

#: The largest form read (1000 ids of up to 200 characters, and the rest).
MAX_FORM_BYTES = 256 * 1024


class Board(Protocol):
    """What these routes need of the dashboard (``app.Dashboard``), declared here so the
    app imports its routes and not the other way round."""

    settings: DashboardSettings
    sessions: auth.Sessions
    client: SyncClient

    def keys(self, name: str) -> QueueKeys: ...

    def queue_of(self, keys: QueueKeys) -> Queue: ...

    def page(
        self, request: Request, name: str, status: int = 200, *, live: bool = True, **context: Any
    ) -> Response: ...


class Form:
    """A posted urlencoded form: one value per name, or every value of a name."""

    def __init__(self, values: dict[str, list[str]]) -> None:
        self._values = values

    def get(self, name: str, default: str = "") -> str:
        found = self._values.get(name)
        return found[0] if found else default

    def all(self, name: str) -> list[str]:
        return self._values.get(name, [])

    def first(self) -> dict[str, str]:
        return {name: values[0] for name, values in self._values.items() if values}


async def _form(request: Request) -> Form:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, "the form is too large")
    try:
        return Form(parse_qs(body.decode(), keep_blank_values=True, max_num_fields=2000))
    except (UnicodeDecodeError, ValueError):
        raise HTTPException(400, "not a form") from None


def _client(request: Request) -> str:
    return request.client.host if request.client else "-"


def _refuse(dash: Board, request: Request, why: str) -> Response:
    log.warning(
        "dashboard_refused",
        extra={"fields": {"client": _client(request), "path": request.url.path, "why": why}},
    )
    return dash.page(request, "error", 403, live=False, title="Refused", message=why)


def _gate(dash: Board, request: Request) -> str | None:
    """Why this POST is refused before its session is looked at, or None."""
    if dash.settings.read_only:
        return "this dashboard is read-only (start it with --actions and a token to act)"
    if not auth.same_origin(request):
        return "a request from another site"
    return None


def _local(target: str) -> str:
    """Where to go after the login: a path of this dashboard, never another site."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


def login_page(dash: Board, request: Request) -> Response:
    if dash.settings.read_only:
        raise HTTPException(404, "this dashboard is read-only: there is nothing to log in to")
    after = _local(request.query_params.get("next", "/"))
    return dash.page(request, "login", live=False, after=after, wrong=False)


async def login(dash: Board, request: Request) -> Response:
    refused = _gate(dash, request)
    if refused:
        return _refuse(dash, request, refused)
    form = await _form(request)
    after = _local(form.get("next", "/"))
    assert dash.settings.token is not None  # not read-only: the settings insist on one
    if not auth.token_matches(dash.settings.token, form.get("token")):
        log.warning(
            "dashboard_login", extra={"fields": {"client": _client(request), "result": "refused"}}
        )
        return dash.page(request, "login", 403, live=False, after=after, wrong=True)
    session = dash.sessions.open()
    log.info("dashboard_login", extra={"fields": {"client": _client(request), "result": "ok"}})
    response = RedirectResponse(after, status_code=303)
    response.set_cookie(
        auth.COOKIE,
        session.id,
        max_age=auth.SESSION_S,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(dash: Board, request: Request) -> Response:
    refused = _gate(dash, request)
    if refused:
        return _refuse(dash, request, refused)
    form = await _form(request)
    session = auth.of(request, dash.sessions)
    if session is None or not auth.csrf_matches(session, form.get("csrf")):
        return _refuse(dash, request, "not logged in, or a form from elsewhere")
    dash.sessions.close(session.id)
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(auth.COOKIE, path="/")
    return response


async def act(dash: Board, request: Request) -> Response:
    """An action's form: without ``confirm=1`` the confirmation page, with it the deed."""
    refused = _gate(dash, request)
    if refused:
        return _refuse(dash, request, refused)
    form = await _form(request)
    session = auth.of(request, dash.sessions)
    if session is None:
        return _refuse(dash, request, "log in first: actions need the dashboard's token")
    if not auth.csrf_matches(session, form.get("csrf") or None):
        return _refuse(dash, request, "the form's CSRF token is missing or not this session's")
    name = request.path_params["queue"]
    keys = dash.keys(name)
    try:
        action = actions.parse(form.first(), form.all("id"))
    except actions.BadActionError as exc:
        raise HTTPException(400, str(exc)) from None
    back = form.get("back") or f"/queues/{display.url_part(name)}/tasks/{action.state}"
    context = {"queue": name, "action": action, "back": _local(back)}
    if form.get("confirm") != "1":
        count = QueueReads(keys).size(action.state)
        size = await run_in_threadpool(run, dash.client, count) if action.every else None
        return dash.page(request, "confirm", live=False, size=size, **context)
    result = await run_in_threadpool(actions.run, dash.queue_of(keys), action)
    actions.record(_client(request), name, action, result)
    return dash.page(request, "result", live=False, result=result, **context)


async def claims(dash: Board, request: Request) -> Response:
    """Pause or resume claims (the queue's, or a group's): behind the same gate, login and
    CSRF token as every action; answered by a redirect to the page it came from."""
    refused = _gate(dash, request)
    if refused:
        return _refuse(dash, request, refused)
    form = await _form(request)
    session = auth.of(request, dash.sessions)
    if session is None:
        return _refuse(dash, request, "log in first: actions need the dashboard's token")
    if not auth.csrf_matches(session, form.get("csrf") or None):
        return _refuse(dash, request, "the form's CSRF token is missing or not this session's")
    name = request.path_params["queue"]
    keys = dash.keys(name)
    try:
        action = actions.parse_claims(form.first())
    except actions.BadActionError as exc:
        raise HTTPException(400, str(exc)) from None
    outcome = await run_in_threadpool(actions.run_claims, dash.queue_of(keys), action)
    actions.record_claims(_client(request), name, action, outcome)
    back = _local(form.get("back") or f"/queues/{display.url_part(name)}")
    return RedirectResponse(back, status_code=303)


async def schedule_act(dash: Board, request: Request) -> Response:
    """Pause, resume or run now a schedule: the same gate, login and CSRF token as every
    action; one log line; back to the schedules page."""
    refused = _gate(dash, request)
    if refused:
        return _refuse(dash, request, refused)
    form = await _form(request)
    session = auth.of(request, dash.sessions)
    if session is None:
        return _refuse(dash, request, "log in first: actions need the dashboard's token")
    if not auth.csrf_matches(session, form.get("csrf") or None):
        return _refuse(dash, request, "the form's CSRF token is missing or not this session's")
    name = request.path_params["queue"]
    keys = dash.keys(name)
    try:
        action = actions.parse_schedule(form.first())
        outcome = await run_in_threadpool(actions.run_schedule, dash.queue_of(keys), action)
    except actions.BadActionError as exc:
        raise HTTPException(400, str(exc)) from None
    actions.record_schedule(_client(request), name, action, outcome)
    return RedirectResponse(f"/queues/{display.url_part(name)}/schedules", status_code=303)


async def quota_act(dash: Board, request: Request) -> Response:
    """Pause or resume a provider quota: the same gate, login and CSRF token as every
    action; one log line; back to the quotas page."""
    refused = _gate(dash, request)
    if refused:
        return _refuse(dash, request, refused)
    form = await _form(request)
    session = auth.of(request, dash.sessions)
    if session is None:
        return _refuse(dash, request, "log in first: actions need the dashboard's token")
    if not auth.csrf_matches(session, form.get("csrf") or None):
        return _refuse(dash, request, "the form's CSRF token is missing or not this session's")
    try:
        action = actions.parse_quota(form.first())
        outcome = await run_in_threadpool(actions.run_quota, dash.client, action)
    except actions.BadActionError as exc:
        raise HTTPException(400, str(exc)) from None
    actions.record_quota(_client(request), action, outcome)
    return RedirectResponse("/quotas", status_code=303)
