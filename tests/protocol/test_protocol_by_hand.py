"""docs/protocol.md, by hand: an enqueue -> claim -> complete cycle driven with raw
``EVALSHA`` calls built from the bundle's manifest and the spec's encodings alone.

What a client in another language would do: read ``manifest.json`` and the bundle's
``.lua`` files, ``SCRIPT LOAD`` them, lay out KEYS and ARGV as the manifest declares, encode
values as docs/protocol.md says, and check the replies and the stored records against it.
No module of taskfleet is imported for that. The pytest process has taskfleet loaded (the
shared fixtures import it), so the cycle runs in a fresh interpreter (``python -I``, with
this very file as its script), which checks before it exits that no taskfleet module was
imported. Only the standard library and a generic Redis client drive the protocol.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "worker-image" / "taskfleet" / "protocol" / "bundle"
QUEUE = "by-hand"
#: The drive's deadline: a hung server fails the test instead of hanging it.
DRIVE_TIMEOUT_S = 120
OURS = ("taskfleet", "taskfleet_operator")


# -- the client, from the manifest ---------------------------------------------------------


def encode(value: Any, kind: str) -> str | bytes:
    """One argument as docs/protocol.md encodes it: decimal text, JSON text, or as is."""
    if kind == "int":
        assert isinstance(value, int) and not isinstance(value, bool), value
        return str(value)
    if kind == "number":
        assert isinstance(value, int | float) and not isinstance(value, bool), value
        return str(value)
    if kind in ("string", "json", "bytes"):
        assert isinstance(value, str | bytes), value
        return value
    raise AssertionError(f"an argument type the spec does not describe: {kind!r}")


def canonical(value: Any) -> str:
    """A payload's canonical JSON text (docs/protocol.md 4.3): compact, keys sorted,
    non-ASCII as itself."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


class Protocol:
    """The queue's scripts as the manifest describes them, called with raw EVALSHA."""

    def __init__(self, client: Any, queue: str) -> None:
        self.client = client
        self.manifest: dict[str, Any] = json.loads((BUNDLE / "manifest.json").read_text())
        prefix = self.manifest["key_prefix"].replace("%QUEUE%", queue)
        # a prefix key as the prefix
        self.key = {key["name"]: prefix + key["suffix"] for key in self.manifest["keys"]}
        self.sha: dict[str, str] = {}

    def load(self, name: str) -> None:
        script = self.manifest["scripts"][name]
        body = (BUNDLE / script["file"]).read_bytes()
        assert hashlib.sha1(body).hexdigest() == script["sha1"], f"{name}: sha1 of the file"
        answered = self.client.execute_command("SCRIPT", "LOAD", body)
        assert text(answered) == script["sha1"], f"{name}: sha1 the server answered"
        self.sha[name] = script["sha1"]

    def argv(
        self, name: str, args: Mapping[str, Any], records: Iterable[Mapping[str, Any]] = ()
    ) -> list[str | bytes]:
        """ARGV in the manifest's order: named arguments (optional ones "" when absent),
        then the repeated records, their count in the argument the manifest names."""
        script = self.manifest["scripts"][name]
        records = list(records)
        repeated = script["repeated"]
        count = repeated["count"] if repeated else None
        declared = {arg["name"] for arg in script["args"]}
        assert set(args) <= declared, f"{name}: not arguments of it: {set(args) - declared}"
        out: list[str | bytes] = []
        for arg in script["args"]:
            if arg["name"] == count:
                out.append(str(len(records)))
            else:
                out.append(_value(name, arg, args))
        if records:
            assert repeated is not None, f"{name} takes no records"
            fields = {field["name"] for field in repeated["fields"]}
            for record in records:
                assert set(record) <= fields, f"{name}: not record fields: {set(record) - fields}"
                out += [_value(name, field, record) for field in repeated["fields"]]
        return out

    def call(
        self, name: str, args: Mapping[str, Any], records: Iterable[Mapping[str, Any]] = ()
    ) -> Any:
        if name not in self.sha:
            self.load(name)
        argv = self.argv(name, args, records)
        # a script gets the keys it uses, in its uses_keys order
        keys = [self.key[k] for k in self.manifest["scripts"][name]["uses_keys"]]
        return self.client.execute_command("EVALSHA", self.sha[name], len(keys), *keys, *argv)

    def task(self, task_id: str) -> dict[str, str]:
        raw = self.client.hgetall(self.key["task"] + task_id)
        return {text(k): text(v) for k, v in raw.items()}


def _value(script: str, arg: Mapping[str, Any], given: Mapping[str, Any]) -> str | bytes:
    if arg["name"] in given:
        return encode(given[arg["name"]], arg["type"])
    assert arg["optional"], f"{script}: {arg['name']} is required"
    return ""


def expect(actual: Any, expected: Any, what: str) -> None:
    """``actual == expected``, or an error that shows both (no pytest rewriting here)."""
    if actual != expected:
        raise AssertionError(f"{what}: got {actual!r}, expected {expected!r}")


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def server_ms(client: Any) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


# -- the cycle ------------------------------------------------------------------------------


def drive(url: str) -> None:
    import redis  # a generic client: any language's would do

    client = redis.Redis.from_url(url)
    try:
        cycle(Protocol(client, QUEUE), client)
    finally:
        client.close()
    loaded = sorted(
        m for m in sys.modules if m in OURS or m.startswith(tuple(p + "." for p in OURS))
    )
    assert loaded == [], f"taskfleet modules were imported: {loaded}"


def cycle(p: Protocol, client: Any) -> None:
    assert isinstance(p.manifest["protocol"], int) and p.manifest["protocol"] >= 1
    before = server_ms(client)

    # -- enqueue: a plain task and a named one (docs/protocol.md 4.3, 6) -------------------
    plain = canonical({"n": 1, "b": [1, 2]})
    assert plain == '{"b":[1,2],"n":1}'
    named_json = canonical({"w": 2, "title": "café"})
    named = "\x01resize\x01" + named_json
    trace = canonical({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
    plain_task = {"task_id": "t-plain", "payload": plain, "priority": 0, "delay_ms": 0, "cost": 1}
    named_task = {
        "task_id": "t-named",
        "payload": named,
        "priority": 5,
        "delay_ms": 0,
        "cost": 2,
        "max_attempts": 7,
        "timeout_s": 12.5,
    }
    expect(p.call("enqueue", {"trace": trace}, [plain_task, named_task]), [1, 1, 1], "enqueue")
    after = server_ms(client)

    stored = p.task("t-plain")
    assert stored["state"] == "pending"
    assert stored["id"] == "t-plain" and stored["payload"] == plain
    counts = {name: stored[name] for name in ("priority", "attempts", "lost", "cost")}
    assert counts == {"priority": "0", "attempts": "0", "lost": "0", "cost": "1"}
    assert stored["max_attempts"] == "3", "the queue's default, copied at enqueue"
    assert "timeout" not in stored and "deadline" not in stored
    assert before <= int(stored["created_at"]) <= after
    assert stored["run_at"] == stored["created_at"]
    assert stored["trace"] == trace
    named_raw = client.hget(p.key["task"] + "t-named", "payload")
    assert named_raw == named.encode(), "name framing: \\x01 name \\x01 then the JSON, UTF-8"
    stored = p.task("t-named")
    assert (stored["max_attempts"], stored["timeout"], stored["cost"]) == ("7", "12.5", "2")

    # pending order (4.2): score = -priority * 1e12 + 5e11 + seq; seq from INCR
    assert text(client.get(p.key["seq"])) == "2"
    assert client.zrange(p.key["pending"], 0, -1, withscores=True) == [
        (b"t-named", -5 * 10**12 + 5 * 10**11 + 2),
        (b"t-plain", 5 * 10**11 + 1),
    ]
    assert text(client.hget(p.key["stats"], "enqueued")) == "2"
    assert client.llen(p.key["notify"]) == 2, "one wake-up token per new pending task"
    assert client.llen(p.key["demand"]) == 1, "at most one element"

    # -- duplicate ids and refusals (7.2): nothing of a refused call is stored -------------
    expect(p.call("enqueue", {}, [plain_task]), [1, 0], "the same task: a duplicate")
    expect(
        p.call("enqueue", {}, [plain_task, {**plain_task, "payload": "{}"}]), [-3, 2], "an id twice"
    )
    expect(
        p.call("enqueue", {}, [{**plain_task, "payload": "{}"}]), [-2, 1, b"payload"], "conflict"
    )
    renamed = {**named_task, "payload": "\x01crop\x01" + named_json}
    expect(p.call("enqueue", {}, [renamed]), [-2, 1, b"name"], "another name")
    expect(p.call("enqueue", {}, [{**plain_task, "priority": 1}]), [-2, 1, b"priority"], "conflict")
    client.hset(p.key["config"], "max_payload_bytes", "10")  # the config hash's one writer
    big = {**plain_task, "task_id": "t-big", "payload": canonical({"x": "y" * 20})}
    expect(p.call("enqueue", {}, [big]), [-1, 1, len(big["payload"]), 10], "too large")
    client.delete(p.key["config"])
    assert not client.exists(p.key["task"] + "t-big")
    assert client.zcard(p.key["pending"]) == 2
    assert text(client.hget(p.key["stats"], "enqueued")) == "2"

    # -- a worker registers (8.1) -----------------------------------------------------------
    worker = {"pod": "hand-1", "incarnation": "a1b2c3d4e5f6"}
    expect(p.call("register", {**worker, "concurrency": 4, "expected": ""}), [0, 0], "register")
    record = json.loads(client.hget(p.key["workers"], "hand-1"))
    assert record["incarnation"] == worker["incarnation"]
    assert (record["inflight"], record["concurrency"], record["draining"]) == (0, 4, False)
    assert before <= record["heartbeat_ms"] <= server_ms(client)
    other = {"pod": "hand-1", "incarnation": "ffffffffffff", "concurrency": 1, "expected": ""}
    held = p.call("register", other)
    assert held[0] == -1 and json.loads(held[1])["incarnation"] == worker["incarnation"]

    # -- claim (6, 4.8): higher priority first, one tagged record per task ----------------
    claimed_at = server_ms(client)
    reply = p.call("claim", {**worker, "max_tasks": 5, "token_base": "feedc0de", "bound": 100})
    assert reply[:3] == [0, -1, 0], "no rate limit, nothing delayed, nothing left pending"
    records = []
    for r in reply[3:]:  # the mark, name/value pairs up to an empty name, then the payload
        head, _, payload = r.partition(b"\0\0")
        mark, *pairs = head.split(b"\0")
        assert mark == b"\x013"
        records.append((dict(zip(pairs[::2], pairs[1::2], strict=True)), payload))
    (first, first_payload), (second, second_payload) = records
    assert int(first.pop(b"waited_ms")) >= 0 and int(second.pop(b"waited_ms")) >= 0
    assert first == {
        b"id": b"t-named",
        b"token": b"feedc0de:1",
        b"attempts": b"1",
        b"max_attempts": b"7",
        b"priority": b"5",
        b"cost": b"2",
        b"timeout": b"12.5",
        b"trace": trace.encode(),  # 4.6: the record carries it, no read after the claim
    }
    assert first_payload == named.encode()
    assert second == {  # lost 0, priority 0 and cost 1 are left out
        b"id": b"t-plain",
        b"token": b"feedc0de:2",
        b"attempts": b"1",
        b"max_attempts": b"3",
        b"trace": trace.encode(),
    }
    assert second_payload == plain.encode()

    running = p.task("t-named")
    assert running["state"] == "running" and running["token"] == "feedc0de:1"
    assert (running["pod"], running["incarnation"]) == (worker["pod"], worker["incarnation"])
    started = int(running["started_at"])
    assert claimed_at <= started <= server_ms(client)
    assert int(running["lease_until"]) == started + 30_000, "the default lease_ttl_s, in ms"
    assert client.zscore(p.key["running"], "t-named") == int(running["lease_until"])
    assert client.smembers(p.key["pod"] + "hand-1") == {b"t-named", b"t-plain"}
    assert client.zcard(p.key["pending"]) == 0

    # -- heartbeat (8.2): a token that does not match comes back as lost ----------------
    beat = p.call(
        "extend",
        {**worker, "inflight": 2, "draining": 0, "concurrency": 4},
        [
            {"task_id": "t-named", "token": "feedc0de:1"},
            {"task_id": "t-plain", "token": "not-its-token"},
        ],
    )
    assert beat == [b"", b"t-plain"]
    assert int(p.task("t-named")["lease_until"]) >= started + 30_000
    assert json.loads(client.hget(p.key["workers"], "hand-1"))["inflight"] == 2

    # -- complete (6, 7.1): fenced by the token; a retried write answers the same ---------
    result = canonical({"ok": True, "size": [2, 3]})
    flags = p.call(
        "complete",
        {},
        [
            {"task_id": "t-named", "token": "feedc0de:1", "result": result},
            {"task_id": "t-plain", "token": "feedc0de:9", "result": ""},
        ],
    )
    assert flags == b"10", "completed; stale token refused"
    assert text(client.hget(p.key["stats"], "stale")) == "1"
    done = p.task("t-named")
    assert done["state"] == "done" and done["result"] == result
    assert done["token"] == "feedc0de:1", "the token stays: it tells a retried write"
    assert "lease_until" not in done
    assert client.zscore(p.key["done"], "t-named") == int(done["finished_at"])
    assert client.zscore(p.key["running"], "t-named") is None
    assert client.smembers(p.key["pod"] + "hand-1") == {b"t-plain"}
    again = p.call(
        "complete", {}, [{"task_id": "t-named", "token": "feedc0de:1", "result": result}]
    )
    assert again == b"1", "the same write again: answered as the first, nothing changed"
    assert text(client.hget(p.key["stats"], "completed")) == "1"
    assert p.task("t-named") == done

    expect(
        p.call("complete", {}, [{"task_id": "t-plain", "token": "feedc0de:2"}]),
        b"1",
        "complete",
    )
    finished = p.task("t-plain")
    assert finished["state"] == "done" and "result" not in finished, "'' stores no result"
    assert text(client.hget(p.key["stats"], "completed")) == "2"
    assert client.zcard(p.key["running"]) == 0 and client.zcard(p.key["done"]) == 2

    # -- the worker leaves (6): nothing held, its record goes -----------------------------
    expect(p.call("deregister", {**worker, "failed": 0}), 0, "deregister")
    assert client.hlen(p.key["workers"]) == 0


# -- the tests ------------------------------------------------------------------------------


def test_this_file_imports_no_taskfleet_module() -> None:
    tree = ast.parse(Path(__file__).read_text())
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ] + [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert [m for m in imported if m.split(".")[0] in OURS] == []


def test_enqueue_claim_complete_by_hand(redis_url: str) -> None:
    """The whole cycle in a fresh interpreter; it fails if a taskfleet module was loaded."""
    done = subprocess.run(
        [sys.executable, "-I", str(Path(__file__).resolve()), redis_url],
        capture_output=True,
        text=True,
        timeout=DRIVE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == "the cycle went as docs/protocol.md says"


if __name__ == "__main__":
    try:
        drive(sys.argv[1])
    except AssertionError as exc:  # no pytest rewrites asserts here: show the values at hand
        traceback.print_exc()
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is cycle.__code__:
                for name, value in tb.tb_frame.f_locals.items():
                    sys.stderr.write(f"  {name} = {value!r:.400}\n")
            tb = tb.tb_next
        sys.exit(1)
    print("the cycle went as docs/protocol.md says")
