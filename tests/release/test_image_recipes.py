"""The image recipes (worker-image/, clients/node/, examples/*-image/) agree with what the
operator's pods ask of an image: the command it sets, the preStop program, the user it
runs as.

Building and running them is e2e/test_app_image.py; this checks, without a cluster,
that an edit on one side does not leave the other behind.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from taskfleet_operator import builders
from taskfleet_operator.models import TaskQueueSpec

REPO = Path(__file__).resolve().parents[2]
#: Images the operator's pods may run, and the runtime a TaskQueue names for each: the
#: worker images and the recipes of docs/images.md.
RUNNABLE = [
    ("worker-image/Dockerfile", "python"),
    ("examples/own-base-image/Dockerfile", "python"),
    ("clients/node/Dockerfile", "node"),
]
RECIPES = ["examples/app-image", "examples/own-base-image"]


def final_stage(path: str) -> list[tuple[str, str]]:
    """(instruction, arguments) of the last stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (REPO / path).read_text())
    lines = [line.strip() for line in text.splitlines()]
    steps = [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]
    start = max(i for i, step in enumerate(steps) if step[0].upper() == "FROM")
    return [(step[0].upper(), step[1] if len(step) > 1 else "") for step in steps[start:]]


def last(path: str, instruction: str) -> str:
    values = [args for name, args in final_stage(path) if name == instruction]
    assert values, f"{path} has no {instruction}"
    return values[-1]


def worker_container(runtime: str = "python") -> dict[str, Any]:
    spec = TaskQueueSpec.model_validate(
        {
            "image": "x",
            "runtime": runtime,
            "handler": "myapp.tasks:f",
            "redis": {"url": "redis://r:6379/0"},
        }
    )
    return builders.worker_container("ns", "q", spec)


@pytest.mark.parametrize(("path", "runtime"), RUNNABLE)
def test_an_image_s_exec_form_entrypoint_is_the_command_the_operator_sets(
    path: str, runtime: str
) -> None:
    assert json.loads(last(path, "ENTRYPOINT")) == worker_container(runtime)["command"]


@pytest.mark.parametrize(("path", "runtime"), RUNNABLE)
def test_the_pre_stop_hook_runs_the_same_program_as_the_entrypoint(path: str, runtime: str) -> None:
    pre_stop = worker_container(runtime)["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == json.loads(last(path, "ENTRYPOINT"))[0]


@pytest.mark.parametrize(("path", "runtime"), RUNNABLE)
def test_an_image_runs_as_the_numeric_non_root_user_of_the_operator_s_pods(
    path: str, runtime: str
) -> None:
    assert last(path, "USER") == f"{builders.WORKER_UID}:{builders.WORKER_UID}"


@pytest.mark.parametrize(("path", "runtime"), RUNNABLE)
def test_the_working_directory_the_handlers_are_imported_from_is_not_the_writable_tmp(
    path: str, runtime: str
) -> None:
    tmp = [m["mountPath"] for m in worker_container()["volumeMounts"]]
    workdir = last(path, "WORKDIR")
    assert not any(workdir == p or workdir.startswith(p + "/") for p in tmp), workdir


def test_the_worker_image_s_virtualenv_belongs_to_the_user_it_runs_as() -> None:
    """So a derived image's `RUN pip install` (as that user) can write to it."""
    runs = " ".join(args for name, args in final_stage("worker-image/Dockerfile") if name == "RUN")
    uid = builders.WORKER_UID
    assert f"chown -R {uid}:{uid} /opt/taskfleet" in runs


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_recipe_pins_its_requirements_and_its_handlers_import_them(recipe: str) -> None:
    pins = dict(
        line.split("==", 1)
        for line in (REPO / recipe / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert pins, f"{recipe}/requirements.txt pins nothing"
    handlers = (REPO / recipe / "myapp" / "tasks.py").read_text()
    for package in pins:
        assert re.search(rf"^import {package}$", handlers, re.MULTILINE), package


def test_the_node_image_installs_the_package_packed_from_this_tree_with_the_lock_file() -> None:
    """npm pack of clients/node (never the registry's copy), its runtime dependencies from
    package-lock.json (npm ci), and its bin on PATH under the name the pods run."""
    text = (REPO / "clients/node/Dockerfile").read_text()
    assert "npm pack" in text and "COPY clients/node/src/" in text
    runs = " ".join(args for name, args in final_stage("clients/node/Dockerfile") if name == "RUN")
    assert "npm ci --omit=dev" in runs
    assert "/usr/local/bin/taskfleet-node" in runs
