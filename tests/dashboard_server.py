"""The dashboard served for real (uvicorn on a free port, in a thread of the test) and a
plain HTTP client for it: what a browser sends, nothing in between."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlencode

import uvicorn
from taskfleet.dashboard.app import create_app
from taskfleet.dashboard.settings import DashboardSettings

from tests.fixtures_redis import free_port
from tests.polling import wait_for


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: str


class Served:
    def __init__(self, port: int) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"

    def request(self, method: str, path: str, headers: dict[str, str] | None = None) -> Reply:
        """One request; redirects are returned, not followed."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, headers=headers or {})
            response = conn.getresponse()
            body = response.read().decode()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, body)
        finally:
            conn.close()

    def get(self, path: str, headers: dict[str, str] | None = None) -> Reply:
        return self.request("GET", path, headers)

    def post(
        self, path: str, form: list[tuple[str, str]], headers: dict[str, str] | None = None
    ) -> Reply:
        """A form posted as a browser posts it (urlencoded); redirects are returned."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        sent = {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
        try:
            conn.request("POST", path, body=urlencode(form), headers=sent)
            response = conn.getresponse()
            body = response.read().decode()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, body)
        finally:
            conn.close()


@contextmanager
def serve(settings: DashboardSettings) -> Iterator[Served]:
    port = free_port()
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=10, what="the dashboard to listen")
    try:
        yield Served(port)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
