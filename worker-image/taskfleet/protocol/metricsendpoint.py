"""A Prometheus endpoint served from a daemon thread that sleeps until it is scraped.

prometheus-client's ``start_http_server`` runs ``serve_forever()`` at its default poll
interval, half a second: its thread wakes twice a second for the life of the process,
scraped or not. On a virtual machine's core a wake-up costs 0.1-0.2 ms, so an idle
operator replica or worker spent a measurable share of its rest on that poll alone
(bench/journal/2026-11-30-idle-wakeups.md). This is the same server (prometheus-client's
public ``make_wsgi_app`` on the standard library's threading WSGI server, a thread per
request, no request log) with a poll of ``POLL_S``: a scrape is answered at once whatever
the poll, which only bounds how long ``shutdown()`` takes. Nothing in taskfleet calls it:
the thread is a daemon and goes with its process.

Needs prometheus-client (the ``metrics`` extra of the worker; always installed with the
operator); imported only when an endpoint starts.
"""

from __future__ import annotations

import socket
import threading
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

__all__ = ["POLL_S", "serve"]

#: How often the serving thread wakes when nobody scrapes it (it checks for a shutdown).
POLL_S = 3600.0


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress never holds the process at exit


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line per scrape on stderr."""


def serve(port: int, addr: str, registry: Collector) -> WSGIServer:
    """Serve ``registry`` on ``addr``:``port`` (IPv4 or IPv6, as ``addr`` resolves) from a
    daemon thread; returns the server. An ``OSError`` when the port can't be bound."""
    from prometheus_client import make_wsgi_app

    family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(_Server):
        address_family = family

    server = make_server(addr, port, make_wsgi_app(registry), Server, handler_class=_Quiet)
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": POLL_S},
        name=f"metrics-endpoint:{server.server_address[1]}",
        daemon=True,
    )
    thread.start()
    return server
