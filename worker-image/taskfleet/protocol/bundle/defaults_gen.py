"""Generate the defaults and bounds of every language from ``protocol/defaults_table.py``.

``generated()`` is what ``make bundle`` writes and ``make bundle-check`` compares:
``protocol/bounds.py``, ``protocol/defaults.py`` (whose ``lua_defaults`` the bundle's Lua
``DEFAULTS`` come from) and, in a source tree, ``clients/node/src/protocol/defaults.ts``
and the config table of docs/protocol.md (between its markers).
``literal_defaults()`` is the other half of the check: a config default written as a
literal beside its field's name anywhere else (``cfg_num('lease_ttl_s', 30)``,
``leaseTtlS: 30``, ``DEFAULT_LEASE_TTL_S = 30``) is named, so the table stays the only one.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from taskfleet.protocol import defaults_table as table
from taskfleet.protocol.defaults_table import ConfigField

__all__ = ["TableError", "generated", "literal_defaults", "lua_defaults", "protocol_md", "values"]

PROTOCOL = Path(__file__).resolve().parent.parent
#: The source tree's root, when this runs from one (worker-image/taskfleet/protocol/bundle).
ROOT = PROTOCOL.parents[2]
WIDTH = 100
MARK = "generated from taskfleet/protocol/defaults_table.py by `make bundle`"


class TableError(Exception):
    """The table breaks a promise of its own (one line naming it; ``make bundle`` exits 2)."""


def values() -> dict[str, int | float]:
    """Every bound's value, each expression evaluated over the bounds before it."""
    out: dict[str, int | float] = {}
    for bound in table.BOUNDS:
        value = eval(bound.expr, {"__builtins__": {}}, dict(out))  # the table's own text
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise TableError(f"{bound.name}: {bound.expr!r} is not a number")
        out[bound.name] = value
    for promise in table.PROMISES:
        if not eval(promise, {"__builtins__": {}}, dict(out)):
            raise TableError(f"bounds break the promise {promise}")
    return out


def _number(value: int | float | str, bounds: dict[str, int | float]) -> float:
    return float(bounds[value]) if isinstance(value, str) else float(value)


def _check(bounds: dict[str, int | float]) -> None:
    for f in table.FIELDS:
        low, high = _number(f.low, bounds), _number(f.high, bounds)
        value = f.default
        if value is not None:
            if f.kind == "int" and not isinstance(value, int):
                raise TableError(f"{f.name}: default {value!r} is not an int")
            if not ((value > low if f.above else value >= low) and value <= high):
                raise TableError(f"{f.name}: default {value!r} outside its bounds")
        if f.off is not None and f.default is not None:
            raise TableError(f"{f.name}: only a field unset by default has an off value")


def _py_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _py_num(value: int | float | str) -> str:
    return value if isinstance(value, str) else repr(value)


def _ts_num(value: int | float | str) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else repr(value)


def _lua_text(value: int | float) -> str:
    """As ``defaults.encode`` stores it in the config hash."""
    return repr(value) if isinstance(value, float) else str(value)


def lua_defaults() -> dict[str, str]:
    """The scripts' ``DEFAULTS`` straight from the table (``build`` reads them here, so one
    ``make bundle`` after an edit of the table builds the scripts from the new values)."""
    return {f.name: _lua_text(f.default) for f in table.FIELDS if f.default is not None}


def _comment(prefix: str, text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(
        text, WIDTH, initial_indent=indent + prefix, subsequent_indent=indent + prefix
    )


def _call(head: str, args: list[str], tail: str, indent: str) -> list[str]:
    """``head(args)tail`` laid out as ruff format lays it out."""
    one = f"{indent}{head}({', '.join(args)}){tail}"
    if len(one) <= WIDTH:
        return [one]
    inner = f"{indent}    {', '.join(args)}"
    if len(inner) <= WIDTH:
        return [f"{indent}{head}(", inner, f"{indent}){tail}"]
    return [f"{indent}{head}(", *(f"{indent}    {a}," for a in args), f"{indent}){tail}"]


def _import(module: str, names: list[str]) -> list[str]:
    one = f"from {module} import {', '.join(names)}"
    if len(one) <= WIDTH:
        return [one]
    return [f"from {module} import (", *(f"    {n}," for n in names), ")"]


def bounds_py() -> str:
    values()
    lines = ['"""' + table.BOUNDS_DOC.rstrip("\n"), "", f"This file is {MARK}.", '"""', ""]
    lines += ["from __future__ import annotations", ""]
    for bound in table.BOUNDS:
        lines += _comment("#: ", bound.doc)
        lines.append(f"{bound.name} = {bound.expr}")
    return "\n".join(lines) + "\n"


def defaults_py() -> str:
    bounds = values()
    _check(bounds)
    used = sorted({v for f in table.FIELDS for v in (f.low, f.high) if isinstance(v, str)})
    lines = [
        '"""The queue config\'s defaults and bounds as plain data.',
        "",
        f"This file is {MARK}",
        "(edit the table, not this file).",
        "",
        "``QueueConfig`` takes its defaults and bounds from here, and the Lua scripts' "
        "``DEFAULTS`` from",
        "``lua_defaults``, so a worker builds its scripts without loading the config model "
        "(and pydantic)",
        "on its way to its first claim.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import NamedTuple, TypedDict",
        "",
    ]
    lines += _import("taskfleet.protocol.bounds", used)
    lines += [
        "",
        "__all__ = [",
        '    "CONFIG_DEFAULTS",',
        '    "CONFIG_LIMITS",',
        '    "DEFAULT",',
        '    "LUA_DEFAULTS",',
        '    "ConfigDefaults",',
        '    "ConfigLimit",',
        '    "Defaults",',
        '    "encode",',
        '    "lua_defaults",',
        "]",
        "",
        "",
        "class ConfigDefaults(TypedDict):",
    ]
    for f in table.FIELDS:
        kind = f.kind + (" | None" if f.default is None else "")
        lines.append(f"    {f.name}: {kind}")
    lines += [
        "",
        "",
        "class Defaults(NamedTuple):",
        '    """Every field\'s default by attribute (``DEFAULT.lease_ttl_s``), for code',
        '    outside the protocol, which spells no field name (tests/codebase/test_layers.py)."""',
        "",
    ]
    for f in table.FIELDS:
        kind = f.kind + (" | None" if f.default is None else "")
        lines.append(f"    {f.name}: {kind}")
    lines += [
        "",
        "",
        "class ConfigLimit(NamedTuple):",
        '    """A field\'s bounds (``low`` excluded when ``above``, else included; ``high`` '
        "included),",
        '    its unit and what it is."""',
        "",
        "    low: float",
        "    above: bool",
        "    high: float",
        "    unit: str",
        "    doc: str",
        "",
        "",
        "#: Every ``QueueConfig`` field and its default (None: unset, the field is left out).",
        "CONFIG_DEFAULTS: ConfigDefaults = {",
    ]
    lines += [f"    {_py_str(f.name)}: {_py_num_or_none(f.default)}," for f in table.FIELDS]
    lines += [
        "}",
        "#: The same by attribute: what the operator's models and the help texts read.",
        "DEFAULT = Defaults(**CONFIG_DEFAULTS)",
        "#: Every field's bounds, unit and doc.",
        "CONFIG_LIMITS: dict[str, ConfigLimit] = {",
    ]
    for f in table.FIELDS:
        args = [_py_num(f.low), str(f.above), _py_num(f.high), _py_str(f.unit), _py_str(f.doc)]
        lines += _call(f"{_py_str(f.name)}: ConfigLimit", args, ",", "    ")
    lines += [
        "}",
        "#: What the scripts read for a field the config hash leaves unset, as stored text (a",
        "#: field unset by default is absent: the scripts read it as its ``off``, 0 for a limit).",
        "LUA_DEFAULTS: dict[str, str] = {",
    ]
    for f in table.FIELDS:
        if f.default is not None:
            lines.append(f"    {_py_str(f.name)}: {_py_str(_lua_text(f.default))},")
    lines += [
        "}",
        "",
        "",
        "def encode(value: object) -> str:",
        '    """A config value as stored in the ``config`` hash."""',
        "    if isinstance(value, bool):",
        '        return "1" if value else "0"',
        "    return repr(value) if isinstance(value, float) else str(value)",
        "",
        "",
        "def lua_defaults() -> dict[str, str]:",
        '    """Defaults of the Lua scripts for config fields absent from the hash."""',
        "    return dict(LUA_DEFAULTS)",
    ]
    return "\n".join(lines) + "\n"


def _py_num_or_none(value: int | float | None) -> str:
    return "None" if value is None else repr(value)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def defaults_ts() -> str:
    bounds = values()
    _check(bounds)
    lines = [
        "/**",
        " * The queue config's defaults and the bounds every client keeps: the Python package's",
        " * `protocol/bounds.py` and `protocol/defaults.py`. This file is generated from",
        " * `taskfleet/protocol/defaults_table.py` by `make bundle`: edit the table, not this",
        " * file.",
        " *",
        " * @module",
        " */",
        "",
    ]
    for bound in table.BOUNDS:
        doc = bound.doc.replace("``", "`")
        if len(f"/** {doc} */") <= WIDTH:
            lines.append(f"/** {doc} */")
        else:
            lines += ["/**", *_comment(" * ", doc), " */"]
        lines.append(f"export const {bound.name} = {bound.expr};")
    lines += [
        "",
        "/** A field of a queue's `config` hash: its stored name, kind, bounds, default, unit. */",
        "export interface ConfigFieldSpec {",
        "  readonly stored: string;",
        "  readonly int: boolean;",
        "  /** The lower bound: excluded when `above` (a limit of 0 is unset), else included. */",
        "  readonly min: number;",
        "  readonly above: boolean;",
        "  readonly max: number;",
        "  /** null: unset (no limit). */",
        "  readonly default: number | null;",
        "  readonly unit: string;",
        "  readonly doc: string;",
        "}",
        "",
        "/** Every field of the `config` hash by its camelCase name, in QueueConfig's order. */",
        "export const CONFIG_FIELDS = {",
    ]
    for f in table.FIELDS:
        default = "null" if f.default is None else _ts_num(f.default)
        lines += [
            f"  {camel(f.name)}: {{",
            f'    stored: "{f.name}",',
            f"    int: {'true' if f.kind == 'int' else 'false'},",
            f"    min: {_ts_num(f.low)},",
            f"    above: {'true' if f.above else 'false'},",
            f"    max: {_ts_num(f.high)},",
            f"    default: {default},",
            f'    unit: "{f.unit}",',
            f"    doc: {_py_str(f.doc)},",
            "  },",
        ]
    lines += ["} as const satisfies Record<string, ConfigFieldSpec>;"]
    return "\n".join(lines) + "\n"


DOC_START = (
    "<!-- the config table: generated from worker-image/taskfleet/protocol/defaults_table.py -->"
)
DOC_END = "<!-- end of the generated config table -->"


def _interval(f: ConfigField) -> str:
    return f"{'(' if f.above else '['}{f.low}, {f.high}]"


def config_table_md() -> str:
    """docs/protocol.md's table of the config hash's fields."""
    lines = [
        "| field | unit | default | bounds | meaning | TaskQueue spec field |",
        "|---|---|---|---|---|---|",
    ]
    for f in table.FIELDS:
        default = "none" if f.default is None else _ts_num(f.default)
        spec = f"`{f.spec}`" if f.spec else "—"
        lines.append(f"| `{f.name}` | {f.unit} | {default} | {_interval(f)} | {f.doc} | {spec} |")
    return "\n".join(lines) + "\n"


def protocol_md(text: str) -> str:
    """``text`` (docs/protocol.md) with its config table as the table states it."""
    start, end = text.find(DOC_START), text.find(DOC_END)
    if start < 0 or end < start:
        raise TableError("docs/protocol.md: the markers of the generated config table are gone")
    return text[: start + len(DOC_START)] + "\n" + config_table_md() + text[end:]


def generated(root: Path = ROOT) -> dict[Path, str]:
    """Every file the table makes and its text (the TypeScript one and the docs' table only
    in a source tree)."""
    out = {PROTOCOL / "bounds.py": bounds_py(), PROTOCOL / "defaults.py": defaults_py()}
    node = root / "clients" / "node" / "src" / "protocol" / "defaults.ts"
    if node.parent.parent.is_dir():
        out[node] = defaults_ts()
    doc = root / "docs" / "protocol.md"
    if doc.is_file():
        out[doc] = protocol_md(doc.read_text(encoding="utf-8"))
    return out


# -- literal defaults outside the table -------------------------------------------------

_LUA_FALLBACK = re.compile(r"\bcfg_num\(\s*'(\w+)'\s*,[^)]*\)")
#: ``cfg_num('x') or V``: how a script reads a field unset by default (V: the table's off).
_LUA_OFF = re.compile(r"\bcfg_num\(\s*'(\w+)'\s*\)\s*or\s+([-\w.]+)")


def _spellings(value: int | float) -> str:
    """A regex of the ways code writes ``value``: 30, 30.0, 259_200, 1024 * 1024, .2."""
    forms = {re.escape(repr(value))}
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        forms |= {str(value), f"{value}\\.0*", f"{value:_}"}
        if value >= 1024 and value % 1024 == 0:
            forms.add(rf"{value // 1024}\s*\*\s*1024")
    elif 0 < value < 1:
        forms.add(re.escape(repr(value).removeprefix("0")))
    return "(?:" + "|".join(sorted(forms, key=len, reverse=True)) + ")"


def _patterns(f: ConfigField) -> re.Pattern[str]:
    assert f.default is not None
    names = "|".join(map(re.escape, (f.name, camel(f.name), "DEFAULT_" + f.name.upper())))
    name = rf"\b(?:{names})\b['\"]?"
    value = _spellings(f.default) + r"(?![\w.])"
    forms = [
        rf"{name}\s*(?::[^=\n,;]*)?(?<![<>!=])=(?!=)\s*{value}",  # x = 30, x: float = 30
        rf"{name}\s*:\s*{value}",  # "x": 30, x: 30
        rf"{name},[^\n]*,\s*{value}\s*\)",  # f("x", false, 0, MAX, 30)
        rf"{name}[^\n]*(?:\?\?|\bor\b)\s*{value}",  # x ?? 30, x or 30
        rf"{name}[^\n]*=\s*Field\(\s*(?:default=)?{value}",  # x: int = Field(default=30
    ]
    return re.compile("|".join(f"(?:{form})" for form in forms))


def _sources(root: Path) -> list[Path]:
    found = [
        *(root / "worker-image" / "taskfleet").rglob("*.py"),
        *(root / "worker-image" / "taskfleet" / "protocol" / "lua").rglob("*.lua"),
        *(root / "operator" / "taskfleet_operator").rglob("*.py"),
        *(root / "clients" / "node" / "src").rglob("*.ts"),
    ]
    skip = {*generated(root), PROTOCOL / "defaults_table.py", Path(__file__).resolve()}
    return sorted(p for p in found if p not in skip)


def _is(text: str, value: int | float | None) -> bool:
    try:
        return value is not None and float(text) == value
    except ValueError:
        return False


def literal_defaults(root: Path = ROOT) -> list[str]:
    """Each place a config default is written as a literal instead of read from the table."""
    patterns = [(f, _patterns(f)) for f in table.FIELDS if f.default is not None]
    fields = {f.name: f for f in table.FIELDS}
    problems = []
    for path in _sources(root):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(root)
        for found in _LUA_FALLBACK.finditer(text):
            line = text.count("\n", 0, found.start()) + 1
            problems.append(
                f"{rel}:{line}: cfg_num takes the field's name only: its default is the table's"
            )
        for found in _LUA_OFF.finditer(text):
            field = fields.get(found.group(1))
            if field is not None and field.default is None and not _is(found.group(2), field.off):
                line = text.count("\n", 0, found.start()) + 1
                problems.append(
                    f"{rel}:{line}: an unset {field.name} reads as its off value, {field.off}"
                )
        for field, pattern in patterns:
            for found in pattern.finditer(text):
                line = text.count("\n", 0, found.start()) + 1
                problems.append(
                    f"{rel}:{line}: {field.name}'s default written as a literal "
                    "(read it from the generated defaults)"
                )
    return problems
