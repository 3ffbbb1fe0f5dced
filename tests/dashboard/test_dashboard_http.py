"""The dashboard over HTTP, served for real (uvicorn) against a real redis-server: what each
page shows of a queue made through its own operations, paging, search, escaping and
capping, the security headers, secrets never shown, read-only, Redis going away."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any
from urllib.parse import quote

import pytest
import redis
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.queue import Queue
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import WORKER_LEVEL

from tests.dashboard_fixtures import busy_queue, older_worker
from tests.dashboard_server import Served, serve
from tests.fixtures_redis import RedisServerFactory, free_port
from tests.polling import wait_for


@pytest.fixture
def served(redis_url: str) -> Iterator[Served]:
    settings = DashboardSettings(redis_url=redis_url, sample_s=0.05, discover_s=0.05, page_size=10)
    with serve(settings) as s:
        yield s


def page_with(served: Served, path: str, needle: str) -> str | None:
    body = served.get(path).body
    return body if needle in body else None


def text_of(html: str) -> str:
    """The page's text as a reader sees it (tags dropped, spaces collapsed)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_queues_page_lists_every_queue_with_depths_by_state_and_workers_alive(
    served: Served, queue: Queue, redis_url: str, make_broker: Callable[..., Any]
) -> None:
    busy_queue(queue, make_broker)
    with Queue("other", redis_url=redis_url) as other_queue:
        other_queue.enqueue({})

    def listed() -> str | None:
        body = served.get("/").body
        return body if "/queues/other" in body and "/queues/jobs" in body else None

    body = wait_for(listed, what="both queues found without naming them")
    row = body.split('href="/queues/jobs"', 1)[1].split("</tr>", 1)[0]
    counts = re.findall(r'data-label="(\w+)"><a href="/queues/jobs/tasks/\w+">([\d,]+)<', row)
    assert dict(counts) == {
        "pending": "3",
        "delayed": "0",
        "running": "1",
        "done": "1",
        "dead": "1",
        "cancelled": "0",
        "waiting": "0",
    }
    assert ">1/1</a>" in row  # one worker, alive


def test_a_queue_page_shows_its_limits_the_newest_dead_and_a_rate_chart_of_its_counters(
    served: Served, queue: Queue, make_broker: Callable[..., Any]
) -> None:
    from taskfleet.protocol.config import QueueConfig

    queue.configure(QueueConfig(max_concurrency=7, rate_limit_tasks=50))
    scene = busy_queue(queue, make_broker)

    page = served.get("/queues/jobs").body

    shown = text_of(page)
    assert "max concurrency 7" in shown and "rate limit tasks 50" in shown
    assert "dead retention 3 d" in shown and "dead_retention_s" not in shown
    assert f'/queues/jobs/tasks/id/{scene.dead_id}"' in page
    assert "FileNotFoundError: no such file: /data/&lt;missing&gt;.csv" in page  # last line
    # samples every 50 ms: a line once two intervals are in
    wait_for(lambda: "<polyline" in served.get("/queues/jobs").body, what="the rate chart's lines")


def test_a_state_is_paged_in_the_order_the_queue_serves_it_and_never_past_its_end(
    served: Served, queue: Queue
) -> None:
    ids = [queue.enqueue({"i": i}, priority=1 if i == 24 else 0) for i in range(25)]
    expected = [ids[24], *ids[:24]]  # higher priority first, then first in first out

    seen: list[str] = []
    for number in (1, 2, 3):
        page = served.get(f"/queues/jobs/tasks/pending?page={number}").body
        assert f"page {number} of 3" in text_of(page)
        seen += re.findall(r'data-label="id"><a href="/queues/jobs/tasks/id/(\w+)"', page)
    assert seen == expected
    past = served.get("/queues/jobs/tasks/pending?page=4").body
    assert "No task on this page" in past and 'rel="prev"' in past
    assert served.get("/queues/jobs/tasks/pending?page=x").status == 400
    assert served.get("/queues/jobs/tasks/nosuch").status == 404


def test_dead_tasks_list_the_newest_first_with_reason_and_the_errors_last_line(
    served: Served, queue: Queue, make_broker: Callable[..., Any]
) -> None:
    scene = busy_queue(queue, make_broker)

    page = served.get("/queues/jobs/tasks/dead").body

    listed = page.split('<table class="tasks">', 1)[1]
    row = listed.split(f'/tasks/id/{scene.dead_id}"', 1)[1].split("</tr>", 1)[0]
    assert '<span class="reason">failed</span>' in row
    assert "FileNotFoundError: no such file" in row and "Traceback" not in row


def test_search_by_id_goes_to_the_task_and_an_unknown_id_says_so_escaped(
    served: Served, queue: Queue
) -> None:
    odd = queue.enqueue({}, task_id="a/b?c#d")

    found = served.get(f"/queues/jobs/search?id={quote(odd, safe='')}")
    assert found.status == 303
    assert found.headers["location"] == "/queues/jobs/tasks/id/a%2Fb%3Fc%23d"
    assert "a/b?c#d" in served.get(found.headers["location"]).body

    missing = served.get(f"/queues/jobs/search?id={quote('<img src=x>')}")
    assert missing.status == 404
    assert "&lt;img src=x&gt;" in missing.body and "<img src=x>" not in missing.body


def test_a_task_page_shows_error_attempts_pod_and_result_escaped_and_capped(
    served: Served, queue: Queue, make_broker: Callable[..., Any], redis_client: redis.Redis
) -> None:
    scene = busy_queue(queue, make_broker)

    dead = served.get(f"/queues/jobs/tasks/id/{scene.dead_id}").body
    shown = text_of(dead)
    assert "reason failed" in shown and "attempts 1 of 1" in shown
    assert "pod-a incarnation inc-7" in shown
    assert 'File "handler.py", line 3' in dead.replace("&#34;", '"')  # the whole traceback
    assert "&lt;b&gt;bold&lt;/b&gt;" in dead and "<b>bold</b>" not in dead

    done = served.get(f"/queues/jobs/tasks/id/{scene.done_id}").body
    assert '"rows": 42' in done.replace("&#34;", '"')

    big = queue.enqueue({"blob": "x" * 200_000})
    page = served.get(f"/queues/jobs/tasks/id/{big}").body
    assert len(page) < 80_000 and "more characters not shown" in page

    # a progress the handler stored reads as a bar
    redis_client.hset(queue.keys.task(scene.held_id), "progress", '{"done": 3, "total": 4}')
    held = served.get(f"/queues/jobs/tasks/id/{scene.held_id}").body
    assert '<progress max="1" value="0.75">' in held


def test_the_workers_page_shows_pod_incarnation_heartbeat_slots_and_what_each_holds(
    served: Served, queue: Queue, make_broker: Callable[..., Any]
) -> None:
    scene = busy_queue(queue, make_broker)

    for path in ("/workers", "/queues/jobs/workers"):
        page = wait_for(partial(page_with, served, path, "pod-a"), what="pod-a listed")
        row = page.split('data-label="pod">pod-a<', 1)[1].split("</tr>", 1)[0]
        assert ">inc-7<" in row and ">1/4<" in row and ">running<" in row
        assert f"/tasks/id/{scene.held_id}" in row
        assert re.search(r">\d+\.\ds ago<", row)


def test_the_workers_page_shows_each_workers_held_slots(
    served: Served, queue: Queue, make_broker: Callable[..., Any]
) -> None:
    queue.enqueue({})  # a queue the dashboard finds
    broker = make_broker(queue.name, pod="pod-held")
    broker.register(2)
    broker.beat({}, inflight=0, held=2)  # two calls given up on still run
    make_broker(queue.name, pod="pod-free").register(2)

    page = wait_for(partial(page_with, served, "/workers", "pod-held"), what="pod-held listed")
    rows = {
        pod: page.split(f'data-label="pod">{pod}<', 1)[1].split("</tr>", 1)[0]
        for pod in ("pod-held", "pod-free")
    }
    assert '<td class="num held" data-label="held">2</td>' in rows["pod-held"]
    assert '<td class="num" data-label="held">0</td>' in rows["pod-free"]


def test_each_workers_level_is_shown_and_a_live_0_1_worker_is_flagged_on_its_queues_pages(
    served: Served, queue: Queue, make_broker: Callable[..., Any]
) -> None:
    queue.enqueue({})  # a queue the dashboard finds
    make_broker(queue.name, pod="pod-new", incarnation="inc-1").register(2)
    older_worker(queue, "pod-old")
    older_worker(queue, "pod-gone", beat_ago_ms=120_000)  # silent for longer than a lease
    note = (
        '<p class="older">worker pod-old runs taskfleet 0.1.x (level 1): flows, groups, claim '
        "pauses and spend budgets are not served by it; upgrade it (docs/upgrade.md)</p>"
    )

    for path in ("/workers", "/queues/jobs/workers"):
        page = wait_for(partial(page_with, served, path, "pod-old"), what="pod-old listed")
        rows = {
            pod: page.split(f'data-label="pod">{pod}<', 1)[1].split("</tr>", 1)[0]
            for pod in ("pod-new", "pod-old", "pod-gone")
        }
        assert f'<td class="num" data-label="level">{WORKER_LEVEL}</td>' in rows["pod-new"]
        for pod in ("pod-old", "pod-gone"):
            assert '<td class="num older" data-label="level">1 (0.1.x)</td>' in rows[pod]
        assert note in page  # the silent one is not named: it serves nothing now
    assert note in served.get("/queues/jobs").body

    queue.client.hdel(QueueKeys(queue.name).workers, "pod-old")
    assert "0.1.x" not in served.get("/queues/jobs").body
    assert 'class="older"' not in served.get("/queues/jobs/workers").body.split("</table>")[1]


def test_every_response_carries_the_security_headers_and_nothing_but_get_is_served(
    served: Served, queue: Queue
) -> None:
    queue.enqueue({})
    for path in ("/", "/queues/jobs", "/static/live.js", "/queues/no%20such", "/nowhere"):
        reply = served.get(path)
        csp = reply.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert reply.headers["x-frame-options"] == "DENY"
        assert reply.headers["x-content-type-options"] == "nosniff"
    for method in ("POST", "PUT", "DELETE"):
        assert served.request(method, "/queues/jobs").status == 405
    # no inline script or style anywhere: the policy holds without exceptions
    page = served.get("/queues/jobs").body
    assert "<script>" not in page and "style=" not in page and " on" not in page.split(">", 1)[0]


def test_the_live_fragment_is_the_page_without_its_frame(served: Served, queue: Queue) -> None:
    queue.enqueue({})
    fragment = served.get("/queues/jobs", {"X-Live": "1"}).body
    assert fragment.lstrip().startswith("<h1>Queue")
    assert "<html" not in fragment and "/static/live.js" not in fragment


def test_a_password_in_the_redis_url_is_never_rendered(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory(persistent=False, password="hunter2-s3cret")
    Queue("jobs", redis_url=server.url_as(password="hunter2-s3cret")).enqueue({})
    good = server.url_as(password="hunter2-s3cret")
    with serve(DashboardSettings(redis_url=good, queues=("jobs",))) as served:
        page = served.get("/queues/jobs").body
        assert "/queues/jobs/tasks/pending" in page and "hunter2" not in page
    wrong = server.url_as(password="wrong-0ther-s3cret")
    with serve(DashboardSettings(redis_url=wrong, queues=("jobs",))) as served:
        refused = served.get("/queues/jobs")
        assert refused.status == 503 and "Redis unavailable" in refused.body
        assert "s3cret" not in refused.body


def test_redis_going_away_is_a_503_page_and_the_dashboard_recovers_when_it_returns(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory(persistent=True)
    with Queue("jobs", redis_url=server.url) as other_queue:
        other_queue.enqueue({})
    with serve(DashboardSettings(redis_url=server.url, queues=("jobs",))) as served:
        assert served.get("/queues/jobs").status == 200
        server.stop()
        down = served.get("/queues/jobs")
        assert down.status == 503 and "Redis unavailable" in down.body
        server.start()
        wait_for(lambda: served.get("/queues/jobs").status == 200, what="the page back")


def test_with_named_queues_another_queue_is_not_found_and_bad_names_are_404(
    redis_url: str, queue: Queue
) -> None:
    queue.enqueue({})
    with Queue("secret-queue", redis_url=redis_url) as secret:
        secret.enqueue({})
    with serve(DashboardSettings(redis_url=redis_url, queues=("jobs",))) as served:
        assert "secret-queue" not in served.get("/").body
        assert served.get("/queues/secret-queue").status == 404
        assert served.get("/queues/jobs").status == 200
        assert served.get("/queues/%7Bbad%7D").status == 404


def test_the_command_serves_on_loopback_and_stops_on_sigterm(redis_url: str, queue: Queue) -> None:
    queue.enqueue({})
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
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        served = Served(port)
        wait_for(lambda: served.get("/healthz").status == 200, timeout=15, ignoring=(OSError,))
        wait_for(lambda: "/queues/jobs" in served.get("/").body, what="the queue listed")
        proc.terminate()
        # uvicorn shuts down, then ends by the signal it caught (as the signal's default would)
        _, stderr = proc.communicate(timeout=15)
        assert proc.returncode in (0, -signal.SIGTERM)
        assert "http://127.0.0.1:" in stderr and "Traceback" not in stderr
    finally:
        proc.kill()
        proc.communicate()


def test_bad_command_input_is_one_line_and_exit_2() -> None:
    for args in (["--queue", "no spaces"], ["--redis-url", "http://x"], ["--port", "0"]):
        result = subprocess.run(
            [sys.executable, "-m", "taskfleet", "dashboard", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr


def test_the_command_group_loads_without_the_web_stack() -> None:
    code = (
        "import sys; from taskfleet.cli import cli; "
        "assert not {'starlette', 'jinja2', 'uvicorn', 'taskfleet.dashboard'} & set(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_a_queue_page_shows_its_biggest_groups_and_the_rest_on_one_line_escaped(
    served: Served, queue: Queue, redis_client: redis.Redis
) -> None:
    for i in range(7):
        queue.enqueue_many([{"payload": {"n": n}, "group": f"tenant-{i}"} for n in range(i + 1)])
    # a group key a foreign writer stored, held back: shown as written, never as markup
    odd = "<img src=x onerror=alert(1)>"
    redis_client.zadd(queue.keys.group_pending(odd), {f"t-odd-{n}": 0 for n in range(10)})
    redis_client.zadd(queue.keys.groups_parked, {odd: "inf"})
    redis_client.incrby(queue.keys.groups_pending, 10)

    page = served.get("/queues/jobs").body
    groups = page.split('<table class="groups">', 1)[1].split("</table>", 1)[0]
    shown = text_of(groups)
    assert "&lt;img src=x onerror=alert(1)&gt; 10 0 at its concurrency cap" in shown
    assert "tenant-6 7 0 -" in shown and "tenant-3 4 0 -" in shown
    assert "tenant-2" not in shown  # the sixth biggest and smaller: on the other line
    assert "other (3) 6 0" in shown  # tenant-2, -1 and -0: 3 + 2 + 1
    assert "<img src=x" not in page


def test_a_task_page_shows_its_flow_each_member_linked_and_escaped(
    served: Served, queue: Queue, make_broker: Callable[..., Any]
) -> None:
    odd = queue.enqueue({}, task_id='<script>alert("x")</script>')
    kept = queue.enqueue({}, task_id="kept")
    merge = queue.enqueue({}, after=[odd, kept], task_id="merge")
    queue.enqueue({}, after=[merge], task_id="publish")
    broker = make_broker("jobs")
    for task in broker.claim(2).tasks:
        broker.complete(task.id, task.token, None)
    assert queue.purge_tasks("done", ["kept"]) == 1

    page = served.get("/queues/jobs/tasks/id/merge").body
    flow = page.split('id="task-flow">', 1)[1].split("</ul>", 1)[0]
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in flow
    assert "<script>" not in page
    link = quote(odd, safe="")
    assert f'href="/queues/jobs/tasks/id/{link}"' in flow
    assert "kept" in flow and "(gone)" in text_of(flow.split("kept", 1)[1])
    dependants = text_of(page.split('id="task-dependants">', 1)[1].split("</ul>", 1)[0])
    assert "publish waiting 1 left" in dependants

    alone = queue.enqueue({})
    assert 'id="task-flow"' not in served.get(f"/queues/jobs/tasks/id/{alone}").body


def test_a_task_page_shows_each_attempt_with_its_pod_outcome_error_and_traceback(
    served: Served, queue: Queue, make_broker: Callable[..., Any]
) -> None:
    from taskfleet.protocol.config import QueueConfig

    queue.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0))
    task_id = queue.enqueue({}, max_attempts=3)
    for pod in ("pod-one", "pod-two"):
        broker = make_broker(queue.name, pod=pod)
        broker.register(1)
        [held] = wait_for(lambda b=broker: b.claim(1).tasks or None, what=f"{pod} claims")
        trace = f'File "summarise.py", line 12, in handle\nKeyError: <{pod}>'
        broker.fail(held.id, held.token, f"KeyError: <{pod}>", traceback=trace)
    page = served.get(f"/queues/jobs/tasks/id/{task_id}").body
    table = page.split('id="task-history"', 1)[1].split("</table>", 1)[0]
    rows = [text_of(row).split() for row in table.split("<tr>")[2:]]
    assert [row[:3] for row in rows] == [["1", "failed", "pod-one"], ["2", "failed", "pod-two"]]
    assert "KeyError: &lt;pod-two&gt;" in table and "<pod-two>" not in table
    assert 'File "summarise.py", line 12, in handle' in table.replace("&#34;", '"')
