"""The protocol's number rule (docs/protocol.md, section 1): every JSON text a client
stores (payloads, results, progress) holds only finite numbers, and its integers lie
within ±(2^53-1), the integers every reader (a JavaScript double, Lua's) holds exactly.

The check is cheap where it runs on every enqueue and result: non-finite floats are
refused by the encoder itself (``allow_nan=False``), and an integer can only be out of
range where the encoded text has an integer token of 16 or more digits, found by C
passes over its bytes (``bytes.translate`` to a shape, then substring searches: a regex
costs ten times more; a float's fraction, often that long, is told apart by the shape);
only then is the value walked, to find the offending one and name its path.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

#: How the encoder's ValueError for a NaN or an infinity begins (``allow_nan=False``)
NON_FINITE_ERROR = "Out of range float values"

__all__ = [
    "NON_FINITE_ERROR",
    "SAFE_INTEGER_MAX",
    "number_problem",
    "stored_number_problem",
    "value_problem",
]

#: 2^53-1: the largest integer a double (JavaScript's number, Lua 5.1's) holds exactly.
SAFE_INTEGER_MAX = 2**53 - 1

# 2^53 has 16 digits: a text without such a run holds no integer out of range
_LONG_DIGITS = re.compile(r"[0-9]{16}")
# every digit to "0", a float's "." and exponent letters to "f", every other byte to " ":
# an integer token of 16 digits or more is then " " and 16 "0"s not followed by more "0"s
# and an "f" (a float's integer part), while a float's fraction follows an "f"
_DIGITS_TO_ZERO = bytes(
    0x30 if 0x30 <= b <= 0x39 else (0x66 if b in b".eE" else 0x20) for b in range(256)
)
_ZEROS = b"0" * 16
_RUN = b" " + _ZEROS
_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")
# A JSON string, or a number (sign, digits, fraction, exponent) outside strings
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|(-?[0-9]+)(\.[0-9]+)?([eE][+-]?[0-9]+)?')


def _step(path: str, key: object) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    if isinstance(key, str) and _IDENTIFIER.match(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(str(key))}]"


def _integer_shown(value: int) -> str:
    return str(value) if value.bit_length() <= 256 else f"of {value.bit_length()} bits"


def value_problem(value: object, path: str) -> str | None:
    """The first value of ``value`` (walked in order, no recursion) that breaks the rule,
    as one line naming its path (``payload.items[3].id: ...``); None when none does."""
    # each entry: a value and its place as (parent's place, key); rendered only on a hit
    stack: list[tuple[object, tuple[Any, ...]]] = [(value, ())]
    seen: set[int] = set()  # a cycle (the encoder refuses it first) must not loop here
    while stack:
        item, place = stack.pop()
        cls = item.__class__
        if cls is str or cls is bool or item is None:
            continue
        if isinstance(item, int):
            if not -SAFE_INTEGER_MAX <= item <= SAFE_INTEGER_MAX:
                where = _render(path, place)
                return (
                    f"{where}: integer {_integer_shown(item)} is outside ±(2^53-1); "
                    "send it as a string"
                )
        elif isinstance(item, float):
            if not math.isfinite(item):
                shown = "NaN" if math.isnan(item) else ("Infinity" if item > 0 else "-Infinity")
                return (
                    f"{_render(path, place)}: {shown} is not a finite number; JSON cannot carry it"
                )
        elif id(item) in seen:
            continue
        elif isinstance(item, dict):
            seen.add(id(item))
            stack.extend((v, (place, k)) for k, v in reversed(list(item.items())))
        elif isinstance(item, list | tuple):
            seen.add(id(item))
            stack.extend((v, (place, i)) for i, v in reversed(list(enumerate(item))))
    return None


def _render(path: str, place: tuple[Any, ...]) -> str:
    keys: list[object] = []
    while place:
        place, key = place
        keys.append(key)
    for key in reversed(keys):
        path = _step(path, key)
    return path


def number_problem(value: object, data: bytes, path: str) -> str | None:
    """What breaks the rule in ``value``, whose JSON encoding is ``data`` (UTF-8, so
    already free of non-finite numbers): None at once unless it has a run of 16 digits."""
    if len(data) < 16:
        return None
    shape = data.translate(_DIGITS_TO_ZERO)
    if _ZEROS not in shape:  # the common case: no run of 16 digits at all
        return None
    shape = b" " + shape + b" "
    at = shape.find(_RUN)
    while at >= 0:
        end = at + len(_RUN)
        while shape[end] == 0x30:  # "0"
            end += 1
        if shape[end] != 0x66:  # "f": a float's integer part, allowed
            return value_problem(value, path)
        at = shape.find(_RUN, end)
    return None


def stored_number_problem(text: str, path: str) -> str | None:
    """What breaks the rule in stored JSON ``text`` (written by an older writer or by hand),
    read as text: an integer literal outside ±(2^53-1). Python reads such an integer
    exactly; a reader in another language would not, so each says so the same way."""
    if _LONG_DIGITS.search(text) is None:
        return None
    for match in _TOKEN.finditer(text):
        digits = match.group(1)
        if digits is None or match.group(2) or match.group(3) or len(digits.lstrip("-")) < 16:
            continue
        if abs(int(digits)) > SAFE_INTEGER_MAX:
            return f"{path}: integer {digits} is outside ±(2^53-1); send it as a string"
    return None
