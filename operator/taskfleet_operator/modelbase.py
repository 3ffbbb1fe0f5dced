"""The base of the CRD's pydantic models: camelCase in YAML, snake_case in Python, frozen,
no unknown fields; CEL rules as ``x-kubernetes-validations`` entries; and the schema
pieces every spec module shares (an opaque core/v1 object, a DNS label)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

JsonDict = dict[str, JsonValue]

#: A Kubernetes name (an RFC 1123 label): volumes, containers, schedules, accounts.
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: An environment variable's name, as core/v1 takes it.
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# Pass-through Kubernetes types: kept as opaque objects so the CRD stays structural
# without copying the core/v1 schemas; the apiserver validates them on the Deployment.
K8S_OBJECT: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
Opaque = Annotated[dict[str, Any], Field(json_schema_extra=K8S_OBJECT)]


def cel(rule: str, message: str, *, field_path: str | None = None) -> JsonDict:
    """One ``x-kubernetes-validations`` entry."""
    entry: JsonDict = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


class CamelModel(BaseModel):
    """Base for CRD models: camelCase names in YAML, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )
