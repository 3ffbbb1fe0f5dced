"""The conformance vectors' file format (conformance/README.md), read strictly.

Every object of a case file is closed: an unknown key, an unknown step kind or matcher,
an argument the manifest does not declare, a missing required one, all fail the load
with one line saying where and what, before anything runs. Nothing of taskfleet is
imported: the manifest is read as plain JSON, as a runner in another language reads it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = 1
STEP_KINDS = ("call", "read", "write", "time", "encode")
#: What ``{"$float": ...}`` may name in an encode step's value (besides decimal text)
_FLOAT_WORDS = ("NaN", "Infinity", "-Infinity")
_DIGITS = re.compile(r"-?[0-9]+\Z")
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?\Z")


def check_payload_value(v: Any, where: str) -> None:
    """An encode step's value: JSON, with ``{"$int": "digits"}`` and ``{"$float": text}``
    for numbers JSON text cannot carry the same into every language."""
    if isinstance(v, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in v):
            if len(v) != 1 or not isinstance(next(iter(v.values())), str):
                raise FormatError(f'{where}: a tagged number is {{"$int"|"$float": TEXT}}')
            ((tag, text),) = v.items()
            if tag == "$int" and _DIGITS.match(text):
                return
            if tag == "$float" and (text in _FLOAT_WORDS or _DECIMAL.match(text)):
                return
            raise FormatError(f"{where}: not a tagged number: {v!r}")
        for key, item in v.items():
            check_payload_value(item, f"{where}.{key}")
    elif isinstance(v, list):
        for i, item in enumerate(v):
            check_payload_value(item, f"{where}[{i}]")
    elif isinstance(v, float):
        raise FormatError(f'{where}: write a fraction as {{"$float": "0.5"}}')


READS = frozenset(
    {"HGETALL", "HGET", "HEXISTS", "EXISTS", "GET", "TYPE", "ZRANGE", "ZSCORE", "ZCARD"}
    | {"LRANGE", "LLEN", "SMEMBERS", "SCARD", "PTTL", "XRANGE"}
)
WRITES = frozenset(
    {"HSET", "HDEL", "DEL", "ZADD", "ZREM", "SADD", "SREM", "SET", "RPUSH", "LPUSH", "XADD"}
)
ANY_TYPES = ("any", "string", "int", "array", "nil")
#: Each matcher's keys: the first names it, the rest are allowed (``match``) or required.
MATCHERS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "$any": (frozenset({"$any"}), frozenset()),
    "$hex": (frozenset({"$hex"}), frozenset()),
    "$eq": (frozenset({"$eq"}), frozenset()),
    "$gte": (frozenset({"$gte"}), frozenset()),
    "$lte": (frozenset({"$lte"}), frozenset()),
    "$between": (frozenset({"$between"}), frozenset()),
    "$capture": (frozenset({"$capture"}), frozenset({"match"})),
    "$ref": (frozenset({"$ref"}), frozenset()),
    "$split": (frozenset({"$split", "parts"}), frozenset()),
    "$json": (frozenset({"$json"}), frozenset()),
    "$unordered": (frozenset({"$unordered"}), frozenset()),
    "$subset": (frozenset({"$subset"}), frozenset()),
    "$absent": (frozenset({"$absent"}), frozenset()),
    "$error": (frozenset({"$error"}), frozenset()),
}
_CASE_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_QUEUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_HEX = re.compile(r"^(?:[0-9a-fA-F]{2})*$")


class FormatError(ValueError):
    """A case file that does not follow the format: where, and what to fix."""


@dataclass(frozen=True)
class Manifest:
    """What a runner uses of the bundle's manifest.json."""

    protocol: int
    key_prefix: str
    keys: tuple[dict[str, Any], ...]
    scripts: dict[str, dict[str, Any]]
    directory: Path

    @classmethod
    def load(cls, path: Path) -> Manifest:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return cls(
            protocol=raw["protocol"],
            key_prefix=raw["key_prefix"],
            keys=tuple(raw["keys"]),
            scripts=raw["scripts"],
            directory=path.parent,
        )

    def key_spec(self, name: str) -> dict[str, Any] | None:
        return next((k for k in self.keys if k["name"] == name), None)

    def key(self, queue: str, name: str, id_: bytes | None = None) -> bytes:
        spec = self.key_spec(name)
        assert spec is not None, name
        base: bytes = (self.key_prefix.replace("%QUEUE%", queue) + spec["suffix"]).encode()
        return base + (id_ or b"")

    def script_keys(self, queue: str, script: str) -> list[bytes]:
        """KEYS of a call of ``script``: the keys it uses, in its ``uses_keys`` order."""
        return [self.key(queue, name) for name in self.scripts[script]["uses_keys"]]


@dataclass(frozen=True)
class Step:
    kind: str  # one of STEP_KINDS
    body: dict[str, Any]  # the step as written
    where: str  # for messages: "<case> step <n> (<kind> <what>)"


@dataclass(frozen=True)
class Case:
    file: str  # the file's stem
    id: str
    queue: str
    steps: tuple[Step, ...]

    @property
    def name(self) -> str:
        return f"{self.file}/{self.id}"


def _closed(obj: Any, where: str, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise FormatError(f"{where}: expected an object, got {json.dumps(obj)[:60]}")
    missing = sorted(required - obj.keys())
    if missing:
        raise FormatError(f"{where}: missing {', '.join(missing)}")
    unknown = sorted(obj.keys() - required - optional)
    if unknown:
        raise FormatError(f"{where}: unknown key {', '.join(map(repr, unknown))}")
    return obj


def check_value(value: Any, where: str) -> None:
    """A VALUE: a string, an integer, or $hex / $ref / $add / $sub."""
    if isinstance(value, (bool, float)):
        raise FormatError(
            f"{where}: {value!r} is not a value; write numbers with a fraction as strings"
        )
    if isinstance(value, (str, int)):
        return
    if isinstance(value, dict) and len(value) == 1:
        ((op, arg),) = value.items()
        if op == "$hex" and isinstance(arg, str) and _HEX.match(arg):
            return
        if op == "$ref" and isinstance(arg, str) and _NAME.match(arg):
            return
        if op == "$add" and isinstance(arg, list) and arg:
            for i, term in enumerate(arg):
                check_value(term, f"{where}.$add[{i}]")
            return
        if op == "$sub" and isinstance(arg, list) and len(arg) == 2:
            check_value(arg[0], f"{where}.$sub[0]")
            check_value(arg[1], f"{where}.$sub[1]")
            return
    raise FormatError(
        f"{where}: not a value (a string, an integer, $hex, $ref, $add or $sub): {value!r}"
    )


def check_matcher(m: Any, where: str) -> None:
    """A MATCHER: a literal, a list or map of matchers, or one of MATCHERS."""
    if m is None or isinstance(m, (str, bool, int)):
        return
    if isinstance(m, float):
        raise FormatError(f"{where}: write {m!r} as a string or a numeric matcher")
    if isinstance(m, list):
        for i, item in enumerate(m):
            check_matcher(item, f"{where}[{i}]")
        return
    if not isinstance(m, dict):
        raise FormatError(f"{where}: not a matcher: {m!r}")
    ops = [k for k in m if k.startswith("$")]
    if not ops:
        _check_fields(m, where)
        return
    op = ops[0]
    if op not in MATCHERS:
        raise FormatError(f"{where}: unknown matcher {op!r}; known: {', '.join(MATCHERS)}")
    required, optional = MATCHERS[op]
    _closed(m, where, set(required), set(optional))
    arg = m[op]
    if op == "$any" and arg not in ANY_TYPES:
        raise FormatError(f"{where}: $any takes one of {', '.join(ANY_TYPES)}, not {arg!r}")
    elif op == "$hex" and not (isinstance(arg, str) and _HEX.match(arg)):
        raise FormatError(f"{where}: $hex takes an even number of hex digits")
    elif op in ("$eq", "$gte", "$lte"):
        check_value(arg, f"{where}.{op}")
    elif op == "$between":
        if not (isinstance(arg, list) and len(arg) == 2):
            raise FormatError(f"{where}: $between takes [low, high]")
        check_value(arg[0], f"{where}.$between[0]")
        check_value(arg[1], f"{where}.$between[1]")
    elif op in ("$capture", "$ref"):
        if not (isinstance(arg, str) and _NAME.match(arg)):
            raise FormatError(f"{where}: {op} takes a name ([a-z_][a-z0-9_]*), not {arg!r}")
        if "match" in m:
            check_matcher(m["match"], f"{where}.match")
    elif op == "$split":
        parts = m["parts"]
        if not (isinstance(arg, str) and arg and isinstance(parts, list) and parts):
            raise FormatError(f"{where}: $split takes a separator string and a list of parts")
        check_matcher(parts, f"{where}.parts")
    elif op == "$json":
        check_matcher(arg, f"{where}.$json")
    elif op == "$unordered":
        if not isinstance(arg, list) or not all(
            isinstance(x, (str, int)) and not isinstance(x, bool) for x in arg
        ):
            raise FormatError(f"{where}: $unordered takes a list of strings or integers")
    elif op == "$subset":
        if not isinstance(arg, dict):
            raise FormatError(f"{where}: $subset takes an object")
        _check_fields(arg, f"{where}.$subset")
    elif op == "$absent":
        raise FormatError(f"{where}: $absent stands only as a value in an object")
    elif op == "$error" and not isinstance(arg, str):
        raise FormatError(f"{where}: $error takes the text the error message contains")


def _check_fields(obj: dict[str, Any], where: str) -> None:
    for key, value in obj.items():
        if key.startswith("$"):
            raise FormatError(f"{where}: a map key may not start with '$': {key!r}")
        if isinstance(value, dict) and "$absent" in value:
            _closed(value, f"{where}.{key}", {"$absent"}, set())
            if value["$absent"] is not True:
                raise FormatError(f'{where}.{key}: write {{"$absent": true}}')
            continue
        check_matcher(value, f"{where}.{key}")


def _check_args(
    given: Any, declared: list[dict[str, Any]], where: str, skip: str | None = None
) -> None:
    if not isinstance(given, dict):
        raise FormatError(f"{where}: expected an object of named arguments")
    names = {a["name"] for a in declared}
    for name in given:
        if name == skip:
            raise FormatError(f"{where}: {name!r} is the records' count: the runner sends it")
        if name not in names:
            raise FormatError(
                f"{where}: no argument {name!r}; declared: {', '.join(sorted(names))}"
            )
    for arg in declared:
        name = arg["name"]
        if name == skip:
            continue
        if given.get(name) is None:
            if not arg.get("optional") and name not in given:
                raise FormatError(f"{where}: required argument {name!r} missing")
            if not arg.get("optional"):
                raise FormatError(f"{where}: required argument {name!r} is null")
            continue
        check_value(given[name], f"{where}.{name}")


def _check_keyref(ref: Any, manifest: Manifest, where: str) -> None:
    _closed(ref, where, {"key"}, {"id"})
    spec = manifest.key_spec(ref["key"])
    if spec is None:
        known = ", ".join(k["name"] for k in manifest.keys)
        raise FormatError(f"{where}: no key {ref['key']!r} in the manifest; known: {known}")
    if spec.get("is_prefix") and "id" not in ref:
        raise FormatError(f"{where}: key {ref['key']!r} is a prefix: give its id")
    if not spec.get("is_prefix") and "id" in ref:
        raise FormatError(f"{where}: key {ref['key']!r} is no prefix: it takes no id")
    if "id" in ref:
        check_value(ref["id"], f"{where}.id")


def _check_step(step: Any, manifest: Manifest, where: str) -> Step:
    if not isinstance(step, dict):
        raise FormatError(f"{where}: a step is an object")
    kinds = [k for k in STEP_KINDS if k in step]
    if len(kinds) != 1:
        others = sorted(k for k in step if k not in ("args", "records", "expect", "doc"))
        raise FormatError(
            f"{where}: a step has exactly one kind of {', '.join(STEP_KINDS)}; "
            f"found {', '.join(kinds + others) or 'none'}"
        )
    kind = kinds[0]
    if kind == "call":
        _closed(step, where, {"call", "expect"}, {"args", "records", "doc"})
        script = manifest.scripts.get(step["call"])
        if script is None:
            raise FormatError(f"{where}: no script {step['call']!r} in the manifest")
        where = f"{where} (call {step['call']})"
        repeated = script.get("repeated")
        _check_args(
            step.get("args", {}),
            script["args"],
            f"{where}.args",
            repeated["count"] if repeated else None,
        )
        if repeated:
            records = step.get("records")
            if not isinstance(records, list):
                raise FormatError(f"{where}: the script takes records: give a list (maybe empty)")
            for i, record in enumerate(records):
                _check_args(record, repeated["fields"], f"{where}.records[{i}]")
        elif "records" in step:
            raise FormatError(f"{where}: {step['call']} takes no records")
        check_matcher(step["expect"], f"{where}.expect")
    elif kind in ("read", "write"):
        allowed = READS if kind == "read" else WRITES
        required = {kind, "expect"} if kind == "read" else {kind}
        _closed(step, where, required, {"expect", "doc"})
        command = step[kind]
        if not (isinstance(command, list) and len(command) >= 2 and command[0] in allowed):
            raise FormatError(
                f"{where}: {kind} takes [COMMAND, KEYREF, ...] with COMMAND one of "
                f"{' '.join(sorted(allowed))}"
            )
        where = f"{where} ({kind} {command[0]})"
        _check_keyref(command[1], manifest, f"{where}[1]")
        for i, value in enumerate(command[2:], start=2):
            check_value(value, f"{where}[{i}]")
        if "expect" in step:
            check_matcher(step["expect"], f"{where}.expect")
    elif kind == "encode":
        _closed(step, where, {"encode", "expect"}, {"doc"})
        if not isinstance(step["encode"], dict):
            raise FormatError(f"{where}: encode takes a payload (a JSON object)")
        check_payload_value(step["encode"], f"{where}.encode")
        check_matcher(step["expect"], f"{where}.expect")
    else:
        _closed(step, where, {"time"}, {"doc"})
        if not (isinstance(step["time"], str) and _NAME.match(step["time"])):
            raise FormatError(f"{where}: time takes a name to capture the time under")
    return Step(kind=kind, body=step, where=where)


def load_cases(path: Path, manifest: Manifest) -> list[Case]:
    """The cases of one file, checked against the format and the manifest."""
    where = path.name
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise FormatError(f"{where}: not JSON: {exc}") from None
    _closed(raw, where, {"format", "protocol", "doc", "cases"}, set())
    if raw["format"] != FORMAT:
        raise FormatError(f"{where}: format {raw['format']!r}; this runner reads {FORMAT}")
    if raw["protocol"] != manifest.protocol:
        raise FormatError(
            f"{where}: written for protocol {raw['protocol']!r}, "
            f"the manifest's is {manifest.protocol}"
        )
    cases: list[Case] = []
    seen: set[str] = set()
    for n, case in enumerate(raw["cases"]):
        cwhere = f"{where}: cases[{n}]"
        _closed(case, cwhere, {"id", "doc", "queue", "steps"}, set())
        if not (isinstance(case["id"], str) and _CASE_ID.match(case["id"])):
            raise FormatError(f"{cwhere}: id must match [a-z0-9][a-z0-9-]*")
        if case["id"] in seen:
            raise FormatError(f"{cwhere}: id {case['id']!r} twice in the file")
        seen.add(case["id"])
        if not (isinstance(case["queue"], str) and _QUEUE.match(case["queue"])):
            raise FormatError(f"{cwhere}: not a queue name: {case['queue']!r}")
        if not isinstance(case["steps"], list) or not case["steps"]:
            raise FormatError(f"{cwhere}: steps must be a non-empty list")
        name = f"{path.stem}/{case['id']}"
        steps = tuple(
            _check_step(step, manifest, f"{name} step {i}") for i, step in enumerate(case["steps"])
        )
        cases.append(Case(file=path.stem, id=case["id"], queue=case["queue"], steps=steps))
    return cases
