"""The worker-behaviour scenarios (conformance/scenarios/) with the Python worker: one test
per file, each file run unchanged (clients/node/test/scenarios.test.ts runs the same files
with the Node worker). An altered scenario must fail, or the runner checks nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.scenario_runner import ScenarioFormatError, StepFailedError, check, run_scenario

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "conformance" / "scenarios").glob("*.json"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_the_python_worker_behaves_as_the_scenario_says(
    path: Path, redis_url: str, tmp_path: Path
) -> None:
    run_scenario(path, redis_url, tmp_path)


def test_a_scenario_whose_expected_state_was_altered_fails_naming_the_step(
    redis_url: str, tmp_path: Path
) -> None:
    scenario = json.loads((REPO / "conformance" / "scenarios" / "drain.json").read_text())
    [held] = [c for c in scenario["steps"][-1]["expect"] if c.get("task") == "held"]
    assert held["state"] == "pending"
    held["state"] = "done"
    altered = tmp_path / "drain.json"
    altered.write_text(json.dumps(scenario))
    with pytest.raises(StepFailedError) as failed:
        run_scenario(altered, redis_url, tmp_path)
    assert re.match(
        r'drain step \d+ \(expect\): \{"task": "held", "state": "done".*state is \'pending\'',
        str(failed.value),
    ), failed.value


def test_a_file_that_strays_from_the_format_is_refused_before_anything_runs() -> None:
    with pytest.raises(
        ScenarioFormatError, match=r"bad step 0 \(start\): unknown keys \['colour'\]"
    ):
        check({"format": 1, "doc": "", "queue": "q", "steps": [{"start": "a", "colour": 1}]}, "bad")
    with pytest.raises(ScenarioFormatError, match="a payload of the handler vocabulary expected"):
        check(
            {
                "format": 1,
                "doc": "",
                "queue": "q",
                "steps": [{"enqueue": "t", "payload": {"do": "x"}}],
            },
            "bad",
        )
    with pytest.raises(ScenarioFormatError, match="exactly one of"):
        check(
            {"format": 1, "doc": "", "queue": "q", "steps": [{"release": "g", "cancel": "t"}]}, "b"
        )
