"""No module of the product uses a private attribute of redis-py but the one adapter.

``protocol/redisadapter.py`` holds the only private attributes taskfleet reads of redis-py
(its ``PRIVATES``, checked on the oldest and newest redis-py allowed by
tests/protocol/test_redisadapter.py). Everywhere else, read from the source of
``worker-image/taskfleet`` and ``operator/taskfleet_operator``:

- ``x._name`` (read, written or deleted) and ``getattr(x, "_name")`` (or ``hasattr``,
  ``setattr``, ``delattr``) on anything but ``self`` and ``cls`` is refused, unless listed
  in ``NOT_REDIS`` with what it is; a name that is private in redis-py cannot be listed;
- in a class derived from a redis-py class, ``self._name`` / ``cls._name`` is refused when
  redis-py has a private of that name (a subclass reaching into its base's state).

redis-py's private names are read from the installed redis package's source.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest
import redis

from tests.astreads import attribute_reached

REPO = Path(__file__).resolve().parents[2]
ROOTS = (REPO / "worker-image" / "taskfleet", REPO / "operator" / "taskfleet_operator")
ADAPTER = REPO / "worker-image" / "taskfleet" / "protocol" / "redisadapter.py"

#: ``x._name`` accesses on objects that are not redis-py's: (expression, attribute) -> what.
NOT_REDIS: dict[tuple[str, str], str] = {
    ("os", "_exit"): "the standard library's exit without clean-up",
    ("parsed", "_secrets"): "taskfleet's own RedisURL (protocol/redisurl.py)",
}

#: Names that start with "_" yet are documented public API, whatever object they are read
#: from: collections.namedtuple's (typing.NamedTuple's) methods and attributes, and an enum
#: member's ``_value_`` and ``_name_``.
PUBLIC_UNDERSCORED = frozenset(
    {"_asdict", "_field_defaults", "_fields", "_make", "_replace", "_value_", "_name_"}
)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@cache
def redis_py_privates() -> frozenset[str]:
    """Every private attribute, method and class name redis-py's own source spells
    (``._name``, ``def _name``, ``class _Name``; read as text: parsing it all is slow)."""
    names: set[str] = set()
    for path in Path(redis.__file__).parent.rglob("*.py"):
        names.update(_SPELT.findall(path.read_text(encoding="utf-8")))
    return frozenset(name for name in names if _private(name))


_SPELT = re.compile(r"(?:\.|\bdef\s+|\bclass\s+)(_[A-Za-z0-9_]+)")


def _redis_names(tree: ast.Module) -> set[str]:
    """Names a module binds to redis-py (``import redis``, ``from redis... import X``)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "redis" or alias.name.startswith("redis."):
                    bound.add(alias.asname or alias.name.split(".")[0])
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module == "redis" or (node.module or "").startswith("redis."))
        ):
            bound.update(alias.asname or alias.name for alias in node.names)
    return bound


def violations(source: str, privates: frozenset[str]) -> list[str]:
    """Each private access of ``source`` that may be redis-py's, as ``line: expression``."""
    tree = ast.parse(source)
    from_redis = _redis_names(tree)
    found: list[str] = []

    def check(node: ast.AST, base: ast.expr, name: str, in_redis_subclass: bool) -> None:
        if not _private(name):
            return
        owner = ast.unparse(base)
        if owner in ("self", "cls"):
            if in_redis_subclass and name in privates:
                found.append(f"{node.lineno}: {owner}.{name} (redis-py subclass)")
            return
        if (owner, name) in NOT_REDIS and name not in privates:
            return
        if name in PUBLIC_UNDERSCORED or name not in privates:
            return  # public API, or a name redis-py never spells: not one of its privates
        found.append(f"{node.lineno}: {owner}.{name}")

    def visit(node: ast.AST, in_redis_subclass: bool) -> None:
        if isinstance(node, ast.ClassDef):
            in_redis_subclass = any(ast.unparse(b).split(".")[0] in from_redis for b in node.bases)
        reached = attribute_reached(node)
        if reached is not None:
            check(node, *reached, in_redis_subclass)
        for child in ast.iter_child_nodes(node):
            visit(child, in_redis_subclass)

    visit(tree, False)
    return found


def _product_modules() -> list[Path]:
    return [path for root in ROOTS for path in sorted(root.rglob("*.py")) if path != ADAPTER]


@pytest.mark.parametrize("path", _product_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_but_the_adapter_uses_a_private_of_redis_py(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8"), redis_py_privates()) == []


def test_every_exception_listed_is_still_used() -> None:
    sources = "\n".join(path.read_text(encoding="utf-8") for path in _product_modules())
    for owner, name in NOT_REDIS:
        assert f"{owner}.{name}" in sources, f"{owner}.{name} is no longer used: unlist it"


def test_the_scan_finds_each_way_of_reaching_a_private() -> None:
    snippet = """
import os
import redis.asyncio
from redis.asyncio import ConnectionPool as Pool

class Mine:
    def __init__(self, client):
        self._idle = []                              # its own: fine
        self._pool = client.connection_pool          # its own: fine

    def go(self, conn, pool):
        conn._sock.close()                           # 12
        getattr(conn, "_writer", None)               # 13
        hasattr(pool, "_available_connections")      # 14
        pool._in_use_connections = set()             # 15
        os._exit(0)                                  # listed: fine
        return conn.__class__, self._idle            # dunder and self: fine

class Sub(Pool):
    def grab(self):
        return self._available_connections           # 21 (redis-py subclass)

class Other(redis.asyncio.Redis):
    def mine(self):
        return self._taskfleet_own_state             # not a redis-py name: fine
"""
    privates = redis_py_privates()
    assert {"_sock", "_writer", "_available_connections", "_in_use_connections"} <= privates
    assert [v.split(":")[0] for v in violations(snippet, privates)] == [
        "12",
        "13",
        "14",
        "15",
        "21",
    ]
    # a listed exception cannot excuse a name that is private in redis-py
    assert violations("import os\nos._sock\n", frozenset({"_sock"})) == ["2: os._sock"]
