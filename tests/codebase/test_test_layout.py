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


#: Skips that are not about a missing tool: a platform the check can't apply to, or a
#: test another make target runs with its own environment. Everything else goes through
#: tests/needs.py, which fails instead of skipping under CI.
SKIPS_ALLOWED = {
    "codebase/test_heap.py": "glibc's malloc_trim and /proc",
    "protocol/test_redisadapter.py": "redis_py_range.sh sets the expected version; Linux only",
    "codebase/test_test_layout.py": "names the calls it looks for",
}
SKIP_CALLS = ("pytest.skip(", "pytest.mark.skipif(", "pytest.importorskip(", "pytest.mark.skip(")


def skip_calls(text: str) -> list[str]:
    return [call for call in SKIP_CALLS if call in text]


def test_a_test_may_skip_only_through_tests_needs_which_fails_under_ci() -> None:
    offenders = sorted(
        f"{path.relative_to(TESTS)}: {', '.join(calls)}"
        for path in TESTS.rglob("*.py")
        if path.name != "needs.py"
        and str(path.relative_to(TESTS)) not in SKIPS_ALLOWED
        and (calls := skip_calls(path.read_text()))
    )
    assert offenders == [], "use tests.needs (need, need_module, unless) instead"


def test_the_skip_check_sees_a_bare_skipif() -> None:
    assert skip_calls('pytestmark = pytest.mark.skipif(True, reason="x")') == [
        "pytest.mark.skipif("
    ]
