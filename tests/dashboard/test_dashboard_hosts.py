"""The dashboard answers only for the names it is reached by: a request whose Host header
names another site (a DNS-rebinding page in a browser on the same machine) gets 421 and
no data. Served for real and asked with a plain HTTP client sending that Host."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from taskfleet.dashboard.settings import DashboardSettings, allows, host_name
from taskfleet.producer.queue import Queue

from tests.dashboard_server import Served, serve
from tests.fixtures_redis import free_port
from tests.polling import wait_for


@pytest.fixture
def served(redis_url: str) -> Iterator[Served]:
    with serve(DashboardSettings(redis_url=redis_url, sample_s=0.05, discover_s=0.05)) as s:
        yield s


def test_a_foreign_host_is_refused_with_421_and_no_data(served: Served, queue: Queue) -> None:
    task_id = queue.enqueue({"secret": "payload-of-a-task"})
    task_page = f"/queues/jobs/tasks/id/{task_id}"
    wait_for(lambda: "payload-of-a-task" in served.get(task_page).body, what="the task listed")
    for host in ("rebind.attacker.example", "rebind.attacker.example:8080", "127.0.0.1.nip.io"):
        reply = served.get(task_page, {"Host": host})
        assert reply.status == 421, host
        assert "payload-of-a-task" not in reply.body
        assert "--allowed-host" in reply.body
        assert reply.headers["x-frame-options"] == "DENY"
    assert served.get("/", {"Host": ""}).status == 421


def test_the_loopback_names_are_answered_with_or_without_a_port(served: Served) -> None:
    for host in ("localhost", f"localhost:{served.port}", "127.0.0.1", "[::1]:8080", "LOCALHOST"):
        assert served.get("/", {"Host": host}).status == 200, host


def test_the_health_check_answers_any_host_it_shows_nothing(served: Served) -> None:
    # The kubelet's probes send the pod's IP as Host.
    assert served.get("/healthz", {"Host": "10.244.0.17:8080"}).status == 200


def test_host_names_are_matched_exactly_or_as_subdomains_of_a_wildcard() -> None:
    allowed = ("localhost", "dash.example.com", "*.internal.example")
    assert allows(allowed, "dash.example.com:443")
    assert allows(allowed, "a.internal.example")
    assert not allows(allowed, "internal.example")
    assert not allows(allowed, "dash.example.com.evil.example")
    assert not allows(allowed, "localhost:notaport")
    assert allows(("*",), "anything.example")
    assert host_name("[::1]:8080") == "::1"
    assert host_name("Example.COM.") == "example.com"


def test_the_command_answers_for_an_allowed_host_and_its_bind_address_only(
    redis_url: str,
) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "taskfleet",
            "dashboard",
            "--redis-url",
            redis_url,
            "--port",
            str(port),
            "--allowed-host",
            "dash.example.com",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        served = Served(port)
        # a fresh interpreter importing Starlette and uvicorn: slow on a busy machine
        wait_for(lambda: served.get("/healthz").status == 200, timeout=60, ignoring=(OSError,))
        assert served.get("/", {"Host": f"dash.example.com:{port}"}).status == 200
        assert served.get("/", {"Host": f"127.0.0.1:{port}"}).status == 200
        assert served.get("/", {"Host": "other.example.com"}).status == 421
    finally:
        proc.terminate()
        proc.communicate(timeout=15)


def test_a_malformed_allowed_host_is_one_line_and_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "taskfleet", "dashboard", "--allowed-host", "http://x/"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "--allowed-host" in result.stderr
    assert "Traceback" not in result.stderr
