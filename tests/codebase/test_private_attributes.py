"""No library's private attributes: the operator, the library, the release scripts, the
bench and the tests read another package's objects only through their public API, so an
upgrade of kopf, prometheus-client or the Kubernetes client cannot break them quietly.

Read from the source: every ``x._name`` access (not a dunder), and every ``getattr(x,
"_name")`` (``hasattr``, ``setattr``, ``delattr``), must name an attribute this project
defines somewhere (``self._name = ...``, ``def _name``, a class attribute ``_name``, a
dataclass field), one the standard library documents as public despite its underscore
(``os._exit``, a named tuple's ``_replace``, an enum's ``_value_``), or one of redis-py's
that ``protocol/redisadapter.py`` declares (``PRIVATES``, each with a public fallback and
checked on the oldest and newest redis-py allowed; tests/protocol/test_redis_privates.py
keeps every other module of the product off redis-py's privates, even where a name is
also one of ours).
"""

from __future__ import annotations

import ast
from pathlib import Path

from taskfleet.protocol.redisadapter import PRIVATES

from tests.astreads import attribute_reached

REPO = Path(__file__).resolve().parents[2]
ROOTS = (
    REPO / "worker-image" / "taskfleet",
    REPO / "operator" / "taskfleet_operator",
    REPO / "bench",
    REPO / "tests",
    REPO / "e2e",
    REPO / "release",
    REPO / "examples",
    REPO / "conformance",
)

#: Underscored names the standard library documents as public.
DOCUMENTED = {
    "_exit",  # os._exit
    "_replace",  # namedtuple
    "_fields",
    "_asdict",
    "_make",
    "_field_defaults",
    "_value_",  # enum
    "_name_",
    "_missing_",
    "_generate_next_value_",
    "_getframe",  # sys._getframe
    "_current_frames",  # sys._current_frames
}


def _sources() -> list[Path]:
    return [
        path
        for root in ROOTS
        if root.is_dir()
        for path in sorted(root.rglob("*.py"))
        if ".peers" not in path.parts and "node_modules" not in path.parts
    ]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(trees: list[ast.Module]) -> set[str]:
    """Every underscored name this project defines: functions, classes, assignment
    targets (attributes and plain names), annotated fields, imports' aliases."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[-1])
    return {name for name in names if _private(name)}


def _read(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of every underscored attribute the tree reads, writes or names in a
    getattr-like call with a literal name."""
    out = []
    for node in ast.walk(tree):
        reached = attribute_reached(node)
        if reached is not None and _private(reached[1]):
            out.append((getattr(node, "lineno", 0), reached[1]))
    return out


def _strangers(trees: list[ast.Module]) -> list[list[tuple[int, str]]]:
    allowed = _defined(trees) | DOCUMENTED | {name for _, name in PRIVATES}
    return [[(line, name) for line, name in _read(tree) if name not in allowed] for tree in trees]


def test_no_other_packages_private_attribute_is_read() -> None:
    paths = _sources()
    trees = [ast.parse(path.read_text(), str(path)) for path in paths]
    found = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path, strangers in zip(paths, _strangers(trees), strict=True)
        for line, name in strangers
    ]
    assert not found, "private attributes of another package:\n" + "\n".join(found)


def test_the_check_finds_a_private_attribute_of_another_package_however_spelt() -> None:
    tree = ast.parse(
        "def forget(metric):\n"
        "    metric._own = 1\n"
        "    return list(metric._metrics), getattr(metric, '_lock'), metric._own\n"
    )
    assert sorted(_strangers([tree])[0]) == [(3, "_lock"), (3, "_metrics")]
