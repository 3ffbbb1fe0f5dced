"""Imports go one way: worker -> protocol <- producer; the CLI and the operator on top.

Read from the source (every ``import`` and ``from ... import``, lazy ones inside functions
included), so a shortcut that reaches the wrong way fails here, not in a review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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
