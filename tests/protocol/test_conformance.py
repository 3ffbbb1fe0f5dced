"""The conformance vectors (conformance/) against a real redis-server: one test per case.

The runner reads the bundle's manifest and packs every call itself (no taskfleet op
builder), as a client in another language does with the same files.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from taskfleet.producer.encoding import encode_payload

from tests.conformance_format import Case, FormatError, Manifest, Step, load_cases
from tests.conformance_runner import (
    CaseError,
    ErrorReply,
    Mismatch,
    client_for,
    load_scripts,
    match,
    run_case,
)
from tests.fixtures_redis import RedisServer

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "conformance" / "cases"
MANIFEST = Manifest.load(
    REPO / "worker-image" / "taskfleet" / "protocol" / "bundle" / "manifest.json"
)


def _all_cases() -> list[Case]:
    return [case for path in sorted(CASES.glob("*.json")) for case in load_cases(path, MANIFEST)]


ALL = _all_cases()


@pytest.fixture(scope="module")
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    c = client_for(redis_server.url)
    try:
        load_scripts(c, MANIFEST)
        yield c
    finally:
        c.flushdb()
        c.close()


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_case(client: redis.Redis, case: Case) -> None:
    run_case(client, MANIFEST, case, encode_payload)


def test_every_script_of_the_manifest_is_called_by_a_case() -> None:
    called = {s.body["call"] for c in ALL for s in c.steps if s.kind == "call"}
    assert sorted(set(MANIFEST.scripts) - called) == []


def test_case_names_are_unique_across_files() -> None:
    names = [c.name for c in ALL]
    assert len(names) == len(set(names))


def _alter(m: Any) -> tuple[Any, bool]:
    """``m`` with its first literal string or integer changed (in matcher position)."""
    if isinstance(m, bool) or m is None:
        return m, False
    if isinstance(m, str):
        return m + "~", True
    if isinstance(m, int):
        return m + 1, True
    if isinstance(m, list):
        for i, item in enumerate(m):
            new, done = _alter(item)
            if done:
                return [*m[:i], new, *m[i + 1 :]], True
        return m, False
    if isinstance(m, dict):
        if "$split" in m:
            new, done = _alter(m["parts"])
            return {**m, "parts": new}, done
        if "$json" in m or "$subset" in m or "match" in m:
            key = "$json" if "$json" in m else "$subset" if "$subset" in m else "match"
            new, done = _alter(m[key])
            return {**m, key: new}, done
        if "$unordered" in m:
            return {"$unordered": [*m["$unordered"], "~"]}, True
        if any(k.startswith("$") for k in m):
            return m, False
        for key, item in m.items():
            new, done = _alter(item)
            if done:
                return {**m, key: new}, True
    return m, False


def _altered(case: Case) -> tuple[Case, int] | None:
    """The case with one literal of its last checked expectation changed, and that step."""
    for index in reversed(range(len(case.steps))):
        step = case.steps[index]
        if "expect" not in step.body:
            continue
        expect, done = _alter(step.body["expect"])
        if done:
            body = {**copy.deepcopy(step.body), "expect": expect}
            steps = list(case.steps)
            steps[index] = Step(kind=step.kind, body=body, where=step.where)
            return Case(file=case.file, id=case.id, queue=case.queue, steps=tuple(steps)), index
    return None


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_an_altered_expectation_fails_at_its_step(client: redis.Redis, case: Case) -> None:
    altered = _altered(case)
    assert altered is not None, "the case checks no literal value"
    changed, index = altered
    with pytest.raises(Mismatch) as failed:
        run_case(client, MANIFEST, changed, encode_payload)
    assert str(failed.value).startswith(case.steps[index].where + ":")


def _load(tmp_path: Path, steps: list[Any]) -> list[Case]:
    path = tmp_path / "bad.json"
    body = {
        "format": 1,
        "protocol": MANIFEST.protocol,
        "doc": "",
        "cases": [{"id": "c", "doc": "", "queue": "q", "steps": steps}],
    }
    path.write_text(json.dumps(body))
    return load_cases(path, MANIFEST)


def test_the_loader_refuses_an_unknown_step_kind_naming_the_kinds(tmp_path: Path) -> None:
    with pytest.raises(
        FormatError,
        match=r"bad/c step 0: a step has exactly one kind of call, "
        r"read, write, time, encode; found sleep",
    ):
        _load(tmp_path, [{"sleep": 1}])


def test_the_loader_refuses_an_argument_the_manifest_does_not_declare(tmp_path: Path) -> None:
    script = next(iter(MANIFEST.scripts))
    with pytest.raises(FormatError, match=r"no argument 'bogus'; declared: "):
        _load(tmp_path, [{"call": script, "args": {"bogus": "1"}, "records": [], "expect": 1}])


def test_the_loader_refuses_a_missing_required_argument(tmp_path: Path) -> None:
    name, _script = next(
        (n, s)
        for n, s in MANIFEST.scripts.items()
        if any(
            not a.get("optional")
            for a in s["args"]
            if a["name"] != (s.get("repeated") or {}).get("count")
        )
    )
    with pytest.raises(FormatError, match=r"required argument '\w+' missing"):
        _load(tmp_path, [{"call": name, "records": [], "expect": 1}])


def test_the_loader_refuses_an_unknown_matcher_and_unknown_keys(tmp_path: Path) -> None:
    read = ["LLEN", {"key": "pending"}]
    with pytest.raises(FormatError, match=r"unknown matcher '\$regex'"):
        _load(tmp_path, [{"read": read, "expect": {"$regex": "x"}}])
    with pytest.raises(FormatError, match=r"unknown key 'expected'"):
        _load(tmp_path, [{"read": read, "expect": 0, "expected": 0}])
    with pytest.raises(FormatError, match=r"write 0.5 as a string or a numeric matcher"):
        _load(tmp_path, [{"read": read, "expect": 0.5}])
    with pytest.raises(FormatError, match=r"write numbers with a fraction as strings"):
        _load(tmp_path, [{"write": ["HSET", {"key": "config"}, "backoff_jitter", 0.5]}])


def test_the_runner_reports_a_reference_to_a_name_never_captured(
    client: redis.Redis, tmp_path: Path
) -> None:
    (case,) = _load(tmp_path, [{"read": ["LLEN", {"key": "pending"}], "expect": {"$ref": "x"}}])
    with pytest.raises(CaseError, match="nothing captured under 'x'"):
        run_case(client, MANIFEST, case, encode_payload)


@pytest.mark.parametrize(
    ("expected", "actual"),
    [
        ("5", 5),  # a string never matches an integer reply, nor the reverse
        (5, b"5"),
        ({"a": "1"}, {"a": b"1", "b": b"2"}),  # a map literal names every key
        ({"$subset": {"b": {"$absent": True}}}, {"b": b"2"}),
        ({"$split": "\u0000", "parts": ["a", "b", "c"]}, b"a\x00b"),
        ({"$json": {"n": 1}}, b'{"n": 1, "m": 2}'),
        ({"$json": {"n": 1}}, b"{not json"),
        ({"$between": [1, 3]}, b"4"),
        ({"$eq": 1}, b"one"),
        ({"$unordered": ["a", "b"]}, [b"a", b"a"]),
        ("x", ErrorReply("ERR x")),
        ({"$error": "WRONGTYPE"}, b"WRONGTYPE"),
        ({"$any": "int"}, b"1"),
        (True, 1),
    ],
)
def test_matchers_are_strict(expected: Any, actual: Any) -> None:
    with pytest.raises(Mismatch):
        match(expected, actual, "reply", {})


def test_matchers_capture_and_compare_in_written_order() -> None:
    captures: dict[str, Any] = {}
    match(
        {"a": {"$capture": "t"}, "b": {"$eq": {"$add": [{"$ref": "t"}, 5]}}, "c": {"$ref": "t"}},
        {"a": b"10", "b": b"15", "c": b"10"},
        "reply",
        captures,
    )
    match({"$split": "\u0000", "parts": ["x", {"$hex": "00ff"}]}, b"x\x00\x00\xff", "reply", {})
    match({"$json": {"n": {"$gte": 2}, "ok": True}}, b'{"n": 2.0, "ok": true}', "reply", {})
    assert captures == {"t": b"10"}
