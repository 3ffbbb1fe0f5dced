"""The worker-behaviour scenarios (conformance/scenarios/) with the Python worker: one test
per file, each file run unchanged (clients/node/test/scenarios.test.ts runs the same files
with the Node worker). An altered scenario must fail, or the runner checks nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenario_runner import run_scenario

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((REPO / "conformance" / "scenarios").glob("*.json"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_the_python_worker_behaves_as_the_scenario_says(
    path: Path, redis_url: str, tmp_path: Path
) -> None:
    run_scenario(path, redis_url, tmp_path)
