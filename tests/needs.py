"""Tests that need a tool this machine may lack: skipped on a developer's machine, failed
under CI (``CI`` set), where `make deps` installs every tool and a skip would hide a
missing install step."""

from __future__ import annotations

import importlib.util
import os

import pytest

__all__ = ["in_ci", "need", "need_module", "unless"]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def need(present: object, reason: str) -> None:
    """Skip the calling test (fail it under CI) unless ``present`` is truthy."""
    if present:
        return
    if in_ci():
        pytest.fail(f"{reason} (CI is set: install it, `make deps`)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def need_module(name: str) -> None:
    """``need`` for an importable module (an optional extra of the package)."""
    need(importlib.util.find_spec(name) is not None, f"needs the Python module {name}")


def unless(present: object, reason: str) -> pytest.MarkDecorator:
    """A mark that skips the tests it marks unless ``present``; under CI they run, and a
    missing tool fails them."""
    return pytest.mark.skipif(not present and not in_ci(), reason=reason)
