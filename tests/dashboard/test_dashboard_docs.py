"""docs/dashboard.md shows a screenshot of every page of the dashboard: each page the
browser test walks (``dashboard_pages.PAGES``) has its image committed under docs/images/
and shown in the page; ``TASKFLEET_DOCS_SCREENSHOTS=1`` on that test makes them anew."""

from __future__ import annotations

import re

from tests.dashboard_pages import PAGES, REPO, screenshot

DOC = REPO / "docs" / "dashboard.md"
PNG = b"\x89PNG\r\n\x1a\n"


def test_every_page_has_a_screenshot_committed_and_shown_in_the_docs() -> None:
    text = DOC.read_text()
    shown = set(re.findall(r"!\[[^\]]*\]\(images/dashboard-([a-z-]+)\.png\)", text))
    for name in PAGES:
        image = screenshot(name)
        assert image.exists(), f"no screenshot of the {name} page: {image}"
        assert image.read_bytes()[:8] == PNG, f"{image} is not a PNG"
        assert name in shown, f"docs/dashboard.md does not show images/dashboard-{name}.png"
    for name in shown:
        assert screenshot(name).exists(), f"docs/dashboard.md shows a missing image: {name}"
