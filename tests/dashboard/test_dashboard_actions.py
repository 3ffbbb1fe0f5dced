"""The dashboard's actions over HTTP, served for real against a real redis-server: each
action confirmed then done through the queue's own calls, with what happened to each
task; the login, the session cookie, the CSRF token and the same-origin check refusing
what they must; read-only refusing every POST; every action one log line, never the
token."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.queue import Queue
from taskfleet.protocol.states import TaskState

from tests.dashboard_fixtures import Scene, busy_queue
from tests.dashboard_server import Served, serve

TOKEN = "dashboard-token-0123456789abcdef"


@pytest.fixture
def acting(redis_url: str) -> Iterator[Served]:
    settings = DashboardSettings(
        redis_url=redis_url, sample_s=0.05, discover_s=0.05, read_only=False, token=TOKEN
    )
    with serve(settings) as s:
        yield s


@pytest.fixture
def scene(queue: Queue, make_broker: Callable[..., Any]) -> Scene:
    return busy_queue(queue, make_broker)


class Browser:
    """What a browser keeps between requests: the session cookie; the CSRF token is
    read from the forms of a page, as a browser submits them."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.cookie = ""

    def log_in(self, token: str = TOKEN) -> int:
        reply = self.served.post("/login", [("token", token), ("next", "/")], SAME_SITE)
        if reply.status == 303:
            self.cookie = reply.headers["set-cookie"].split(";", 1)[0]
        return reply.status

    def headers(self) -> dict[str, str]:
        return {**SAME_SITE, "Cookie": self.cookie} if self.cookie else dict(SAME_SITE)

    def csrf(self, path: str = "/queues/jobs/tasks/dead") -> str:
        page = self.served.get(path, self.headers()).body
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found, "no form on the page"
        return found.group(1)

    def act(self, form: list[tuple[str, str]], *, confirm: bool) -> tuple[int, str]:
        fields = [("csrf", self.csrf()), *form] + ([("confirm", "1")] if confirm else [])
        reply = self.served.post("/queues/jobs/actions", fields, self.headers())
        return reply.status, text_of(reply.body)


SAME_SITE = {"Sec-Fetch-Site": "same-origin"}


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def dead_tasks(queue: Queue, make_broker: Callable[..., Any], n: int) -> list[str]:
    ids = [queue.enqueue({"n": i}, max_attempts=1, priority=200) for i in range(n)]
    broker = make_broker(queue.name, pod="pod-d", incarnation="d1")
    broker.register(n)
    for claimed in broker.claim(n).tasks:
        assert broker.fail(claimed.id, claimed.token, "ValueError: bad") == "dead"
    return ids


def state(queue: Queue, task_id: str) -> str | None:
    found = queue.get(task_id)
    return None if found is None else found.state.value


@pytest.fixture
def logged_in(acting: Served) -> Browser:
    browser = Browser(acting)
    assert browser.log_in() == 303
    return browser


def test_a_dead_task_is_retried_only_once_confirmed_and_the_answer_says_what_happened(
    logged_in: Browser, queue: Queue, scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "taskfleet.dashboard")
    form = [("action", "retry"), ("state", "dead"), ("id", scene.dead_id)]
    status, asked = logged_in.act(form, confirm=False)
    assert status == 200 and "Retry 1 dead task?" in asked and scene.dead_id in asked
    assert state(queue, scene.dead_id) == "dead"  # asking changes nothing

    status, answer = logged_in.act(form, confirm=True)
    assert status == 200 and "1 of 1 sent back to pending" in answer
    assert f"{scene.dead_id} sent back to pending" in answer
    assert state(queue, scene.dead_id) == "pending"

    (line,) = [r for r in caplog.records if r.getMessage() == "dashboard_action"]
    fields = line.fields  # type: ignore[attr-defined]
    assert fields["client"] == "127.0.0.1" and fields["action"] == "retry"
    assert fields["tasks"] == scene.dead_id and fields["result"] == "1 of 1 sent back to pending"
    logged = " ".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records)
    assert TOKEN not in logged and logged_in.csrf() not in logged


def test_selected_dead_tasks_are_retried_each_and_one_no_longer_dead_is_left_as_it_was(
    logged_in: Browser, queue: Queue, scene: Scene, make_broker: Callable[..., Any]
) -> None:
    first, second = dead_tasks(queue, make_broker, 2)
    form = [("action", "retry"), ("state", "dead")]
    form += [("id", first), ("id", second), ("id", scene.done_id)]
    status, answer = logged_in.act(form, confirm=True)
    assert status == 200 and "2 of 3 sent back to pending" in answer
    assert f"{scene.done_id} not dead any more: left as it was" in answer
    assert [state(queue, i) for i in (first, second, scene.done_id)] == [
        "pending",
        "pending",
        "done",
    ]


def test_retry_all_sends_every_dead_task_back_after_saying_how_many_there_are(
    logged_in: Browser, queue: Queue, scene: Scene, make_broker: Callable[..., Any]
) -> None:
    more = dead_tasks(queue, make_broker, 3)
    form = [("action", "retry"), ("state", "dead"), ("every", "1")]
    status, asked = logged_in.act(form, confirm=False)
    assert status == 200 and "Retry every dead task?" in asked and ": 4 now" in asked
    status, answer = logged_in.act(form, confirm=True)
    assert "4 dead tasks sent back to pending" in answer
    assert queue.stats()["dead"] == 0
    assert {state(queue, i) for i in [scene.dead_id, *more]} == {"pending"}


def test_cancel_says_per_task_cancelled_requested_or_already_finished(
    logged_in: Browser, queue: Queue, scene: Scene
) -> None:
    waiting = scene.pending_ids[0]
    form = [("action", "cancel"), ("state", "pending")]
    form += [("id", waiting), ("id", scene.held_id), ("id", scene.done_id), ("id", "nope")]
    status, answer = logged_in.act(form, confirm=True)
    assert status == 200 and "2 of 4 cancelled or asked to cancel" in answer
    assert f"{waiting} cancelled: it will never run" in answer
    assert f"{scene.held_id} cancel requested" in answer
    assert f"{scene.done_id} already done: left as it was" in answer
    assert "nope not found" in answer
    assert state(queue, waiting) == "cancelled" and state(queue, scene.done_id) == "done"


def test_promote_sends_selected_delayed_tasks_to_pending_and_says_which_were_not_delayed(
    logged_in: Browser, queue: Queue, scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "taskfleet.dashboard")
    later = queue.enqueue({"later": True}, delay=3600)
    page = logged_in.served.get("/queues/jobs/tasks/delayed", logged_in.headers()).body
    assert 'class="act-promote"' in page
    form = [("action", "promote"), ("state", "delayed"), ("id", later)]
    form += [("id", scene.pending_ids[0])]
    status, asked = logged_in.act(form, confirm=False)
    assert status == 200 and "Promote 2 delayed tasks?" in asked and "Each runs now" in asked
    assert state(queue, later) == "delayed"
    status, answer = logged_in.act(form, confirm=True)
    assert status == 200 and "1 of 2 promoted to pending" in answer
    assert f"{later} promoted: pending now" in answer
    assert f"{scene.pending_ids[0]} not delayed any more: left as it was" in answer
    assert state(queue, later) == "pending"
    (line,) = [r for r in caplog.records if r.getMessage() == "dashboard_action"]
    assert line.fields["action"] == "promote"  # type: ignore[attr-defined]
    every = [("action", "promote"), ("state", "delayed"), ("every", "1")]
    status, refused = logged_in.act(every, confirm=True)
    assert status == 400 and "promote names its tasks" in refused


def test_purge_deletes_selected_done_tasks_and_every_dead_one_and_nothing_else(
    logged_in: Browser, queue: Queue, scene: Scene
) -> None:
    form = [("action", "purge"), ("state", "done"), ("id", scene.done_id), ("id", scene.dead_id)]
    status, answer = logged_in.act(form, confirm=True)
    assert status == 200
    assert "1 of 2 deleted" in answer
    assert f"{scene.dead_id} not done (gone or changed meanwhile): left as it was" in answer
    assert state(queue, scene.done_id) is None and state(queue, scene.dead_id) == "dead"
    _, answer = logged_in.act(
        [("action", "purge"), ("state", "dead"), ("every", "1")], confirm=True
    )
    assert "1 dead tasks deleted" in answer and state(queue, scene.dead_id) is None
    assert queue.stats()["pending"] == len(scene.pending_ids)


def test_a_form_asking_for_what_no_action_does_is_a_400_and_changes_nothing(
    logged_in: Browser, queue: Queue, scene: Scene
) -> None:
    for form, why in [
        (
            [("action", "drop"), ("state", "dead"), ("id", scene.dead_id)],
            "no action &#39;drop&#39;",
        ),
        ([("action", "retry"), ("state", "done"), ("id", scene.done_id)], "retry applies to"),
        ([("action", "cancel"), ("state", "pending"), ("every", "1")], "cancel names its"),
        ([("action", "retry"), ("state", "dead")], "no task selected"),
    ]:
        status, answer = logged_in.act(form, confirm=True)
        assert status == 400 and why in answer
    assert state(queue, scene.dead_id) == "dead" and state(queue, scene.done_id) == "done"


def test_the_login_sets_an_httponly_samesite_strict_cookie_and_refuses_a_wrong_token(
    acting: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "taskfleet.dashboard")
    wrong = acting.post("/login", [("token", "not-the-token-at-all")], SAME_SITE)
    assert wrong.status == 403 and "That is not the token." in wrong.body
    assert "set-cookie" not in wrong.headers
    good = acting.post("/login", [("token", TOKEN), ("next", "//evil.example/")], SAME_SITE)
    assert good.status == 303 and good.headers["location"] == "/"
    cookie = good.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    results = [r.fields["result"] for r in caplog.records if r.getMessage() == "dashboard_login"]  # type: ignore[attr-defined]
    assert results == ["refused", "ok"]
    assert all(TOKEN not in str(getattr(r, "fields", "")) for r in caplog.records)


def test_an_action_without_session_or_with_a_missing_or_wrong_csrf_token_is_refused(
    acting: Served, logged_in: Browser, queue: Queue, scene: Scene
) -> None:
    form = [("action", "retry"), ("state", "dead"), ("id", scene.dead_id), ("confirm", "1")]
    csrf = logged_in.csrf()
    no_session = acting.post("/queues/jobs/actions", [("csrf", csrf), *form], SAME_SITE)
    assert no_session.status == 403 and "log in first" in no_session.body
    forged = {**SAME_SITE, "Cookie": "taskfleet_session=guessed"}
    assert acting.post("/queues/jobs/actions", [("csrf", csrf), *form], forged).status == 403
    headers = logged_in.headers()
    missing = acting.post("/queues/jobs/actions", form, headers)
    assert missing.status == 403 and "CSRF token" in missing.body
    wrong = acting.post("/queues/jobs/actions", [("csrf", csrf[::-1]), *form], headers)
    assert wrong.status == 403 and "CSRF token" in wrong.body
    assert state(queue, scene.dead_id) == "dead"
    # the same form with the session's token goes through: the refusals were the checks
    assert acting.post("/queues/jobs/actions", [("csrf", csrf), *form], headers).status == 200
    assert state(queue, scene.dead_id) == "pending"


def test_a_cross_site_request_is_refused_even_with_the_session_and_its_csrf_token(
    acting: Served, logged_in: Browser, queue: Queue, scene: Scene
) -> None:
    form = [("csrf", logged_in.csrf()), ("action", "retry"), ("state", "dead")]
    form += [("id", scene.dead_id), ("confirm", "1")]
    cookie = {"Cookie": logged_in.cookie}
    for cross in (
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://evil.example"},
    ):
        reply = acting.post("/queues/jobs/actions", form, {**cookie, **cross})
        assert reply.status == 403 and "another site" in reply.body
    assert (
        acting.post("/login", [("token", TOKEN)], {"Origin": "http://evil.example"}).status == 403
    )
    assert state(queue, scene.dead_id) == "dead"
    own = {**cookie, "Origin": acting.base}
    assert acting.post("/queues/jobs/actions", form, own).status == 200


def test_read_only_shows_no_form_and_refuses_every_post(
    redis_url: str, queue: Queue, scene: Scene
) -> None:
    with serve(DashboardSettings(redis_url=redis_url)) as served:
        page = served.get("/queues/jobs/tasks/dead").body
        assert '<form method="post"' not in page and "read-only" in page
        form = [("action", "retry"), ("state", "dead"), ("id", scene.dead_id), ("confirm", "1")]
        reply = served.post("/queues/jobs/actions", form, SAME_SITE)
        assert reply.status == 403 and "read-only" in reply.body
        assert served.post("/login", [("token", TOKEN)], SAME_SITE).status == 403
        assert served.get("/login").status == 404
        assert served.post("/queues/jobs/tasks/dead", form).status == 405
    assert state(queue, scene.dead_id) == TaskState.DEAD.value


def test_a_logged_in_page_offers_the_actions_of_its_state_and_logging_out_ends_the_session(
    logged_in: Browser, scene: Scene
) -> None:
    dead = logged_in.served.get("/queues/jobs/tasks/dead", logged_in.headers()).body
    assert "Retry selected" in dead and "Retry all dead" in dead and "Purge all dead" in dead
    assert f'name="id" value="{scene.dead_id}" form="selected"' in dead
    pending = logged_in.served.get("/queues/jobs/tasks/pending", logged_in.headers()).body
    assert "Cancel selected" in pending and "Retry" not in pending
    task = logged_in.served.get(f"/queues/jobs/tasks/id/{scene.dead_id}", logged_in.headers())
    assert 'class="act-retry"' in task.body and 'class="act-cancel"' not in task.body
    csrf = logged_in.csrf()
    out = logged_in.served.post("/logout", [("csrf", csrf)], logged_in.headers())
    assert out.status == 303
    after = logged_in.served.get("/queues/jobs/tasks/dead", logged_in.headers()).body
    assert "Retry selected" not in after and "log in to act" in after


def test_the_command_refuses_actions_without_a_token_and_exit_2(tmp_path: Any) -> None:
    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "taskfleet", "dashboard", "--redis-url", "redis://x", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={"PATH": "/usr/bin:/bin", **(env or {})},
        )

    bare = run("--actions")
    assert bare.returncode == 2
    assert "--actions needs a token: set TASKFLEET_DASHBOARD_TOKEN" in bare.stderr
    short = run("--actions", env={"TASKFLEET_DASHBOARD_TOKEN": "short"})
    assert short.returncode == 2 and "shorter than 16 characters" in short.stderr
    assert "short" not in short.stderr.replace("shorter", "")
    missing = run("--actions", "--token-file", str(tmp_path / "none"))
    assert missing.returncode == 2 and "cannot read --token-file" in missing.stderr
