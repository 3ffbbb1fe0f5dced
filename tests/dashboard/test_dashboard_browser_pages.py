"""Every page of the dashboard in a real browser (headless Chromium, as
test_dashboard_browser.py) on the showcase queue (``dashboard_pages``): each new element
shown (the grouped pending list, the claim pause banner, the health alarms, dead triage,
a long job's progress, what a waiting task waits for, schedules, flows, limits as
durations), no CSP violation, and a screenshot of each page. With
``TASKFLEET_DOCS_SCREENSHOTS=1`` the screenshots are written to docs/images/ (what
docs/dashboard.md shows); else to test-artifacts/dashboard/.

Skipped, saying so, only where chromium or its driver is not installed (``make deps``).
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

from tests.dashboard_pages import PAGES, QUEUE, Showcase, screenshot, showcase
from tests.dashboard_server import Served, serve
from tests.needs import unless
from tests.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(os.environ.get("TASKFLEET_ARTIFACTS", REPO / "test-artifacts")) / "dashboard"
TO_DOCS = os.environ.get("TASKFLEET_DOCS_SCREENSHOTS") == "1"
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
    options.add_argument("--window-size=1280,860")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    q = Queue(QUEUE, redis_url=redis_url)
    yield q
    q.close()


@pytest.fixture
def scene(queue: Queue, make_broker: Callable[..., Any]) -> Showcase:
    return showcase(queue, make_broker)


@pytest.fixture
def served(redis_url: str, scene: Showcase) -> Iterator[Served]:
    settings = DashboardSettings(
        redis_url=redis_url, refresh_s=60, sample_s=0.2, discover_s=0.2, page_size=12
    )
    with serve(settings) as s:
        # the pages are not refreshed here: open them once the background discovery is done
        wait_for(lambda: QUEUE in s.get("/").body, timeout=10, what="the queue discovered")
        yield s


def visible(browser: Any, css: str, text: str = "") -> str:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def shown() -> str | None:
        for element in browser.find_elements(By.CSS_SELECTOR, css):
            if text in element.text:
                return str(element.text) or " "
        return None

    return wait_for(
        shown,
        timeout=BROWSER_TIMEOUT_S,
        what=f"{css!r} holding {text!r}",
        ignoring=(StaleElementReferenceException,),
    )


def shot(browser: Any, name: str) -> None:
    target = screenshot(name) if TO_DOCS else ARTIFACTS / f"page-{name}.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(target))


def csp_violations(browser: Any) -> list[str]:
    return [
        e["message"]
        for e in browser.get_log("browser")
        if "Content Security Policy" in e["message"] or "Refused to" in e["message"]
    ]


#: What each page must show: (css, text) pairs, each waited for.
EXPECTED: dict[str, list[tuple[str, str]]] = {
    "queues": [("table.queues a", QUEUE), ("span.badge.groups-paused", "1 group paused"),
               ("a.badge.quota-paused", "waits on openai (paused)"),
               ("span.badge.health", "1 worker silent")],
    "queue": [("#claim-pause", "OpenAI 429 storm"), ("section p", "-60 min"),
              ("#claim-pause", "tenant-initech"),
              ("#alarms", "1 worker silent"), ("dl.limits", "dead retention"),
              ("dl.limits", "3 d"), ("table.groups a", "tenant-acme")],
    "pending": [("main p.muted", "across groups"), ("table.tasks th", "group"),
                ("table.tasks a", "tenant-globex")],
    "running": [("table.live td.progress", "embedding chunk 412"),
                ("table.live td.progress", "41%"), ("table.live td", "embed-corpus")],
    "waiting": [("table.live td.waits", "left")],
    "dead": [("#triage", "KeyError: 'summary'"), ("#triage td.num", "3"),
             ("form#filter", "task name")],
    "task": [("#task-error", "KeyError")],
    "output": [("#task-output", "Embedding with"), ("#output-status", "live")],
    "schedules": [("table.schedules", "nightly-digest"), ("table.schedules", "Europe/Paris"),
                  ("table.schedules", "paused")],
    "flows": [("table.flows td", "/")],
    "workers": [("table.workers tr.silent", "silent")],
    "quotas": [("#quota-openai h2", "OpenAI 429 storm"), ("#quota-openai table.units", "requests")],
}  # fmt: skip


def test_every_page_shows_its_new_elements_in_a_real_browser(
    browser: Any, served: Served, scene: Showcase
) -> None:
    assert set(EXPECTED) == set(PAGES)
    for name, path in PAGES.items():
        browser.get(served.base + path.format(task=scene.dead_id, running=scene.running_id))
        visible(browser, "main h1")
        for css, text in EXPECTED[name]:
            visible(browser, css, text)
        shot(browser, name)
    assert csp_violations(browser) == []


def test_a_running_tasks_output_grows_live_survives_the_refresh_and_ends_with_the_task(
    browser: Any,
    redis_url: str,
    scene: Showcase,
    queue: Queue,
    make_broker: Callable[..., Any],
) -> None:
    settings = DashboardSettings(redis_url=redis_url, refresh_s=0.3, sample_s=0.2, discover_s=0.2)
    with serve(settings) as fast:
        browser.get(f"{fast.base}/queues/{QUEUE}/tasks/id/{scene.running_id}")
        visible(browser, "#task-output", "Loaded 1,000 chunks")
        scene.emit(queue, "chunk 412 of 1000 <done>\n")
        visible(browser, "#task-output", "chunk 412 of 1000 <done>")  # text, not markup
        visible(browser, "#live-status", "live ·")  # the page refreshed since
        scene.emit(queue, "chunk 413 of 1000\n")
        shown = visible(browser, "#task-output", "chunk 413")
        assert shown.count("Loaded 1,000 chunks") == 1  # nothing twice after a refresh
        broker = make_broker(queue.name, pod="worker-7f9c-0", incarnation="a1")
        broker.complete(scene.running_id, scene.running_token, None)
        visible(browser, "#output-status", "The task ended done")
        assert "chunk 413" in visible(browser, "#task-output", "chunk 413")
    assert csp_violations(browser) == []


def test_the_copy_button_copies_a_whole_id_and_dark_mode_changes_the_colours(
    browser: Any, served: Served, scene: Showcase
) -> None:
    browser.get(served.base + "/queues/llm-summaries/tasks/dead")
    visible(browser, "table.tasks button.copy")
    browser.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": served.base, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    browser.execute_script("document.querySelector('table.tasks button.copy').click();")
    copied = wait_for(
        lambda: browser.execute_script("return navigator.clipboard.readText();") or None,
        timeout=BROWSER_TIMEOUT_S,
        what="the clipboard",
    )
    assert len(copied) == 32 and copied in browser.page_source
    light = browser.execute_script("return getComputedStyle(document.body).backgroundColor;")
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    dark = browser.execute_script("return getComputedStyle(document.body).backgroundColor;")
    assert light == "rgb(255, 255, 255)" and dark == "rgb(13, 17, 23)"
    if TO_DOCS:
        browser.get(served.base + "/queues/llm-summaries")
        visible(browser, "#claim-pause")
        browser.save_screenshot(str(screenshot("queue-dark")))
