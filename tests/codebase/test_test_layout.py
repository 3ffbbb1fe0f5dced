"""The tests' own layout: test modules in folders by role, shared code in helper modules."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROLES = {
    "cli",
    "cluster",
    "codebase",
    "dashboard",
    "flows",
    "operator",
    "producer",
    "protocol",
    "release",
    "schedules",
    "worker",
}


def test_no_test_module_sits_at_the_top_of_the_tests_folder() -> None:
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []


def test_every_test_module_sits_in_a_role_folder_that_is_a_package() -> None:
    folders = {p.parent for p in TESTS.rglob("test_*.py")}
    assert {f.name for f in folders} <= ROLES, sorted({f.name for f in folders} - ROLES)
    assert all((f / "__init__.py").is_file() for f in folders)


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_module_of_the_tests_imports_a_test_module() -> None:
    offenders = {
        f"{path.relative_to(TESTS)} imports {name}"
        for path in TESTS.rglob("*.py")
        for name in imported_modules(path)
        if name.rsplit(".", 1)[-1].startswith("test_")
    }
    assert sorted(offenders) == []


def test_the_layout_check_sees_a_test_module_imported_by_another(tmp_path: Path) -> None:
    module = tmp_path / "test_b.py"
    module.write_text("from tests.worker.test_a import helper\n")
    assert "tests.worker.test_a" in imported_modules(module)
