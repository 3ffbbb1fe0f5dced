"""`make e2e-local` runs the e2e scenarios two at a time on one cluster; a scenario that
stops, kills or replaces the suite's operator, or cuts off a node, would break the
scenarios beside it, so it must be marked `exclusive` (run alone, after the others).

Read from the source: a test is disruptive when its body, or a fixture or helper of its
module it names (followed through the helpers they name), acts on the suite's operator
(through ``operator.kube``: scaled, its pods deleted or killed), stops a kubelet or
freezes a node."""

from __future__ import annotations

import ast
import re
from pathlib import Path

E2E = Path(__file__).resolve().parents[2] / "e2e"
#: The suite's operator reached through its kube client (anything but naming its namespace:
#: scaled, its pods deleted or killed), a kubelet stopped, a node frozen.
DISRUPTIVE = re.compile(
    r"\w*operator\w*\.kube\b(?!\.namespace)|\.kubelet_stopped\(|\bfrozen_nodes\b|\.freeze\("
    r"|\"systemctl\", \"stop\""
)


def _is_exclusive_mark(node: ast.expr) -> bool:
    return ast.unparse(node).removesuffix("()") == "pytest.mark.exclusive"


def _module_marked(tree: ast.Module) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets
        ):
            values = stmt.value.elts if isinstance(stmt.value, ast.List) else [stmt.value]
            return any(_is_exclusive_mark(v) for v in values)
    return False


def _names(node: ast.AST) -> set[str]:
    """Every name a function uses, its parameters (fixtures it requests) included."""
    found = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    if isinstance(node, ast.FunctionDef):
        found |= {a.arg for a in node.args.args}
    return found


def disruptive_unmarked(source: str) -> list[str]:
    """The tests of one e2e module that disrupt the cluster's shared parts unmarked."""
    tree = ast.parse(source)
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    module_marked = _module_marked(tree)
    unmarked = []
    for name, function in functions.items():
        if not name.startswith("test_") or module_marked:
            continue
        if any(_is_exclusive_mark(d) for d in function.decorator_list):
            continue
        seen, todo, reach = {name}, [function], []
        while todo:
            current = todo.pop()
            reach.append(ast.get_source_segment(source, current) or "")
            for used in _names(current) & functions.keys() - seen:
                seen.add(used)
                todo.append(functions[used])
        if any(DISRUPTIVE.search(text) for text in reach):
            unmarked.append(name)
    return unmarked


def test_every_e2e_scenario_that_disrupts_the_shared_cluster_is_marked_exclusive() -> None:
    offenders = {
        path.name: found
        for path in sorted(E2E.glob("test_*.py"))
        if (found := disruptive_unmarked(path.read_text()))
    }
    assert offenders == {}, (
        f"mark these @pytest.mark.exclusive (make e2e-local runs them alone): {offenders}"
    )


def test_the_check_finds_an_unmarked_operator_restart_through_a_fixture_and_a_helper() -> None:
    source = """
import pytest

@pytest.fixture
def paused(operator):
    operator.kube.run("scale", "deployment/x", "--replicas=0")

def _kill(node):
    node.kubelet_stopped()

def test_plain(namespace):
    pass

def test_through_fixture(paused):
    pass

def test_through_helper():
    _kill(None)

@pytest.mark.exclusive
def test_marked(paused):
    pass
"""
    assert disruptive_unmarked(source) == ["test_through_fixture", "test_through_helper"]
    marked = source.replace(
        "import pytest\n", "import pytest\npytestmark = pytest.mark.exclusive\n"
    )
    assert disruptive_unmarked(marked) == []
