"""Runs the conformance vectors (conformance/README.md) against a real redis-server.

A runner as any language would write one: it reads the bundle's manifest, loads each
script's bytes, packs every call's ARGV from the manifest's argument declarations and
matches replies and stored records. Nothing of taskfleet is imported: the client's payload
writer, which ``encode`` steps check, is handed in by the caller.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from tests.conformance_format import READS, WRITES, Case, Manifest, Step


class Mismatch(AssertionError):  # noqa: N818 (what a failed case reports)
    """A step whose reply is not what its case expects."""


class CaseError(Exception):
    """A case that cannot run as written (a $ref to a name never captured, ...)."""


@dataclass(frozen=True)
class ErrorReply:
    message: str


def _raw(response: Any, **_options: Any) -> Any:
    return response


def client_for(url: str) -> redis.Redis:
    """A client that hands back replies as Redis sends them (bytes, RESP2, no parsing)."""
    client = redis.Redis.from_url(url, decode_responses=False, protocol=2)
    for command in (*READS, *WRITES, "TIME", "EVALSHA", "SCRIPT LOAD"):
        client.set_response_callback(command, _raw)
    return client


def load_scripts(client: redis.Redis, manifest: Manifest) -> None:
    """Every script of the manifest, loaded; its SHA1 checked against the manifest."""
    for name, script in manifest.scripts.items():
        body = (manifest.directory / script["file"]).read_bytes()
        digest = hashlib.sha1(body).hexdigest()
        if digest != script["sha1"]:
            raise CaseError(
                f"{name}: the file's SHA1 is {digest}, the manifest says {script['sha1']}"
            )
        loaded = client.execute_command("SCRIPT LOAD", body)  # type: ignore[no-untyped-call]
        if (loaded.decode() if isinstance(loaded, bytes) else loaded) != digest:
            raise CaseError(f"{name}: Redis loaded it as {loaded!r}, not {digest}")


# -- values -----------------------------------------------------------------------------


def _text(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value).encode()
    raise CaseError(f"{value!r} is not a string or an integer")


def value(v: Any, captures: dict[str, Any]) -> bytes:
    """A VALUE of the format, as the bytes sent."""
    if isinstance(v, dict):
        ((op, arg),) = v.items()
        if op == "$hex":
            return bytes.fromhex(arg)
        if op == "$ref":
            return _text(_captured(arg, captures))
        return str(integer(v, captures)).encode()  # $add, $sub
    return _text(v)


def integer(v: Any, captures: dict[str, Any]) -> int:
    """A VALUE read as an integer ($add sums its terms, $sub takes the second from the first)."""
    if isinstance(v, dict) and "$add" in v:
        return sum(integer(term, captures) for term in v["$add"])
    if isinstance(v, dict) and "$sub" in v:
        return integer(v["$sub"][0], captures) - integer(v["$sub"][1], captures)
    text = value(v, captures)
    try:
        return int(text)
    except ValueError:
        raise CaseError(f"{text!r} is not an integer") from None


def _captured(name: str, captures: dict[str, Any]) -> Any:
    if name not in captures:
        raise CaseError(f"nothing captured under {name!r} yet")
    return captures[name]


# -- matching ---------------------------------------------------------------------------


def _show(x: Any) -> str:
    if isinstance(x, bytes):
        return repr(x)[1:] if len(x) < 200 else repr(x[:200])[1:] + "..."
    if isinstance(x, ErrorReply):
        return f"error {x.message!r}"
    return json.dumps(x, default=repr)[:300]


def _fail(path: str, expected: Any, actual: Any) -> Mismatch:
    return Mismatch(f"at {path}: expected {_show(expected)}, got {_show(actual)}")


def _number(actual: Any) -> float | int | None:
    if isinstance(actual, bool):
        return None
    if isinstance(actual, (int, float)):
        return actual
    if isinstance(actual, (bytes, str)):
        text = actual.decode(errors="replace") if isinstance(actual, bytes) else actual
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _as_text(x: Any) -> Any:
    if isinstance(x, list):
        return [_as_text(item) for item in x]
    if x is None or isinstance(x, (ErrorReply, dict, bool)):
        return x
    return _text(x)


def _map(actual: Any) -> dict[str, Any] | None:
    if not isinstance(actual, dict):
        return None
    return {
        k.decode(errors="surrogateescape") if isinstance(k, bytes) else k: v
        for k, v in actual.items()
    }


def _fields(
    expected: dict[str, Any],
    actual: dict[str, Any],
    path: str,
    captures: dict[str, Any],
    exact: bool,
) -> None:
    for key, want in expected.items():
        if isinstance(want, dict) and "$absent" in want:
            if key in actual:
                raise _fail(f"{path}.{key}", "absent", actual[key])
            continue
        if key not in actual:
            raise _fail(f"{path}.{key}", want, "absent")
        match(want, actual[key], f"{path}.{key}", captures)
    if exact:
        extra = sorted(set(actual) - set(expected))
        if extra:
            raise Mismatch(f"at {path}: unexpected {', '.join(extra)} in {_show(actual)}")


def match(expected: Any, actual: Any, path: str, captures: dict[str, Any]) -> None:
    """Raises Mismatch unless ``actual`` is what ``expected`` (a MATCHER) describes."""
    if isinstance(actual, ErrorReply) and not (isinstance(expected, dict) and "$error" in expected):
        raise _fail(path, expected, actual)
    if expected is None or isinstance(expected, bool):
        if actual is not expected:
            raise _fail(path, expected, actual)
    elif isinstance(expected, str):
        if _as_text(actual) != expected.encode() or not isinstance(actual, (bytes, str)):
            raise _fail(path, expected, actual)
    elif isinstance(expected, int):
        if isinstance(actual, bool) or not isinstance(actual, (int, float)) or actual != expected:
            raise _fail(path, expected, actual)
    elif isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            raise _fail(path, expected, actual)
        for i, (want, got) in enumerate(zip(expected, actual, strict=True)):
            match(want, got, f"{path}[{i}]", captures)
    elif not any(k.startswith("$") for k in expected):
        got = _map(actual)
        if got is None:
            raise _fail(path, expected, actual)
        _fields(expected, got, path, captures, exact=True)
    else:
        _match_op(expected, actual, path, captures)


def _match_op(m: dict[str, Any], actual: Any, path: str, captures: dict[str, Any]) -> None:
    op = next(k for k in m if k.startswith("$"))
    arg = m[op]
    if op == "$any":
        kinds = {
            "any": True,
            "string": isinstance(actual, (bytes, str)),
            "int": isinstance(actual, int) and not isinstance(actual, bool),
            "array": isinstance(actual, list),
            "nil": actual is None,
        }
        if not kinds[arg]:
            raise _fail(path, m, actual)
    elif op == "$hex":
        if not isinstance(actual, (bytes, str)) or _text(actual) != bytes.fromhex(arg):
            raise _fail(path, m, actual)
    elif op in ("$eq", "$gte", "$lte", "$between"):
        number = _number(actual)
        bounds = arg if op == "$between" else [arg, arg]
        low, high = (integer(b, captures) for b in bounds)
        ok = number is not None and {
            "$eq": lambda n: n == low,
            "$gte": lambda n: n >= low,
            "$lte": lambda n: n <= high,
            "$between": lambda n: low <= n <= high,
        }[op](number)
        if not ok:
            shown = {op: [low, high] if op == "$between" else low}
            raise _fail(path, shown, actual)
    elif op == "$capture":
        if arg in captures:
            raise CaseError(f"{arg!r} captured twice")
        if "match" in m:
            match(m["match"], actual, path, captures)
        captures[arg] = actual
    elif op == "$ref":
        want = _captured(arg, captures)
        if _as_text(want) != _as_text(actual):
            raise _fail(path, want, actual)
    elif op == "$split":
        parts = m["parts"]
        if not isinstance(actual, (bytes, str)):
            raise _fail(path, m, actual)
        pieces = _text(actual).split(arg.encode(), len(parts) - 1)
        if len(pieces) != len(parts):
            raise Mismatch(
                f"at {path}: expected {len(parts)} parts split at {arg!r}, got {pieces!r}"
            )
        for i, (want, got) in enumerate(zip(parts, pieces, strict=True)):
            match(want, got, f"{path}.part[{i}]", captures)
    elif op == "$json":
        try:
            parsed = json.loads(_text(actual))
        except (CaseError, ValueError):
            raise _fail(path, m, actual) from None
        match(arg, parsed, f"{path}.json", captures)
    elif op == "$unordered":
        if not isinstance(actual, list) or sorted(map(_as_text, actual)) != sorted(
            _text(x) for x in arg
        ):
            raise _fail(path, m, actual)
    elif op == "$subset":
        mapped = _map(actual)
        if mapped is None:
            raise _fail(path, m, actual)
        _fields(arg, mapped, path, captures, exact=False)
    elif op == "$error":
        if not isinstance(actual, ErrorReply) or arg not in actual.message:
            raise _fail(path, m, actual)
    else:  # the loader refuses any other
        raise CaseError(f"unknown matcher {op}")


# -- running ----------------------------------------------------------------------------


def _command(client: redis.Redis, *args: Any) -> Any:
    try:
        return client.execute_command(*args)  # type: ignore[no-untyped-call]
    except redis.ResponseError as exc:
        return ErrorReply(str(exc))


def call_argv(manifest: Manifest, step: Step, captures: dict[str, Any]) -> list[bytes]:
    """A call's ARGV: the declared arguments in order, then each record's fields."""
    script = manifest.scripts[step.body["call"]]
    repeated = script.get("repeated")
    records = step.body.get("records", [])
    args = step.body.get("args", {})
    argv: list[bytes] = []
    for arg in script["args"]:
        if repeated and arg["name"] == repeated["count"]:
            argv.append(str(len(records)).encode())
        else:
            given = args.get(arg["name"])
            argv.append(b"" if given is None else value(given, captures))
    for record in records:
        for field in repeated["fields"] if repeated else ():
            given = record.get(field["name"])
            argv.append(b"" if given is None else value(given, captures))
    return argv


def _evalsha(
    client: redis.Redis, manifest: Manifest, case: Case, step: Step, captures: dict[str, Any]
) -> Any:
    script = manifest.scripts[step.body["call"]]
    keys = manifest.script_keys(case.queue, step.body["call"])
    argv = call_argv(manifest, step, captures)
    reply = _command(client, "EVALSHA", script["sha1"], len(keys), *keys, *argv)
    if isinstance(reply, ErrorReply) and reply.message.startswith("NOSCRIPT"):
        load_scripts(client, manifest)
        reply = _command(client, "EVALSHA", script["sha1"], len(keys), *keys, *argv)
    return reply


def _raw_command(
    client: redis.Redis, manifest: Manifest, case: Case, step: Step, captures: dict[str, Any]
) -> Any:
    command = step.body[step.kind]
    ref = command[1]
    id_ = value(ref["id"], captures) if "id" in ref else None
    key = manifest.key(case.queue, ref["key"], id_)
    reply = _command(client, command[0], key, *(value(v, captures) for v in command[2:]))
    if command[0] == "HGETALL" and isinstance(reply, list):
        return {
            reply[i].decode(errors="surrogateescape"): reply[i + 1] for i in range(0, len(reply), 2)
        }
    return reply


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.execute_command("TIME")  # type: ignore[no-untyped-call]
    return int(seconds) * 1000 + int(micros) // 1000


def payload_value(v: Any) -> Any:
    """An encode step's value in this language: ``{"$int": "digits"}`` an int (exact here),
    ``{"$float": text}`` a float (``NaN``, ``Infinity``, ``1e400`` overflowing to one)."""
    if isinstance(v, dict):
        if len(v) == 1 and "$int" in v:
            return int(v["$int"])
        if len(v) == 1 and "$float" in v:
            return float(v["$float"])
        return {k: payload_value(item) for k, item in v.items()}
    if isinstance(v, list):
        return [payload_value(item) for item in v]
    return v


#: A client's payload writer: the stored text, or an exception saying why not.
Encoder = Callable[[Any], str]


def _encode(encode: Encoder | None, step: Step) -> Any:
    if encode is None:
        raise CaseError("encode steps need the client's payload writer (run_case's encode)")
    try:
        return encode(payload_value(step.body["encode"])).encode()
    except Exception as exc:  # the client's refusal is the reply, matched by $error
        return ErrorReply(str(exc))


def run_case(
    client: redis.Redis, manifest: Manifest, case: Case, encode: Encoder | None = None
) -> None:
    """Runs ``case`` on a flushed database; raises Mismatch naming the step that differs.
    ``encode``: the client's payload writer, for the steps that check it (``encode``)."""
    client.flushdb()
    captures: dict[str, Any] = {}
    for step in case.steps:
        try:
            if step.kind == "time":
                captures_name = step.body["time"]
                if captures_name in captures:
                    raise CaseError(f"{captures_name!r} captured twice")
                captures[captures_name] = server_ms(client)
                continue
            if step.kind == "call":
                reply = _evalsha(client, manifest, case, step, captures)
            elif step.kind == "encode":
                reply = _encode(encode, step)
            else:
                reply = _raw_command(client, manifest, case, step, captures)
            if "expect" in step.body:
                match(step.body["expect"], reply, "reply", captures)
            elif isinstance(reply, ErrorReply):
                raise Mismatch(f"an error: {reply.message}")
        except Mismatch as exc:
            raise Mismatch(f"{step.where}: {exc}") from None
        except CaseError as exc:
            raise CaseError(f"{step.where}: {exc}") from None
