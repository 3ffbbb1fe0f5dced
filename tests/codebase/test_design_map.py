"""DESIGN.md's layout map names every module of the library and the operator, and nothing
that does not exist: the map a newcomer reads first stays true to the tree."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {
    "worker-image/": REPO / "worker-image",
    "operator/": REPO / "operator",
}


def _mapped_paths() -> set[Path]:
    """Paths the map names, built from its indentation (two spaces per level)."""
    text = (REPO / "DESIGN.md").read_text()
    block = text.split("## 1. Parts and layout", 1)[1].split("```", 2)[1]
    paths: set[Path] = set()
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        match = re.match(r"^( *)(\S+)", line)
        if not match or len(match.group(1)) % 2:
            continue  # a continuation line of a description
        depth, name = len(match.group(1)) // 2, match.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = "".join(part for _, part in stack)
        stack.append((depth, name if name.endswith("/") else name + "/"))
        paths.add(REPO / (parent + name).rstrip("/"))
    return paths


def test_every_module_the_design_map_names_exists() -> None:
    missing = [
        str(p.relative_to(REPO)) for p in _mapped_paths() if "*" not in p.name and not p.exists()
    ]
    assert missing == []


def test_every_module_of_the_library_and_the_operator_is_on_the_map() -> None:
    mapped = _mapped_paths()
    modules = [
        *(REPO / "worker-image" / "taskfleet").rglob("*.py"),
        *(REPO / "operator" / "taskfleet_operator").rglob("*.py"),
    ]
    unmapped = [
        str(m.relative_to(REPO))
        for m in modules
        if m not in mapped and m.name != "__init__.py" and "__pycache__" not in m.parts
    ]
    assert unmapped == []


def test_every_package_of_the_tree_is_in_its_distribution() -> None:
    """A package missing from pyproject's list installs fine in editable mode and is
    absent from the image, where ``pip install`` copies only the packages named. The library
    (pyproject.toml) and the operator (operator/pyproject.toml) are two distributions."""
    import tomllib

    for project in (REPO, REPO / "operator"):
        config = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"]
        listed = set(config["packages"])
        roots = config.get("package-dir") or {name: name for name in listed if "." not in name}
        found = set()
        for name, root in roots.items():
            for init in (project / root).rglob("__init__.py"):
                parts = init.parent.relative_to(project / root).parts
                found.add(".".join((name, *parts)))
        assert found == listed, project
