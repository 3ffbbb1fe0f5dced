"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` and its
``chromium-driver``, driven by selenium) against the dashboard served for real on a real
redis-server. The flows an on-call person takes: the queues, a queue, its dead tasks, a
dead task's error, the workers; a queue's groups and a flow's tree walked member by
member; the page refreshing itself; a phone's screen; the
Content-Security-Policy holding (no violation in the console).

Screenshots of each step go to ``test-artifacts/dashboard/`` (``TASKFLEET_ARTIFACTS``
overrides the directory); CI keeps them. Skipped, saying so, only where chromium or its
driver is not installed (``make deps`` installs both).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from taskfleet.dashboard.settings import DashboardSettings
from taskfleet.producer.queue import Queue

from tests.dashboard_fixtures import Scene, busy_queue, older_worker
from tests.dashboard_server import Served, serve
from tests.needs import unless
from tests.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(os.environ.get("TASKFLEET_ARTIFACTS", REPO / "test-artifacts")) / "dashboard"

#: A browser starts, loads and runs scripts slower than a Redis round trip.
BROWSER_TIMEOUT_S = 20.0

pytestmark = unless(
    CHROMIUM is not None and CHROMEDRIVER is not None,
    reason="needs Debian's chromium and chromium-driver (make deps installs them)",
)


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument("--window-size=1280,900")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


@pytest.fixture
def scene(queue: Queue, make_broker: Callable[..., Any]) -> Scene:
    return busy_queue(queue, make_broker, pending=12)


@pytest.fixture
def served(redis_url: str, scene: Scene) -> Iterator[Served]:
    settings = DashboardSettings(
        redis_url=redis_url, refresh_s=0.5, sample_s=0.2, discover_s=0.2, page_size=10
    )
    with serve(settings) as s:
        yield s


def shot(browser: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def _find(browser: Any, css: str, text: str) -> Any:
    from selenium.webdriver.common.by import By

    for element in browser.find_elements(By.CSS_SELECTOR, css):
        if text in element.text:
            return element
    return None


def _stale() -> tuple[type[Exception], ...]:
    # the live refresh swaps the page's content: an element found a moment ago may be gone
    from selenium.common.exceptions import StaleElementReferenceException

    return (StaleElementReferenceException,)


def visible(browser: Any, css: str, text: str = "") -> str:
    """The text of the first element matching ``css`` and holding ``text``, once shown."""

    def shown() -> str | None:
        element = _find(browser, css, text)
        return None if element is None else str(element.text) or " "

    return wait_for(
        shown, timeout=BROWSER_TIMEOUT_S, what=f"{css!r} holding {text!r}", ignoring=_stale()
    )


def click(browser: Any, css: str, text: str = "") -> None:
    """Click the first element matching ``css`` and holding ``text``, once shown."""

    def clicked() -> bool:
        element = _find(browser, css, text)
        if element is None:
            return False
        element.click()
        return True

    wait_for(
        clicked, timeout=BROWSER_TIMEOUT_S, what=f"{css!r} holding {text!r}", ignoring=_stale()
    )


def csp_violations(browser: Any) -> list[str]:
    return [
        entry["message"]
        for entry in browser.get_log("browser")
        if "Content Security Policy" in entry["message"] or "Refused to" in entry["message"]
    ]


def test_from_the_queues_to_a_dead_tasks_error_and_on_to_the_workers(
    browser: Any, served: Served, scene: Scene, queue: Queue
) -> None:
    older_worker(queue, "pod-old")
    browser.get(served.base + "/")
    click(browser, "table.queues a", "jobs")
    shot(browser, "1-queues-then-queue")

    assert "worker pod-old runs taskfleet 0.1.x (level 1)" in visible(browser, "p.older")
    click(browser, "a.card.state-dead", "1")
    visible(browser, "h1", "dead")
    shot(browser, "2-dead-tasks")

    click(browser, "table.tasks td a", scene.dead_id)
    error = visible(browser, "#task-error", "FileNotFoundError")
    assert "no such file: /data/<missing>.csv" in error  # escaped, shown as written
    assert "failed" in visible(browser, "strong.reason")
    shot(browser, "3-dead-task")

    click(browser, "header nav a", "workers")
    row = visible(browser, "table.workers tr", "pod-a")
    assert "inc-7" in row and "1/4" in row and scene.held_id in row
    assert visible(browser, "table.workers tr", "pod-old").split()[-2:] == ["(0.1.x)", "-"]
    assert "upgrade it (docs/upgrade.md)" in visible(browser, "p.older")
    shot(browser, "4-workers")
    assert csp_violations(browser) == []


def test_an_open_page_refreshes_itself_without_reloading(
    browser: Any, served: Served, queue: Queue
) -> None:
    browser.get(served.base + "/queues/jobs")
    visible(browser, "a.card.state-pending .value", "12")
    browser.execute_script("window.notReloaded = true;")

    for i in range(5):
        queue.enqueue({"more": i})

    visible(browser, "a.card.state-pending .value", "17")
    assert browser.execute_script("return window.notReloaded === true;")
    assert visible(browser, "#live-status", "live").startswith("live")
    assert csp_violations(browser) == []


def test_pages_fit_a_phone_screen_without_scrolling_sideways(
    browser: Any, served: Served, scene: Scene, queue: Queue
) -> None:
    older_worker(queue, "pod-old")  # its level flagged and the line under the list
    browser.set_window_size(390, 844)
    for path, name in (
        ("/", "phone-queues"),
        ("/queues/jobs/tasks/pending", "phone-pending"),
        (f"/queues/jobs/tasks/id/{scene.dead_id}", "phone-task"),
        ("/workers", "phone-workers"),
    ):
        browser.get(served.base + path)
        visible(browser, "main h1")
        if path == "/":
            visible(browser, "table.queues a", "jobs")
        overflow = browser.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth;"
        )
        shot(browser, name)
        assert overflow <= 1, f"{path} is {overflow}px wider than the screen"


TOKEN = "browser-test-token-0123456789abc"


@pytest.fixture
def acting(redis_url: str, scene: Scene) -> Iterator[Served]:
    settings = DashboardSettings(
        redis_url=redis_url,
        refresh_s=0.5,
        sample_s=0.2,
        discover_s=0.2,
        page_size=10,
        read_only=False,
        token=TOKEN,
    )
    with serve(settings) as s:
        yield s


def test_a_dead_tasks_error_read_then_the_task_retried_after_login_and_confirm_and_seen_done(
    browser: Any, acting: Served, scene: Scene, queue: Queue, make_broker: Callable[..., Any]
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(acting.base + "/")
    click(browser, "table.queues a", "jobs")
    click(browser, "a.card.state-dead", "1")
    click(browser, "table.tasks td a", scene.dead_id)
    assert "FileNotFoundError" in visible(browser, "#task-error", "FileNotFoundError")

    # the token, entered once: the login brings the reader back to the task
    click(browser, "a.badge", "log in to act")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    shot(browser, "5-login")
    click(browser, ".login button", "Log in")
    visible(browser, "h1", scene.dead_id)
    click(browser, "button.act-retry", "Retry")
    assert "Retry 1 dead task?" in visible(browser, "h1", "Retry")
    shot(browser, "6-confirm-retry")
    assert queue.get(scene.dead_id).state.value == "dead"  # type: ignore[union-attr]
    click(browser, "button#confirm", "Retry")
    assert "1 of 1 sent back to pending" in visible(browser, "#result-summary")
    shot(browser, "7-retried")

    # a worker takes it (it has the highest priority) and completes it
    broker = make_broker(queue.name, pod="pod-b", incarnation="inc-9")
    broker.register(1)
    (retried,) = broker.claim(1).tasks
    assert retried.id == scene.dead_id
    broker.complete(retried.id, retried.token, '{"recovered": true}')

    click(browser, "#result-summary ~ .scroll a", scene.dead_id)
    assert visible(browser, "a.state", "done") == "done"
    assert '"recovered": true' in visible(browser, "#task-result", "recovered")
    shot(browser, "8-retried-task-done")
    assert csp_violations(browser) == []


def test_delayed_tasks_promoted_from_the_delayed_page_and_from_a_task_page_after_login(
    browser: Any, acting: Served, scene: Scene, queue: Queue
) -> None:
    from selenium.webdriver.common.by import By

    first = queue.enqueue({"later": 1}, delay=3600)
    second = queue.enqueue({"later": 2}, delay=7200)
    browser.get(acting.base + "/login?next=/queues/jobs/tasks/delayed")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    click(browser, ".login button", "Log in")
    click(browser, f'input[type=checkbox][value="{first}"]')
    click(browser, "button.act-promote", "Promote selected")
    assert "Promote 1 delayed task?" in visible(browser, "h1", "Promote")
    assert queue.get(first).state.value == "delayed"  # type: ignore[union-attr]
    click(browser, "button#confirm", "Promote")
    assert "1 of 1 promoted to pending" in visible(browser, "#result-summary")
    assert queue.get(first).state.value == "pending"  # type: ignore[union-attr]

    browser.get(f"{acting.base}/queues/jobs/tasks/id/{second}")
    click(browser, "#task-actions button.act-promote", "Promote")
    click(browser, "button#confirm", "Promote")
    assert f"{second} promoted: pending now" in visible(browser, "table.result", second)
    assert queue.get(second).state.value == "pending"  # type: ignore[union-attr]
    assert csp_violations(browser) == []


def test_a_queues_groups_then_a_flow_walked_member_by_member_up_to_one_retention_pruned(
    browser: Any, served: Served, queue: Queue
) -> None:
    from selenium.webdriver.common.by import By

    for size, tenant in ((6, "acme:eu@x.io"), (4, "tenant-b"), (2, "tenant-c")):
        queue.enqueue_many([{"payload": {"n": n}, "group": tenant} for n in range(size)])
    odd = queue.enqueue({}, task_id="page-<i>1</i>")  # a task id is any text: shown as text
    gone = queue.enqueue({}, task_id="page-2")
    queue.enqueue({}, after=[odd, gone], on_dep_fail="ignore", task_id="merge")
    queue.enqueue({}, after=["merge"], task_id="publish")
    queue.cancel(gone)
    assert queue.purge_tasks("cancelled", [gone]) == 1  # as retention would, later

    browser.get(served.base + "/queues/jobs")
    row = visible(browser, "table.groups tr", "acme:eu@x.io")
    assert row.split()[1:3] == ["6", "0"]
    assert "other" not in visible(browser, "table.groups")  # three groups: all shown
    assert visible(browser, "a.card.state-waiting .value", "2") == "2"
    shot(browser, "9-queue-groups")

    browser.get(served.base + "/queues/jobs/tasks/id/publish")
    click(browser, "#task-flow a", "merge")
    visible(browser, "h1", "merge")
    flow = visible(browser, "#task-flow", "page-2")
    assert "page-2 (gone)" in flow and "merge waiting 1 left" in flow
    assert "publish" in visible(browser, "#task-dependants", "publish")
    assert browser.find_elements(By.CSS_SELECTOR, "#task-flow i") == []  # no markup from ids
    shot(browser, "10-flow-tree")

    click(browser, "#task-flow a", "page-<i>1</i>")
    visible(browser, "h1", "page-<i>1</i>")
    assert "merge" in visible(browser, "#task-dependants", "merge")
    assert csp_violations(browser) == []
