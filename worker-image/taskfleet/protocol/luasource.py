"""The text of each Lua script, as Redis gets it.

A script is sent as one chunk: a generated prelude (KEYS bound to ``K_<NAME>`` locals in
:data:`keys.SCRIPT_KEYS` order, ``DEFAULTS`` from ``defaults.CONFIG_DEFAULTS``,
:class:`config.QueueConfig`'s defaults), the definitions of ``lua/lib/`` that the script
reaches (included, never copied), then ``lua/<name>.lua`` itself.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

from taskfleet.protocol.defaults import lua_defaults
from taskfleet.protocol.keys import SCRIPT_KEYS

__all__ = ["LIB", "NAMES", "prelude", "source"]

#: Shared fragments, in inclusion order.
LIB = ("core", "enqueue", "claim")
#: One file per atomic operation.
NAMES = (
    "enqueue",
    "claim",
    "extend",
    "complete",
    "fail",
    "release",
    "requeue",
    "register",
    "deregister",
    "disown",
    "sweep",
    "schedule_put",
    "schedule_delete",
    "schedule_pause",
    "schedule_due",
    "schedule_fire",
    "cancel",
    "retry",
    "drop",
    "report",
    "watch",
)


def _lua_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _read(rel: str) -> str:
    return resources.files("taskfleet.protocol").joinpath("lua", rel).read_text(encoding="utf-8")


_DEFINITION = re.compile(r"^local (?:function )?([A-Za-z_]\w*)")
_NAME = re.compile(r"[A-Za-z_]\w*")


@functools.cache
def _definitions() -> tuple[tuple[str, str, frozenset[str]], ...]:
    """The libraries' top-level definitions in order: (name, text, names it uses).

    A definition is a line ``local function NAME(`` or ``local NAME =`` at the start of a
    line, with the comment lines above it, up to the next one; lua/lib/ holds nothing else
    at the top level (a test checks it).
    """
    out: list[tuple[str, str, frozenset[str]]] = []
    for lib in LIB:
        lines = _read(f"lib/{lib}.lua").splitlines(keepends=True)
        starts = [i for i, line in enumerate(lines) if _DEFINITION.match(line)]
        for n, start in enumerate(starts):
            first = start
            while first > 0 and lines[first - 1].startswith("--"):
                first -= 1
            end = starts[n + 1] if n + 1 < len(starts) else len(lines)
            while end > start + 1 and lines[end - 1].startswith("--"):
                end -= 1  # the next definition's comment
            found = _DEFINITION.match(lines[start])
            assert found is not None
            text = "".join(lines[first:end])
            out.append((found.group(1), text, _names(text)))
    return tuple(out)


def _names(code: str) -> frozenset[str]:
    """The words of Lua ``code`` outside its comments."""
    return frozenset(_NAME.findall(_COMMENT.sub("", code)))


_COMMENT = re.compile(r"--[^\n]*")


def _closure(roots: frozenset[str]) -> set[str]:
    """``roots`` and every library definition they use, directly or through others."""
    wanted = set(roots)
    grew = True
    while grew:  # to a fixed point: what the wanted definitions use is wanted too
        grew = False
        for name, _text, uses in _definitions():
            if name in wanted and not uses <= wanted:
                wanted |= uses
                grew = True
    return wanted


_LAZY = re.compile(r"^-- lazy: (.+)$", re.M)


def _lazy_roots(body: str) -> list[str]:
    """The definitions a script's ``-- lazy: NAME[, NAME...]`` line asks to build lazily."""
    found = _LAZY.search(body)
    return [n.strip() for n in found.group(1).split(",")] if found else []


def _needed(body: str) -> str:
    """The library definitions ``body`` uses, directly or through others, in their order.

    Redis runs a script's whole text on every call, so each definition it carries costs
    every call (a closure or a table built): the 39 of lua/lib/ about 4 µs of Redis CPU.
    A script carries only those it reaches. Names are matched as words outside comments;
    one that also appears in a string only adds a definition that was not needed.

    A script's ``-- lazy: NAME`` line marks definitions its common path never calls (the
    enqueue's hand-off to idle workers): what only they need is built on their first
    call, inside one loader, so a call that does not reach them builds two closures, not
    a score.
    """
    lazy = _lazy_roots(body)
    eager = _closure(_names(body) - frozenset(lazy))
    if eager & set(lazy) or not set(lazy) <= {name for name, _t, _u in _definitions()}:
        raise ValueError(f"lazy {lazy}: each must be a library definition nothing else uses")
    later = _closure(frozenset(lazy)) - eager
    texts = [text for name, text, _uses in _definitions() if name in eager]
    if not later:
        return "".join(texts)
    roots = ", ".join(lazy)
    stubs = "".join(
        f"{name} = function(...) {roots} = build_lazy() return {name}(...) end\n" for name in lazy
    )
    return (
        "".join(texts)
        + f"-- built on the first call of {roots}: what only they use\nlocal {roots}\n"
        + "local function build_lazy()\n"
        + "".join(text for name, text, _uses in _definitions() if name in later)
        + f"return {roots}\nend\n{stubs}"
    )


@functools.cache
def prelude() -> str:
    binds = "\n".join(
        f"local K_{name.upper()} = KEYS[{i}]" for i, name in enumerate(SCRIPT_KEYS, start=1)
    )
    defaults = ", ".join(f"{k} = {_lua_string(v)}" for k, v in sorted(lua_defaults().items()))
    return (
        "-- generated by taskfleet/protocol/scripts.py: keys.SCRIPT_KEYS and "
        "defaults.CONFIG_DEFAULTS, then what the script uses of lua/lib/\n"
        f"{binds}\nlocal DEFAULTS = {{{defaults}}}\n"
    )


@functools.cache
def source(name: str) -> str:
    """The full text sent to Redis for script ``name``."""
    if name not in NAMES:
        raise KeyError(f"unknown script {name!r}")
    body = _read(f"{name}.lua")
    return prelude() + _needed(body) + f"-- {name}.lua\n" + body
