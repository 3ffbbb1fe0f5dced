"""A task's streamed output on the dashboard, served for real on a real redis-server: a
running task's chunks as server-sent events, live, each with its entry id; a reconnection
with Last-Event-ID resuming after it; the stream ending with the task; a bound on open
streams; a finished task's page showing the whole output, attempt by attempt."""

from __future__ import annotations

import html
import http.client
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.queue import Queue
from taskfleet.protocol.output import emit_op
from taskfleet.protocol.scripts import SyncScripts

from tests.dashboard_server import Served, serve
from tests.fixtures_redis import MakeBroker
from tests.polling import wait_for


@pytest.fixture
def served(redis_url: str) -> Iterator[Served]:
    settings = DashboardSettings(redis_url=redis_url, sample_s=0.05, discover_s=0.05, max_streams=2)
    with serve(settings) as s:
        yield s


@dataclass(frozen=True)
class Event:
    kind: str
    data: dict[str, object]
    id: str | None


class EventReader:
    """An EventSource's reading of a stream: events as they come, one at a time."""

    def __init__(self, served: Served, path: str, last_event_id: str | None = None) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", path, headers=headers)
        self.response = self.conn.getresponse()

    def next(self) -> Event | None:
        """The next event (comments and the retry field skipped); None at the stream's end."""
        kind, data, entry = "message", "", None
        while True:
            line = self.response.readline().decode()
            if not line:
                return None
            line = line.rstrip("\n")
            if line == "":
                if data:
                    return Event(kind, json.loads(data), entry)
                continue
            name, _, value = line.partition(": ")
            if name == "event":
                kind = value
            elif name == "data":
                data += value
            elif name == "id":
                entry = value

    def close(self) -> None:
        self.conn.close()


def emit(queue: Queue, task_id: str, token: str, text: str) -> str:
    entry: str = SyncScripts.for_client(queue.client).run(
        emit_op(queue.keys, task_id, token, "t", text)
    )
    return entry


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def test_a_running_tasks_output_streams_live_resumes_after_its_last_id_and_ends_with_it(
    served: Served, queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({}, task="summarise")
    broker = make_broker("jobs")
    broker.register(1)
    (run,) = broker.claim(1).tasks
    first = emit(queue, run.id, run.token, "Once upon ")
    page = served.get(f"/queues/jobs/tasks/id/{task_id}").body
    assert f'data-stream="/queues/jobs/output/{task_id}"' in page

    reader = EventReader(served, f"/queues/jobs/output/{task_id}")
    try:
        assert reader.response.status == 200
        assert reader.response.getheader("Content-Type", "").startswith("text/event-stream")
        assert reader.next() == Event("chunk", {"attempt": 1, "text": "Once upon "}, first)
        second = emit(queue, run.id, run.token, "a <time>")  # written while the reader waits
        assert reader.next() == Event("chunk", {"attempt": 1, "text": "a <time>"}, second)
    finally:
        reader.close()

    # the browser's reconnection: after the last chunk it had, nothing twice
    third = emit(queue, run.id, run.token, ".")
    again = EventReader(served, f"/queues/jobs/output/{task_id}", last_event_id=second)
    try:
        assert again.next() == Event("chunk", {"attempt": 1, "text": "."}, third)
        broker.complete(run.id, run.token, None)
        assert again.next() == Event("end", {"state": "done"}, None)
        assert again.next() is None  # the server closed the stream
    finally:
        again.close()


def test_open_streams_are_bounded_and_a_bad_resume_point_is_refused(
    served: Served, queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({})
    broker = make_broker("jobs")
    broker.register(1)
    (run,) = broker.claim(1).tasks
    emit(queue, run.id, run.token, "x")
    path = f"/queues/jobs/output/{task_id}"
    readers = [EventReader(served, path) for _ in range(2)]
    try:
        for reader in readers:
            assert reader.next() is not None  # each stream is open and serving
        refused = served.get(path)
        assert refused.status == 503 and "at most 2 live outputs" in refused.body
    finally:
        for reader in readers:
            reader.close()

    def reopened() -> bool:  # a browser gone gives its slot back
        reader = EventReader(served, path)
        try:
            return reader.response.status == 200
        finally:
            reader.close()

    wait_for(reopened, timeout=10, what="a stream to open again once the others closed")
    bad = served.get(f"{path}?since=nope")
    assert bad.status == 400 and "since" in bad.body


def test_a_finished_tasks_page_shows_its_whole_output_attempt_by_attempt(
    served: Served, queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({}, max_attempts=2)
    broker = make_broker("jobs")
    broker.register(1)
    (first,) = broker.claim(1).tasks
    emit(queue, first.id, first.token, "try one <b>\n")
    assert broker.fail(first.id, first.token, "ValueError: again") == "delayed"
    assert queue.promote(task_id)
    (second,) = broker.claim(1).tasks
    emit(queue, second.id, second.token, "try two\n")
    broker.complete(second.id, second.token, None)

    page = served.get(f"/queues/jobs/tasks/id/{task_id}").body
    output = page.split('id="task-output"', 1)[1].split("</pre>", 1)[0]
    assert "data-stream" not in output  # finished: not live
    assert "try one &lt;b&gt;" in output  # text, never markup
    assert text_of(output).split() == [">try", "one", "<b>", "attempt", "2", "try", "two"]
    assert "The task ended done: 2 chunks." in text_of(page)


def test_a_task_with_no_output_has_no_output_section_unless_it_runs(
    served: Served, queue: Queue
) -> None:
    task_id = queue.enqueue({})
    assert 'id="task-output"' not in served.get(f"/queues/jobs/tasks/id/{task_id}").body
