"""How deep JSON text nests, found without parsing it (parsers recurse, and fail past
about a thousand levels with a RecursionError, or pydantic's serialiser far sooner)."""

from __future__ import annotations

import re

from taskfleet.protocol import bounds

__all__ = ["json_depth", "nested_too_deep"]

#: A JSON string (the unrolled form: one C loop per run of plain characters)
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")


def json_depth(text: str, limit: int = bounds.MAX_PAYLOAD_DEPTH) -> int:
    """How deep arrays and objects nest in JSON ``text`` (brackets in strings don't count),
    counted up to ``limit + 1``. Each pass drops the innermost pairs, in C: as many passes
    as levels, however wide the payload."""
    brackets = _NOT_BRACKETS.sub("", _JSON_STRING.sub("", text))
    depth = 0
    while brackets and depth <= limit:
        shorter = _INNERMOST.sub("", brackets)
        if len(shorter) == len(brackets):
            break  # not JSON (never so here): no deeper than counted
        brackets, depth = shorter, depth + 1
    return depth


def nested_too_deep(text: str, limit: int = bounds.MAX_PAYLOAD_DEPTH) -> bool:
    """Whether JSON ``text`` nests deeper than ``limit``. Cheap for nearly every text:
    one with fewer brackets than the limit can't nest deeper."""
    return text.count("[") + text.count("{") > limit and json_depth(text, limit) > limit
