"""The script bundle built from ``lua/``: each script's exact text, the manifest, the reference.

A script is ``lua/<name>.lua``; a helper is ``lua/includes/<name>.lua``, defining one
local (``local function NAME`` or ``local NAME``, or state ``local <NAME in capitals>``, with
constants of its own beside it). A
file names what it needs with lines ``--- @include "NAME"`` at its top, and with
``--- @include-lazy "NAME"`` a helper its common path never calls (the enqueue's hand-off
to idle workers, ``flush_counts``'s resolution of dependants): the lazy helpers of a
script (its own and those of the helpers it carries) are declared at the top and built
together, with what only they need, on the first call of any of them. A lazy include of a
helper that something else of the script needs at once is simply built at once.
Redis runs a script's whole text on every call, so each definition it carries costs every
call (a closure or a table built): a script carries what it includes, directly or through
its helpers, each once, in dependency order, and nothing else. A cycle, an unknown
include, an include never used, or a helper used without being included is a build
error.

Each bundle file is a generated prelude (a comment naming the keys the script uses, and
only those, in the order of its ``uses_keys``, and its arguments; ``DEFAULTS`` from
``defaults.CONFIG_DEFAULTS`` when it reads the config; ``RECORD(i)`` from ``signatures``),
then its helpers, then the script. The sources name a key ``K_<NAME>`` and an argument
``ARG_<NAME>``; the bundle's code says ``KEYS[i]``, ``ARGV[i]`` (a shared key: its string)
instead, binding no local to them: each local a helper's closure captures costs every call
a walk of Lua's list of open upvalues, which held some 60 locals here (a third of a
claim's fixed cost; bench/journal/2026-11-30-script-prelude.md).
"""

from __future__ import annotations

import hashlib
import json
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskfleet.protocol.bundle.defaults_gen import lua_defaults
from taskfleet.protocol.keys import KEY_DOCS, PREFIX, SCRIPT_KEYS, SHARED_KEYS, QueueKeys
from taskfleet.protocol.signatures import PROTOCOL, SCRIPTS, Script, Wire

__all__ = ["BuildError", "Bundle", "Param", "build", "params"]

LUA = Path(__file__).resolve().parent.parent / "lua"

_INCLUDE = re.compile(r'^--- @include(-lazy)? "([A-Za-z_]\w*)"$')
_DIRECTIVE = re.compile(r"^--- @")
_COMMENT = re.compile(r"--[^\n]*")
_WORD = re.compile(r"[A-Za-z_]\w*")
_KEY = re.compile(r"\bK_([A-Z_]+)\b")


class BuildError(Exception):
    """A source the bundle cannot be built from: one line naming the file and the fault."""


@dataclass(frozen=True, slots=True)
class Param:
    """One argument as the manifest states it."""

    name: str
    type: str
    optional: bool
    doc: str

    def entry(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "optional": self.optional, "doc": self.doc}


def params(declared: type[tuple[Any, ...]]) -> list[Param]:
    """The fields of a ``signatures`` NamedTuple, in order, with their wire types and docs."""
    hints = typing.get_type_hints(declared, include_extras=True)
    out = []
    for name in declared._fields:  # type: ignore[attr-defined]
        meta = getattr(hints[name], "__metadata__", ())
        wires = [m for m in meta if isinstance(m, Wire)]
        docs = [m for m in meta if isinstance(m, str)]
        if len(wires) != 1 or len(docs) != 1:
            raise BuildError(f"{declared.__name__}.{name}: declare one wire type and one doc")
        out.append(Param(name, wires[0].type, wires[0].optional, docs[0]))
    return out


@dataclass(frozen=True, slots=True)
class _Source:
    name: str
    path: str  # relative to lua/, for messages and markers
    includes: tuple[str, ...]
    lazy: tuple[str, ...]
    text: str  # without its directive lines


def _parse(path: Path, rel: str, name: str) -> _Source:
    includes: list[str] = []
    lazy: list[str] = []
    kept: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(keepends=True), 1):
        if _DIRECTIVE.match(line):
            found = _INCLUDE.match(line.rstrip("\n"))
            if not found:
                raise BuildError(f"lua/{rel}:{number}: not an include line: {line.strip()}")
            (lazy if found.group(1) else includes).append(found.group(2))
        else:
            kept.append(line)
    source = _Source(name, rel, tuple(includes), tuple(lazy), "".join(kept))
    words = set(_WORD.findall(_code(source.text)))
    for included in (*includes, *lazy):
        if included not in words and included.upper() not in words:
            # it would cost every call and serve none
            raise BuildError(f"lua/{rel}: includes {included} and never uses it")
    return source


def _code(text: str) -> str:
    return _COMMENT.sub("", text)


class _Helpers:
    """lua/includes/, read once per build."""

    def __init__(self, root: Path) -> None:
        self.by_name: dict[str, _Source] = {}
        for path in sorted(root.joinpath("includes").glob("*.lua")):
            name = path.name.removesuffix(".lua")
            source = _parse(path, f"includes/{path.name}", name)
            defined = rf"^local (function )?({name}|{name.upper()})\b"
            if not re.search(defined, source.text, re.M):
                raise BuildError(f"lua/{source.path}: defines no local {name}")
            self.by_name[name] = source

    def ordered(
        self, roots: tuple[str, ...], where: str, done: set[str], *, lazy: bool = False
    ) -> list[str]:
        """``roots`` and what they include, each after its includes, skipping ``done``;
        with ``lazy``, what they include lazily too (built together with them)."""
        out: list[str] = []
        visiting: list[str] = []

        def visit(name: str, by: str) -> None:
            if name in done:
                return
            if name in visiting:
                cycle = " -> ".join([*visiting[visiting.index(name) :], name])
                raise BuildError(f"lua/includes: include cycle {cycle}")
            helper = self.by_name.get(name)
            if helper is None:
                raise BuildError(f"lua/{by}: unknown include {name!r}")
            visiting.append(name)
            for dep in (*helper.includes, *helper.lazy) if lazy else helper.includes:
                visit(dep, helper.path)
            visiting.pop()
            done.add(name)
            out.append(name)

        for root in roots:
            visit(root, where)
        return out


def _lua_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _names(script: Script, used_keys: list[str], shared: list[str]) -> dict[str, str]:
    """What each ``K_<NAME>`` and ``ARG_<NAME>`` of the sources is in the bundle's code."""
    # a call sends these keys only, in this order (the manifest's uses_keys)
    names = {f"K_{key.upper()}": f"KEYS[{i}]" for i, key in enumerate(used_keys, start=1)}
    # keys every queue shares (keys.SHARED_KEYS): constants, outside the queue's slot
    names |= {f"K_{key.upper()}": _lua_string(SHARED_KEYS[key][0]) for key in shared}
    named = params(script.args)
    names |= {f"ARG_{p.name.upper()}": f"ARGV[{i}]" for i, p in enumerate(named, start=1)}
    return names


def _bind(code: str, names: dict[str, str]) -> str:
    """``code`` with each name of ``names`` replaced by its value, comments left as they are."""
    if not names:
        return code
    word = re.compile(
        r"\b(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")\b"
    )
    out = []
    for line in code.split("\n"):
        cut = line.find("--")
        head, tail = (line, "") if cut < 0 else (line[:cut], line[cut:])
        out.append(word.sub(lambda m: names[m.group(1)], head) + tail)
    return "\n".join(out)


def _prelude(script: Script, names: dict[str, str], with_defaults: bool) -> str:
    lines = [
        f"-- taskfleet protocol {PROTOCOL}: the {script.name} script, generated by "
        "`python -m taskfleet.protocol.bundle --write`",
        f"-- from lua/{script.name}.lua and lua/includes/ (edit those, not this file)",
    ]
    # one comment line per name: the sources' words, the bundle's code
    lines += [f"-- {name} = {value}" for name, value in names.items()]
    if with_defaults:
        defaults = ", ".join(f"{k} = {_lua_string(v)}" for k, v in sorted(lua_defaults().items()))
        lines.append(f"local DEFAULTS = {{{defaults}}}")
    named = params(script.args)
    if script.record is not None:
        fields = params(script.record)
        first = len(named) + 1
        width = len(fields)
        values = ", ".join(["ARGV[b]"] + [f"ARGV[b + {j}]" for j in range(1, width)])
        listed = ", ".join(f.name for f in fields)
        lines += [
            f"-- record i (1..ARG_N): {listed}",
            "local function RECORD(i)",
            f"  local b = {first} + (i - 1) * {width}"
            if width > 1
            else f"  local b = {first - 1} + i",
            f"  return {values}",
            "end",
        ]
    return "\n".join(lines) + "\n"


def _assemble(script: Script, helpers: _Helpers, body: _Source) -> tuple[str, list[str]]:
    eager_names = helpers.ordered(body.includes, body.path, set())
    eager = set(eager_names)
    for root in body.lazy:
        if root in eager:
            raise BuildError(f"lua/{body.path}: lazy {root!r} is also included eagerly")
    # the lazy roots: the script's, then its eager helpers' that nothing needs at once
    roots_list = list(body.lazy)
    for name in eager_names:
        for root in helpers.by_name[name].lazy:
            if root not in eager and root not in roots_list:
                roots_list.append(root)
    later = helpers.ordered(tuple(roots_list), body.path, set(eager), lazy=True)
    parts = []
    if roots_list:
        # declared before the helpers that call them; their stubs build them all at once
        parts.append(f"local {', '.join(roots_list)}, build_lazy\n")
    parts += [f"-- {helpers.by_name[n].path}\n{helpers.by_name[n].text}" for n in eager_names]
    if roots_list:
        roots = ", ".join(roots_list)
        # a stub per root, of two upvalues (a closure costs every call by its upvalues)
        stubs = "".join(
            f"{n} = function(...) build_lazy() return {n}(...) end\n" for n in roots_list
        )
        parts.append(
            f"-- built on the first call of {roots}: what only they use\n"
            "build_lazy = function()\n"
            + "".join(f"-- {helpers.by_name[n].path}\n{helpers.by_name[n].text}" for n in later)
            + f"return {roots}\nend\n"
            + f"local build_all = build_lazy\nbuild_lazy = function() {roots} = build_all() end\n"
            + stubs
        )
    parts.append(f"-- {body.path}\n{body.text}")
    code_after = "".join(parts)
    carried = eager | set(later)
    words = set(_WORD.findall(_code(code_after)))
    for name in helpers.by_name:
        if name not in carried and name in words:
            raise BuildError(f"lua/{body.path}: uses {name} without including it")
    used = set(_KEY.findall(_code(code_after)))
    unknown = used - {k.upper() for k in SCRIPT_KEYS} - {k.upper() for k in SHARED_KEYS}
    if unknown:
        raise BuildError(f"lua/{body.path}: no such key K_{sorted(unknown)[0]}")
    used_keys = [k for k in SCRIPT_KEYS if k.upper() in used]
    shared = [k for k in SHARED_KEYS if k.upper() in used]
    names = _names(script, used_keys, shared)
    text = _prelude(script, names, "cfg" in carried) + _bind(code_after, names)
    return text, used_keys


@dataclass(frozen=True, slots=True)
class Bundle:
    """What ``build`` makes: file name -> exact text, the manifest, the reference page."""

    files: dict[str, str]
    manifest: dict[str, Any]

    def manifest_text(self) -> str:
        return json.dumps(self.manifest, indent=2, ensure_ascii=False) + "\n"


def _header_doc(text: str, name: str) -> str:
    """The script's first comment sentence: ``-- name: what it does.``"""
    first = text.split("\n", 1)[0].removeprefix("--").strip()
    return first.removeprefix(f"{name}:").strip()


def build(root: Path = LUA) -> Bundle:
    """Every script of ``signatures.SCRIPTS`` assembled from ``root`` (lua/)."""
    helpers = _Helpers(root)
    scripts = {p.name.removesuffix(".lua") for p in root.glob("*.lua")}
    if scripts != set(SCRIPTS):
        odd = sorted(scripts ^ set(SCRIPTS))
        raise BuildError(f"lua/: scripts and signatures.SCRIPTS differ: {odd}")
    files: dict[str, str] = {}
    entries: dict[str, Any] = {}
    for name, script in SCRIPTS.items():
        body = _parse(root / f"{name}.lua", f"{name}.lua", name)
        text, used_keys = _assemble(script, helpers, body)
        file = f"{name}.lua"
        files[file] = text
        record = None
        if script.record is not None:
            record = {"count": "n", "fields": [p.entry() for p in params(script.record)]}
        entries[name] = {
            "file": file,
            "sha1": hashlib.sha1(text.encode()).hexdigest(),
            "doc": _header_doc(body.text, name),
            "uses_keys": used_keys,
            "args": [p.entry() for p in params(script.args)],
            "repeated": record,
            "reply": script.reply,
        }
    prefix = QueueKeys("q").prefix
    manifest = {
        "protocol": PROTOCOL,
        "key_prefix": f"{PREFIX}:{{%QUEUE%}}:",
        "keys": [
            {
                "name": name,
                "suffix": full.removeprefix(prefix),
                "is_prefix": full.endswith(":"),
                "type": KEY_DOCS[name][0],
                "doc": KEY_DOCS[name][1],
            }
            for name, full in zip(SCRIPT_KEYS, QueueKeys("q").script_keys, strict=True)
        ],
        "shared_keys": [
            {"name": name, "prefix": prefix, "type": kind, "doc": doc}
            for name, (prefix, kind, doc) in SHARED_KEYS.items()
        ],
        "scripts": entries,
    }
    return Bundle(files, manifest)
