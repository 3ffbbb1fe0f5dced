"""The Prometheus endpoint the worker and the operator serve
(``taskfleet.protocol.metricsendpoint``): answered at once, and its thread asleep between
scrapes (prometheus-client's own server wakes twice a second for the life of the process)."""

from __future__ import annotations

import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter
from taskfleet.protocol import metricsendpoint

from tests.fixtures_redis import free_port


def switches(thread: threading.Thread) -> int:
    """The thread's context switches so far, voluntary and not (the kernel's count)."""
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    return sum(
        int(value)
        for name, _, value in (line.partition(":") for line in status.splitlines())
        if name.endswith("ctxt_switches")
    )


def test_the_endpoint_answers_a_scrape_and_its_thread_sleeps_between_scrapes() -> None:
    registry = CollectorRegistry()
    Counter("probe_total", "What the test counts.", registry=registry).inc(3)
    port = free_port()
    server = metricsendpoint.serve(port, "127.0.0.1", registry)
    try:
        (thread,) = [t for t in threading.enumerate() if t.name == f"metrics-endpoint:{port}"]
        assert thread.daemon
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            assert reply.status == 200
            assert "probe_total 3.0" in reply.read().decode()
        before = switches(thread)
        # A second and a half unscraped: the thread never ran (a 0.5 s poll runs it 3 times).
        time.sleep(1.5)
        assert switches(thread) == before
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            assert "probe_total 3.0" in reply.read().decode()
        assert switches(thread) > before, "a scrape wakes it"
    finally:
        server.server_close()
