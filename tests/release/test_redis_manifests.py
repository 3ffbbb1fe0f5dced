"""The sample Redis servers refuse writes when full instead of being OOM-killed or
deleting tasks: ``maxmemory`` below the container's memory limit, ``noeviction``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
UNITS = {"": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}
K8S_UNITS = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "K": 1000, "M": 1000**2, "G": 1000**3}


def redis_containers() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in (REPO / "manifests/redis/deployment.yaml", REPO / "e2e/manifests/redis.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            spec = doc["spec"]
            pod = spec["template"]["spec"] if "template" in spec else spec
            for container in pod.get("containers", []):
                if container.get("command") == ["redis-server"]:
                    found.append((str(path.relative_to(REPO)), container))
    return found


def redis_bytes(text: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([a-z]*)", text.lower()).groups()  # type: ignore[union-attr]
    return int(number) * UNITS[unit]


def k8s_bytes(text: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([A-Za-z]*)", text).groups()  # type: ignore[union-attr]
    return int(number) * K8S_UNITS.get(unit, 1)


@pytest.mark.parametrize(("path", "container"), redis_containers())
def test_a_sample_redis_refuses_writes_below_its_memory_limit_and_never_evicts(
    path: str, container: dict[str, Any]
) -> None:
    args = [str(a) for a in container["args"]]
    assert "--maxmemory-policy" in args, path
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction", path
    maxmemory = redis_bytes(args[args.index("--maxmemory") + 1])
    limit = k8s_bytes(container["resources"]["limits"]["memory"])
    assert 0 < maxmemory < limit, path
