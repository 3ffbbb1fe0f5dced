"""No import circles in ``taskfleet`` or ``taskfleet_operator``.

Read from the source, not from ``sys.modules``: every ``import`` and ``from ... import``
of a module of either package, relative ones resolved, ``from pkg import module`` taken
as an import of that module. Imports inside functions count, and so do those under
``if TYPE_CHECKING:``: a circle that only type checking follows still ties the modules
together (neither can be read, tested or moved without the other), it only fails later,
the day someone needs the name at run time. A circle is broken by moving the shared piece
to a lower module, or by depending on a ``Protocol`` the lower module declares.

Names loaded by string (``importlib.import_module``, the lazy attributes of a package's
``__init__``) are not imports of the source and are not followed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {
    "taskfleet": REPO / "worker-image" / "taskfleet",
    "taskfleet_operator": REPO / "operator" / "taskfleet_operator",
}

Graph = Mapping[str, Iterable[str]]


def modules() -> dict[str, Path]:
    """Every module of both packages by dotted name (a package by its ``__init__``)."""
    found = {}
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imports_of(module: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The modules of ``known`` that ``module`` (the file ``path``) imports."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(_nearest(alias.name, known))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from pkg import module`` imports the module; ``from mod import name``, mod
                child = f"{source}.{alias.name}" if source else alias.name
                found.add(child if child in known else _nearest(source, known))
    found.discard("")
    found.discard(module)
    return found


def _nearest(name: str, known: Mapping[str, Path]) -> str:
    """``name``, or its nearest enclosing package among ``known`` ("" if none)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imports_of(module, path, known) for module, path in known.items()}


def cycles(graph: Graph) -> list[list[str]]:
    """One circle per strongly connected group of modules, as a closed path
    ``[a, b, ..., a]`` (each step an import), sorted; [] if the graph is acyclic."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative: no recursion limit
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1 or node in graph.get(node, ()):
                        groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(_circle_in(graph, group) for group in groups)


def _circle_in(graph: Graph, group: set[str]) -> list[str]:
    """A shortest closed path through the group's first module, staying in the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    return [*paths[node], start]
                if nxt in group and nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no circle through {start} in {sorted(group)}")  # pragma: no cover


def described(found: list[list[str]]) -> str:
    return "\n".join("  " + " -> ".join(circle) for circle in found)


def test_the_modules_of_taskfleet_and_its_operator_import_each_other_without_circles() -> None:
    found = cycles(import_graph())
    assert found == [], "import circles (each arrow an import):\n" + described(found)


# ---------------------------------------------------------------- the finder itself


def test_the_circle_finder_reports_each_circle_once_as_a_closed_path() -> None:
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},  # a -> b -> c -> a
        "d": {"e"},
        "e": {"d"},  # d <-> e, reached from the first circle
        "f": {"a"},  # leads into a circle, is in none
        "g": set(),
    }
    assert cycles(graph) == [["a", "b", "c", "a"], ["d", "e", "d"]]
    assert described(cycles(graph)) == "  a -> b -> c -> a\n  d -> e -> d"


def test_the_circle_finder_finds_nothing_in_an_acyclic_graph_and_a_self_import() -> None:
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"a"}}) == [["a", "a"]]


def test_the_circle_finder_walks_a_long_chain_without_recursion() -> None:
    chain = {f"m{i:05}": {f"m{i + 1:05}"} for i in range(5000)}
    assert cycles(chain) == []
    chain["m05000"] = {"m00000"}
    assert len(cycles(chain)[0]) == 5002


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from . import b", {"p.b"}),
        ("from .b import name", {"p.b"}),
        ("from .. import top", {"top"}),
        ("from ..q import thing", {"q"}),
        ("import p.b", {"p.b"}),
        ("import p.b.missing", {"p.b"}),
        ("from p import name_not_a_module", {"p"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.b import X", {"p.b"}),
        ("def f():\n    from p import b", {"p.b"}),
        ("import json", set()),
    ],
)
def test_imports_are_resolved_relative_ones_type_only_and_local_ones_included(
    tmp_path: Path, source: str, expected: set[str]
) -> None:
    (tmp_path / "p").mkdir()
    module = tmp_path / "p" / "a.py"
    module.write_text(source + "\n")
    known = {name: tmp_path for name in ("top", "q", "p", "p.a", "p.b")}
    assert imports_of("p.a", module, known) == expected
