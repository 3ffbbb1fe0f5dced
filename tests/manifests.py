"""The install manifests as kustomize renders them, and the admission policy's rule."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


MANIFESTS = REPO / "manifests"


def kustomize(path: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        ["kubectl", "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


def admitted(policy: dict[str, Any], labels: dict[str, str], namespace: str) -> bool:
    """Whether an ingress rule of ``policy`` (in taskfleet-system) admits such a pod."""
    for rule in policy["spec"]["ingress"]:
        for peer in rule["from"]:
            if "ipBlock" in peer:
                return True  # an address range admits pods regardless of labels
            same_namespace = "namespaceSelector" not in peer
            if same_namespace and namespace != "taskfleet-system":
                continue
            if selects(peer.get("podSelector", {}), labels):
                return True
    return False


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) applied to labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        ok = {
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
        }[operator]
        if not ok:
            return False
    return True
