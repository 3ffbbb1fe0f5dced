"""Imports go one way: worker -> protocol <- producer; the CLI and the operator on top;
and the Redis layout (key and field names, raw commands) stays in the protocol.

Read from the source (every ``import`` and ``from ... import``, lazy ones inside functions
included; every attribute, call and string), so a shortcut that reaches the wrong way
fails here, not in a review.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import redis
import redis.asyncio
from taskfleet.producer.queue import Queue
from taskfleet.protocol import records, tasks
from taskfleet.protocol.keys import PREFIX, QueueKeys

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "worker-image" / "taskfleet"
OPERATOR = REPO / "operator" / "taskfleet_operator"

#: What each layer may import of taskfleet (besides itself).
ALLOWED = {
    "taskfleet.protocol": set(),
    "taskfleet.producer": {"taskfleet.protocol"},
    "taskfleet.worker": {"taskfleet.protocol"},
    "taskfleet.samples": {"taskfleet.protocol", "taskfleet.worker"},
    "taskfleet.dashboard": {"taskfleet.protocol", "taskfleet.producer"},
    "taskfleet.cli": {
        "taskfleet.protocol",
        "taskfleet.producer",
        "taskfleet.worker",
        "taskfleet.dashboard",
    },
    "taskfleet_operator": {"taskfleet.protocol", "taskfleet.producer"},
}

#: Beneath every layer: the package root and its version (``taskfleet._version``, a string).
BENEATH = ("taskfleet", "taskfleet._version")


def _layer(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def _modules() -> list[tuple[str, Path]]:
    out = []
    for root, package in ((LIBRARY, "taskfleet"), (OPERATOR, "taskfleet_operator")):
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.append((".".join((package, *parts)), path))
    return out


def _imports(path: Path, module: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # ``from taskfleet.protocol import bounds`` imports the module bounds
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in ("taskfleet", "taskfleet_operator")}


@pytest.mark.parametrize(("module", "path"), _modules(), ids=str)
def test_a_module_imports_only_its_own_layer_and_those_below(module: str, path: Path) -> None:
    layer = _layer(module)
    if layer is None:
        return  # the package root (the public API re-exports) and ``__main__``
    allowed = ALLOWED[layer] | {layer}
    wrong = sorted(
        name
        for name in _imports(path, module)
        if (_layer(name) or name) not in allowed
        and name not in BENEATH
        and not name.startswith("taskfleet._version.")
    )
    assert wrong == [], f"{module} ({layer}) imports {wrong}"


def test_every_module_belongs_to_a_layer_or_is_the_package_root() -> None:
    unplaced = [
        module
        for module, _ in _modules()
        if _layer(module) is None and module not in (*BENEATH, "taskfleet.__main__")
    ]
    assert unplaced == []


# -- The Redis layout is protocol/'s ----------------------------------------------------
#
# Key and field names live in ``taskfleet.protocol``; every other module reads and writes
# the queue through its builders (``reads``, ``lists``, ``store``, the script ops) and its
# runners (``calls``, ``scripts``). Read from the source, like the imports above.

#: What a module outside protocol/ may import of ``taskfleet.protocol.keys``: the
#: builders' argument and the name rules (not ``PREFIX`` or ``SCRIPT_KEYS``).
KEYS_IMPORTABLE = {"QueueKeys", "validate_queue_name", "validate_quota_name"}
#: ``QueueKeys``' key names and key-building methods (``queue`` is the queue's name).
KEY_MEMBERS = (set(QueueKeys.__slots__) | {n for n in vars(QueueKeys) if not n.startswith("_")}) - {
    "queue"
}
#: Key parts spelt with a colon (``task:``, ``schedules:due``...): never a word elsewhere.
KEY_PARTS = {
    key[len(QueueKeys("q").prefix) :]
    for name in QueueKeys.__slots__
    if isinstance(key := getattr(QueueKeys("q"), name), str)
    and key.startswith(QueueKeys("q").prefix)
    and ":" in key[len(QueueKeys("q").prefix) :]
}
#: Stored field names that only the layout uses: every record's compound names
#: (``lease_ttl_s``, ``heartbeat_ms``, ``run_at``...). A single word (``state``, ``name``,
#: ``error``) is every layer's own vocabulary too; reading it from Redis needs a command
#: and a key, which the other checks catch.
LAYOUT_FIELDS = {
    name
    for name in (
        *records.TASK_FIELDS,
        *records.WORKER_FIELDS,
        *records.SCHEDULE_FIELDS,
        *records.BUCKET_FIELDS,
        *records.CONFIG_FIELDS,
        *tasks.COUNTERS,
    )
    if "_" in name
} - {
    # the producer API's argument names, which the layout reuses: the API's words
    *inspect.signature(Queue.enqueue).parameters,
    *inspect.signature(Queue.schedule).parameters,
}
#: Method names redis-py shares with the standard library, click, kopf and this package
#: (``dict.get``, ``Event.set``, ``Path.unlink``, a logger's ``info``, ``click.echo``,
#: ``kopf.on.delete``, ``Ops.watch``), and its clients' own lifecycle (``aclose``,
#: ``from_url``): a call by one of these says nothing of Redis, and a Redis call by one
#: of them names a key, which the key checks catch.
SHARED_NAMES = {
    *("append", "close", "copy", "delete", "discard", "exists", "get", "info", "keys"),
    *("rename", "set", "shutdown", "sort", "time", "touch", "unlink", "wait", "command"),
    *("echo", "digest", "select", "watch", "aclose", "from_pool", "from_url"),
}
#: redis-py's command methods (and ``pipeline``, ``execute_command``, ``eval``...).
REDIS_COMMANDS = {
    name
    for client in (redis.Redis, redis.client.Pipeline, redis.asyncio.Redis)
    for name in dir(client)
    if not name.startswith("_")
} - SHARED_NAMES
#: The raw commands a module outside protocol/ may send, each for a reason: none reads
#: or writes a queue's keys.
RAW_COMMANDS_ALLOWED = {
    # the outage probes' "does it answer?" on a server of no queue slot to read
    ("taskfleet.worker.core", "ping"),
    ("taskfleet_operator.outages", "ping"),
    # a demo handler records each run on a list its payload names (the e2e suite reads it)
    ("taskfleet.samples", "rpush"),
}


def _keys_like(node: ast.expr) -> bool:
    """``keys``, ``self.keys``, ``queue.keys``, ``KEYS``, ``QueueKeys(name)``."""
    if isinstance(node, ast.Name):
        return node.id.lower().endswith("keys")
    if isinstance(node, ast.Attribute):
        return node.attr.lower().endswith("keys")
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and (node.func.id == "QueueKeys")
    )


def _called(node: ast.Call) -> str | None:
    return node.func.attr if isinstance(node.func, ast.Attribute) else None


def layout_named(source: str, module: str) -> list[str]:
    """Where ``source`` (the module ``module``) names a key or a field of the Redis
    layout, or sends a raw command; one line each."""
    tree = ast.parse(source)
    found: list[str] = []
    # a label, not a read: a dict display's keys (an API's own words mapped onto
    # something) and an argument to a call that reads nothing by it (a message's field)
    labels: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            labels |= {id(key) for key in node.keys if key is not None}
        elif isinstance(node, ast.Call):
            called = _called(node)
            if called not in REDIS_COMMANDS and called not in ("get", "pop", "setdefault"):
                labels |= {id(arg) for arg in node.args}
    for node in ast.walk(tree):
        where = f"{module}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom) and node.module == "taskfleet.protocol.keys":
            wrong = sorted({a.name for a in node.names} - KEYS_IMPORTABLE)
            if wrong:
                found.append(f"{where} imports {wrong} of protocol.keys")
        elif isinstance(node, ast.Attribute) and node.attr in KEY_MEMBERS:
            if _keys_like(node.value) or "_" in node.attr:
                found.append(f"{where} names the key .{node.attr}")
        elif isinstance(node, ast.Call):
            called = _called(node)
            if called in REDIS_COMMANDS and (module, called) not in RAW_COMMANDS_ALLOWED:
                found.append(f"{where} sends {called} itself")
            getattr_ = isinstance(node.func, ast.Name) and node.func.id == "getattr"
            if getattr_ and node.args and _keys_like(node.args[0]):
                found.append(f"{where} looks a key up by name")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text.startswith(f"{PREFIX}:") or "}:" in text or text in KEY_PARTS:
                found.append(f"{where} spells a key: {text[:40]!r}")
            elif text in LAYOUT_FIELDS and id(node) not in labels:
                found.append(f"{where} names the field {text!r}")
    return found


@pytest.mark.parametrize(("module", "path"), _modules(), ids=str)
def test_no_module_outside_the_protocol_names_a_key_or_a_field_or_sends_a_raw_command(
    module: str, path: Path
) -> None:
    if module == "taskfleet.protocol" or module.startswith("taskfleet.protocol."):
        return
    assert layout_named(path.read_text(), module) == []


def test_the_layout_check_finds_a_hand_written_read_of_the_lease_ttl() -> None:
    found = layout_named('ttl = r.hget(keys.config, "lease_ttl_s")\n', "taskfleet_operator.x")

    assert found == [
        "taskfleet_operator.x:1 sends hget itself",
        "taskfleet_operator.x:1 names the key .config",
        "taskfleet_operator.x:1 names the field 'lease_ttl_s'",
    ]
    # a misspelt field is still a raw read of a named key
    assert len(layout_named('r.hget(queue.keys.config, "lease_ttl")', "m")) == 2


@pytest.mark.parametrize(
    "snippet",
    [
        'ttl = record.get("heartbeat_ms")',  # a record parsed by hand
        'at = row["run_at"]',
        'FIELDS = ("started_at", "state")',
        'pattern = "tf:{*}:stats"',
        'key = prefix + "schedules:due"',
        "size = client.zcard(k)",
        "pipe = client.pipeline(transaction=False)",
        "client.execute_command('TIME')",
        "due = QueueKeys(name).schedule_due",
        "key = queue.keys.task(task_id)",
        "zset = getattr(self.keys, state)",
        "from taskfleet.protocol.keys import PREFIX",
    ],
)
def test_the_layout_check_finds_each_way_of_naming_the_layout(snippet: str) -> None:
    assert len(layout_named(snippet, "taskfleet.cli.x")) == 1


@pytest.mark.parametrize(
    "snippet",
    [
        "run(client, queue.reads.stats())",  # through the protocol's builders
        'QueueConfig.model_validate({"lease_ttl_s": 30})',  # a model's own field names
        'checked_int(value, "max_attempts", 1, 10)',  # an argument named in a message
        'state = task["state"]',  # a word every layer uses
        "keys = QueueKeys(name); ops = Ops(keys); name = keys.queue",
        "event.set(); loop.time(); log.info('x'); path.unlink()",
    ],
)
def test_the_layout_check_lets_the_rest_be(snippet: str) -> None:
    assert layout_named(snippet, "taskfleet.cli.x") == []


def test_raw_commands_are_allowed_only_where_listed() -> None:
    assert layout_named("client.ping()", "taskfleet.worker.core") == []
    assert layout_named("client.ping()", "taskfleet.worker.broker") != []
    # the server's settings are read by protocol.serverprobe only
    assert layout_named('client.config_get("maxmemory-policy")', "taskfleet.worker.start") != []


def test_every_raw_command_allowed_is_still_sent_there() -> None:
    """An allowance nobody uses any more goes: the list says what is true now."""
    paths = dict(_modules())
    unused = [
        (module, command)
        for module, command in sorted(RAW_COMMANDS_ALLOWED)
        if f".{command}(" not in paths[module].read_text()
    ]
    assert unused == []
