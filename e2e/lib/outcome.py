"""Whether the test a fixture serves failed: the report the e2e plugin (fixtures.py) keeps
for each test, read by teardowns that print diagnostics. A plain module, so test modules
may import it (the plugin module itself must not be imported before pytest loads it)."""

from __future__ import annotations

import pytest

OUTCOME = pytest.StashKey[pytest.TestReport]()
#: The key of a measured figure in a test's ``user_properties`` (the ``figures`` fixture).
FIGURE = "taskfleet-e2e-figure"


def failed(request: pytest.FixtureRequest) -> bool:
    """Whether the test a fixture serves failed (in its setup or its call): for teardowns
    that leave diagnostics in the report."""
    report = request.node.stash.get(OUTCOME, None)
    return report is not None and report.failed
