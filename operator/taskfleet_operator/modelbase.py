"""The base of the CRD's pydantic models: camelCase in YAML, snake_case in Python, frozen,
no unknown fields; and CEL rules as ``x-kubernetes-validations`` entries."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, JsonValue
from pydantic.alias_generators import to_camel

JsonDict = dict[str, JsonValue]


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
