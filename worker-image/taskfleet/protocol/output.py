"""A task's streamed output: the chunks its runs emit, as stored and as read.

A run appends chunks with ``emit.lua`` (fenced by its claim token, capped by
``MAX_OUTPUT_ENTRIES`` and ``MAX_OUTPUT_BYTES`` per task). Each entry of the stream
``output:<id>`` holds ``a`` (the attempt), ``k`` (``t`` text, ``j`` JSON text) and ``d``
(the chunk); the script that finishes the task adds an entry ``end`` (the state it ended
in) and gives the stream the task's retention. A reader blocks on the stream (XREAD
BLOCK): a chunk reaches it as soon as it is written.

Protocol layer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from taskfleet.protocol import bounds
from taskfleet.protocol.calls import Call, one
from taskfleet.protocol.errors import InvalidArgument, ProtocolError, StaleToken
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import text
from taskfleet.protocol.scripts import Op
from taskfleet.protocol.signatures import Emit as EmitArgs

__all__ = [
    "END",
    "OutputChunk",
    "OutputFull",
    "chunk_of",
    "emit_op",
    "output_block",
    "output_range",
    "task_state",
]

#: The field of a stream's end entry (its value: the state the task ended in).
END = "end"
#: Entries one read takes.
READ_COUNT = 1000


class OutputFull(InvalidArgument):
    """The task's output holds ``MAX_OUTPUT_ENTRIES`` entries or ``MAX_OUTPUT_BYTES`` bytes:
    the chunk was not stored."""


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """One chunk of a task's output: its stream id (``since=`` resumes after it), the
    attempt that emitted it, and the chunk (text, or the JSON value a run emitted)."""

    id: str
    attempt: int
    data: Any
    json: bool = False


def chunk_text(chunk: Any) -> tuple[str, str]:
    """What ``emit`` stores of a chunk: ``("t", text)`` for a str, else ``("j", JSON)``."""
    if isinstance(chunk, str):
        return "t", chunk
    try:
        return "j", json.dumps(chunk, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"an output chunk is text or JSON: {exc}") from None


def emit_op(keys: QueueKeys, task_id: str, token: str, kind: str, data: str) -> Op[str]:
    """Append a chunk to the task's output; its entry id. ``StaleToken`` when the run no
    longer holds the task, ``OutputFull`` past the caps."""
    args = EmitArgs(task_id, token, kind, data, bounds.MAX_OUTPUT_ENTRIES, bounds.MAX_OUTPUT_BYTES)

    def decode(raw: Any) -> str:
        if raw == 0:
            raise StaleToken(task_id)
        if raw == -1:
            raise OutputFull(
                f"task {task_id}: its output holds {bounds.MAX_OUTPUT_ENTRIES} chunks or "
                f"{bounds.MAX_OUTPUT_BYTES} bytes (MAX_OUTPUT_ENTRIES, MAX_OUTPUT_BYTES)"
            )
        if isinstance(raw, bytes | str):
            return text(raw)
        raise ProtocolError(f"emit: unexpected reply {raw!r}")

    return Op("emit", keys.script("emit"), args, decode)


def chunk_of(entry_id: Any, fields: Any) -> OutputChunk | str:
    """An entry as read: its chunk, or for the end entry the state the task ended in."""
    if isinstance(fields, list):  # RESP2 without redis-py's parsing: name, value, ...
        fields = dict(zip(fields[::2], fields[1::2], strict=False))
    f = {text(k): v for k, v in fields.items()}
    if END in f:
        return text(f[END])
    raw = f.get("d", b"")
    data: Any = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    is_json = text(f.get("k", b"t")) == "j"
    if is_json:
        try:
            data = json.loads(data)
        except ValueError:
            is_json = False  # written by a foreign writer: kept as text
    try:
        attempt = int(text(f.get("a", b"0")))
    except ValueError:
        attempt = 0
    return OutputChunk(text(entry_id), attempt, data, is_json)


def _entries(reply: Any) -> list[tuple[str, OutputChunk | str]]:
    return [(text(i), chunk_of(i, fields)) for i, fields in reply or []]


def output_range(keys: QueueKeys, task_id: str, after: str) -> Call[list[tuple[str, Any]]]:
    """Entries after ``after`` (a stream id; '0-0': from the first), at most READ_COUNT."""
    return one(("XRANGE", keys.output(task_id), "(" + after, "+", "COUNT", READ_COUNT), _entries)


def output_block(
    keys: QueueKeys, task_id: str, after: str, block_ms: int
) -> Call[list[tuple[str, Any]]]:
    """Entries after ``after``, waiting up to ``block_ms`` for one when there is none."""
    key = keys.output(task_id)

    def decode(reply: Any) -> list[tuple[str, Any]]:
        if not reply:
            return []
        # RESP2: [[key, entries]]; RESP3: {key: entries}
        entries = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
        return _entries(entries)

    return one(("XREAD", "COUNT", READ_COUNT, "BLOCK", block_ms, "STREAMS", key, after), decode)


def task_state(keys: QueueKeys, task_id: str) -> Call[str | None]:
    """The task's state; None when there is no such task (never was, or pruned)."""
    return one(("HGET", keys.task(task_id), "state"), lambda r: None if r is None else text(r))
