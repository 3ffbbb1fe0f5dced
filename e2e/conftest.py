"""The e2e suite acts on whatever cluster the kubeconfig's current context names, so it
refuses every context but the project's own: a slip of KUBECONFIG must never point it at
a cluster that matters."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from e2e.lib.outcome import FIGURE

ALLOWED_CONTEXTS = ("kind-taskfleet", "taskfleet-local")
#: The release stage builds two releases before it starts (make e2e-release): collected
#: only when named (`pytest e2e/release`), never as part of the suite.
collect_ignore = ["release"]
#: The figures the tests measured (the ``figures`` fixture), repeated in the run's summary.
_FIGURES: list[str] = []


def current_context() -> str:
    kubectl = os.environ.get("KUBECTL", "kubectl")
    try:
        proc = subprocess.run(
            [kubectl, "config", "current-context"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except FileNotFoundError as exc:
        raise pytest.UsageError(
            f"e2e: {kubectl} not found; the suite drives the cluster with it"
        ) from exc
    return proc.stdout.strip()


def pytest_configure(config: pytest.Config) -> None:
    context = current_context()
    if context not in ALLOWED_CONTEXTS:
        raise pytest.UsageError(
            f"e2e: refusing kube context {context or '(none)'!r}; the suite runs only against "
            f"{' or '.join(ALLOWED_CONTEXTS)} (make cluster-up, or make kind-up, then "
            "export the KUBECONFIG they print)"
        )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A test's figures, from its last report: here rather than in the fixtures' plugin,
    which an xdist controller (make e2e-local) never loads, as it collects no test module."""
    if report.when == "teardown":
        _FIGURES.extend(str(value) for key, value in report.user_properties if key == FIGURE)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _FIGURES:
        terminalreporter.section("taskfleet e2e figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)
