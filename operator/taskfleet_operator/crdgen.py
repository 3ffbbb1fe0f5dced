"""Generate the TaskQueue and ProviderQuota CRDs from the pydantic models.

pydantic emits JSON Schema; a CRD needs a *structural* OpenAPI v3 schema: no ``$ref``,
no ``anyOf`` carrying types, ``nullable`` instead of a ``null`` type, no
``additionalProperties: false`` (the apiserver prunes unknown fields instead). This
module rewrites the one into the other and adds what JSON Schema cannot say: CEL rules,
subresources and printer columns.

    python -m taskfleet_operator.crdgen --write crds/
    python -m taskfleet_operator.crdgen --check crds/   # exit 1 when a file drifted
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from taskfleet_operator import quotaspec
from taskfleet_operator.models import (
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    TaskQueueSpec,
    TaskQueueStatus,
)

CRD_NAME = f"{PLURAL}.{GROUP}"
FILENAME = f"{CRD_NAME}.yaml"
HEADER = "# Generated from taskfleet_operator/models.py by `make crds`; do not edit.\n"
QUOTA_CRD_NAME = f"{quotaspec.PLURAL}.{GROUP}"
QUOTA_FILENAME = f"{QUOTA_CRD_NAME}.yaml"
QUOTA_HEADER = "# Generated from taskfleet_operator/quotaspec.py by `make crds`; do not edit.\n"

# Keys of JSON Schema that have no place (or no meaning) in a CRD schema.
_DROPPED_KEYS = {"title", "$defs", "examples"}

# Spec object fields whose children all have defaults: the object itself gets a default,
# so it is filled in even when the user leaves it out.
_DEFAULTED_OBJECTS = ("backoff", "heartbeat", "retention")


class SchemaError(ValueError):
    """The models produced a schema this generator cannot make structural."""


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    return {key: _resolve(value, defs) for key, value in node.items()}


def _structural(node: Any) -> Any:
    """Rewrite one resolved JSON Schema node (recursively) into a structural one."""
    if isinstance(node, list):
        return [_structural(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "anyOf" in node:
        variants = node.pop("anyOf")
        typed = [v for v in variants if v.get("type") != "null"]
        if len(typed) != 1 or len(typed) == len(variants):
            raise SchemaError(f"cannot express anyOf {variants!r} structurally")
        node = {**typed[0], **node, "nullable": True}
    if node.get("default", 0) is None:
        del node["default"]
    if "const" in node:  # a one-value Literal: a CRD knows enum, not const
        node["enum"] = [node.pop("const")]
    for key in _DROPPED_KEYS:
        node.pop(key, None)
    extra = node.get("additionalProperties")
    if extra is False or extra is True or node.get("x-kubernetes-preserve-unknown-fields"):
        # False: pruning does that job; True/preserve: spelled as preserve-unknown-fields.
        if extra is True:
            node["x-kubernetes-preserve-unknown-fields"] = True
        node.pop("additionalProperties", None)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _structural(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value)
        else:
            out[key] = value
    return _ordered(out)


# A stable, readable key order for the YAML (type first, rules last).
_ORDER = [
    "description",
    "type",
    "format",
    "nullable",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "maxProperties",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
]


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    rank = {key: index for index, key in enumerate(_ORDER)}
    return dict(sorted(node.items(), key=lambda item: (rank.get(item[0], len(_ORDER)), item[0])))


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI schema of one model (spec or status)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    schema: dict[str, Any] = _structural(_resolve(raw, defs))
    return schema


def spec_schema() -> dict[str, Any]:
    schema = model_schema(TaskQueueSpec)
    for name in _DEFAULTED_OBJECTS:
        # The full default object, not {}: the apiserver checks CEL rules against the
        # default itself, before nested defaults would fill it in.
        default = TaskQueueSpec.model_fields[name].default
        schema["properties"][name]["default"] = default.model_dump(by_alias=True, mode="json")
        schema["properties"][name] = _ordered(schema["properties"][name])
    return schema


def status_schema(model: type[BaseModel] = TaskQueueStatus) -> dict[str, Any]:
    schema = model_schema(model)
    conditions = schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    conditions["items"]["required"] = ["type", "status"]
    return schema


def _column(name: str, path: str, kind: str = "integer", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "jsonPath": path, **extra}


def build_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition as a dict."""
    root = {
        "description": "A Redis task queue and the fleet of workers that serves it.",
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
        "x-kubernetes-validations": [
            {
                # The name becomes the label value `taskfleet.dev/queue`, at most 63 chars.
                "rule": "size(self.metadata.name) <= 63",
                "message": "TaskQueue names are at most 63 characters "
                "(the name is the worker pods' taskfleet.dev/queue label value)",
            }
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": ["taskfleet"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        _column("Replicas", ".spec.replicas"),
                        _column("Desired", ".status.desiredReplicas"),
                        _column("Ready", ".status.readyReplicas"),
                        _column("Pending", ".status.pending"),
                        _column("Running", ".status.running"),
                        _column("Dead", ".status.dead"),
                        _column("Age", ".metadata.creationTimestamp", "date"),
                    ],
                }
            ],
        },
    }


def build_quota_crd() -> dict[str, Any]:
    """The ProviderQuota CustomResourceDefinition as a dict."""
    root = {
        "description": "A provider quota (requests, tokens per period, concurrency) shared "
        "by every queue of one Redis that names it.",
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": model_schema(quotaspec.ProviderQuotaSpec),
            "status": status_schema(quotaspec.ProviderQuotaStatus),
        },
        "x-kubernetes-validations": [
            {
                "rule": "has(self.spec.quotaName) || "
                f"self.metadata.name.matches('{quotaspec.QUOTA_NAME_PATTERN}')",
                "message": "the name is the quota's name on Redis, at most 200 characters: "
                "set spec.quotaName for a longer one",
            }
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": QUOTA_CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": quotaspec.KIND,
                "listKind": f"{quotaspec.KIND}List",
                "plural": quotaspec.PLURAL,
                "singular": quotaspec.SINGULAR,
                "shortNames": quotaspec.SHORT_NAMES,
                "categories": ["taskfleet"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        _column("Quota", ".status.quotaName", "string"),
                        _column("Paused", ".status.paused", "boolean"),
                        _column("Reserved", ".status.reserved"),
                        _column("Age", ".metadata.creationTimestamp", "date"),
                    ],
                }
            ],
        },
    }


def render() -> str:
    """The TaskQueue CRD file's exact text."""
    return HEADER + yaml.safe_dump(build_crd(), sort_keys=False, width=100)


def render_quota() -> str:
    """The ProviderQuota CRD file's exact text."""
    return QUOTA_HEADER + yaml.safe_dump(build_quota_crd(), sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m taskfleet_operator.crdgen")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="DIR", type=Path, help="write the CRD into DIR")
    mode.add_argument("--check", metavar="DIR", type=Path, help="fail if DIR's CRD drifted")
    args = parser.parse_args(argv)
    texts = {FILENAME: render(), QUOTA_FILENAME: render_quota()}
    if args.write is not None:
        args.write.mkdir(parents=True, exist_ok=True)
        for filename, text in texts.items():
            (args.write / filename).write_text(text)
        return 0
    drifted = 0
    for filename, text in texts.items():
        target: Path = args.check / filename
        if not target.is_file() or target.read_text() != text:
            print(f"{target} is out of date with the models: run `make crds`", file=sys.stderr)
            drifted = 1
    return drifted


if __name__ == "__main__":
    sys.exit(main())
