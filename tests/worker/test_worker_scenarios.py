"""The worker-behaviour scenarios (conformance/scenarios/) with the Python worker: one test
per file, each file run unchanged (clients/node/test/scenarios.test.ts runs the same files
with the Node worker). An altered scenario must fail, or the runner checks nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.scenario_runner import (
    BEHAVIOURS,
    CONDITIONS,
    STEPS,
    ScenarioFormatError,
    StepFailedError,
    check,
    run_scenario,
)

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


def test_any_holds_when_one_of_its_conditions_does_and_names_each_when_none_does(
    redis_url: str, tmp_path: Path
) -> None:
    def scenario(*pending: int) -> Path:
        path = tmp_path / f"any{len(pending)}{pending[0]}.json"
        either = {"any": [{"stats": {"pending": n}} for n in pending]}
        steps = [{"enqueue": "t1", "payload": {"do": "succeed", "result": 1}}, {"expect": [either]}]
        path.write_text(json.dumps({"format": 1, "doc": "", "queue": "q", "steps": steps}))
        return path

    run_scenario(scenario(2, 1), redis_url, tmp_path)  # no worker: one task pending
    with pytest.raises(StepFailedError) as failed:
        run_scenario(scenario(2, 3), redis_url, tmp_path)
    assert "none holds" in str(failed.value), failed.value
    assert "found {'pending': 1}; " in str(failed.value), failed.value
    with pytest.raises(ScenarioFormatError, match="2 or more conditions expected"):
        check({"format": 1, "doc": "", "queue": "q", "steps": [{"expect": [{"any": []}]}]}, "b")
    with pytest.raises(ScenarioFormatError, match=r"condition 0 any condition 1: exactly one of"):
        nested = {"any": [{"stats": {"pending": 1}}, {"colour": 1}]}
        check({"format": 1, "doc": "", "queue": "q", "steps": [{"expect": [nested]}]}, "b")


def _names(pattern: str, text: str) -> set[str]:
    return set(re.findall(pattern, text, flags=re.MULTILINE))


def _block(text: str, opening: str) -> str:
    return text.split(opening, 1)[1].split("};", 1)[0]


def test_both_runners_both_handlers_and_the_format_page_name_the_same_vocabulary() -> None:
    """A step, condition or behaviour one language lacks would fail only its scenarios'
    run; here it fails by name."""
    page = (REPO / "conformance" / "scenarios" / "README.md").read_text()
    steps_page, conditions_page = page.split("## Steps", 1)[1].split("## Conditions", 1)
    node = (REPO / "clients" / "node" / "test" / "scenarios.ts").read_text()
    node_handler = REPO / "clients" / "node" / "test" / "fixtures" / "scenario_handlers.mjs"
    python_handler = REPO / "tests" / "workers" / "scenario_handlers.py"

    assert _names(r'^\| `\{"(\w+)"', steps_page) == set(STEPS)
    assert _names(r'^\| `\{"(\w+)"', conditions_page) == set(CONDITIONS)
    assert _names(r"^  (\w+): \[", _block(node, "const STEPS: Kinds = {")) == set(STEPS)
    assert _names(r"^  (\w+): \[", _block(node, "const CONDITIONS: Kinds = {")) == set(CONDITIONS)

    assert _names(r'^\| `\{"do": "(\w+)"', page) == set(BEHAVIOURS)
    node_behaviours = _block(node, "const BEHAVIOURS: Record<string, string[]> = {")
    assert _names(r"(\w+): \[", node_behaviours) == set(BEHAVIOURS)
    assert _names(r'case "(\w+)":', node_handler.read_text()) == set(BEHAVIOURS)
    assert _names(r'do == "(\w+)"', python_handler.read_text()) == set(BEHAVIOURS)
