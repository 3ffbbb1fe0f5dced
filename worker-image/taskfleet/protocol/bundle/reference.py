"""docs/protocol-scripts.md, rendered from the manifest: a reference per script."""

from __future__ import annotations

from typing import Any

__all__ = ["reference"]


def _cell(text: str) -> str:
    """Text as a table cell: no pipe, no newline, and no '<' a renderer would take for HTML."""
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def _args_table(args: list[dict[str, Any]], first: int) -> list[str]:
    lines = ["| ARGV | name | type | optional | meaning |", "|---|---|---|---|---|"]
    for i, a in enumerate(args, start=first):
        optional = "yes ('' when absent)" if a["optional"] else ""
        lines.append(f"| {i} | `{a['name']}` | {a['type']} | {optional} | {_cell(a['doc'])} |")
    return lines


def reference(manifest: dict[str, Any]) -> str:
    """The page's text: keys, then each script's keys, arguments, records and reply."""
    out = [
        "# Protocol scripts: reference",
        "",
        "Generated from `worker-image/taskfleet/protocol/bundle/manifest.json` by",
        "`python -m taskfleet.protocol.bundle --write` (`make bundle`); `make bundle-check`",
        "fails when it drifts. Do not edit by hand: the declarations are",
        "`worker-image/taskfleet/protocol/signatures.py` (arguments, replies) and",
        "`worker-image/taskfleet/protocol/keys.py` (keys); the scripts are `protocol/lua/`.",
        "",
        f"Protocol version: **{manifest['protocol']}**. Every script is called with",
        "`EVALSHA <sha1> <numkeys> <KEYS...> <ARGV...>`, where KEYS are the keys the script",
        "uses and only those, in the order of its KEYS table below, each",
        f"`{manifest['key_prefix']}` followed by its suffix (`%QUEUE%`: the queue's name; a",
        "prefix key is completed by the script with an id, a pod or a name). An optional",
        "argument is sent as the empty string when absent. A",
        "script with records takes their number in `n` and the records last, one after the",
        "other, each its fields in order. The bundle file is the exact text to load: its",
        "SHA1 is the manifest's `sha1`.",
        "",
        "## Keys",
        "",
        "| name | suffix | type | holds |",
        "|---|---|---|---|",
    ]
    for k in manifest["keys"]:
        suffix = f"`{k['suffix']}`" + ("…" if k["is_prefix"] else "")
        out.append(f"| `{k['name']}` | {suffix} | {k['type']} | {_cell(k['doc'])} |")
    out.append("")
    for name, s in manifest["scripts"].items():
        doc = s["doc"][:1].upper() + s["doc"][1:]
        out += [f"## {name}", "", _cell(doc), ""]
        out.append(f"File `bundle/{s['file']}`, SHA1 `{s['sha1']}`.")
        out.append("")
        uses = ", ".join(f"{i} `{k}`" for i, k in enumerate(s["uses_keys"], start=1))
        out += [f"KEYS: {uses or 'none'}.", ""]
        out += _args_table(s["args"], 1)
        out.append("")
        rep = s["repeated"]
        if rep is not None:
            fields = ", ".join(f"`{f['name']}`" for f in rep["fields"])
            first = len(s["args"]) + 1
            out += [
                f"Then `{rep['count']}` records of {len(rep['fields'])} values ({fields}), "
                f"from ARGV {first} on:",
                "",
            ]
            out += _args_table(rep["fields"], 1)
            out.append("")
        out += [f"Reply: {_cell(s['reply'])}", ""]
    return "\n".join(out)
