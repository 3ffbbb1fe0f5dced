"""A task's streamed output on its page: read whole (bounded) once the task has finished,
and live over server-sent events while it runs.

The live stream is ``Queue.stream``'s own plan (``producer.control.stream``), driven here
one step at a time: each step a blocking read (XREAD BLOCK, at most ``BLOCK_S``) on a
thread of this module's own pool, so open streams never take the page handlers' threads.
Each chunk is one event whose id is its entry's id: a browser that reconnects sends it
back (``Last-Event-ID``) and resumes after it. The stream ends, with an ``end`` event,
when the task finishes; a connection also ends after ``MAX_STREAM_S`` (the browser
reconnects and resumes). At most ``max_streams`` (the settings) are open at once; past
that, 503. Each open stream holds one thread of the pool while it waits.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from taskfleet.producer import control
from taskfleet.producer.queue import Queue
from taskfleet.producer.runner import Emit
from taskfleet.protocol.calls import run
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.output import READ_COUNT, OutputChunk, output_range, task_state

__all__ = [
    "BLOCK_S",
    "SHOWN_CHUNKS",
    "Released",
    "Shown",
    "Streams",
    "chunk_text",
    "read_output",
    "resume_point",
]

#: The longest one read of a stream blocks before it looks whether the task finished.
BLOCK_S = 1.0
#: A connection's longest life: the browser then reconnects and resumes after its last id.
MAX_STREAM_S = 300.0
#: Seconds between two comments on a quiet stream (proxies close silent connections).
KEEPALIVE_S = 15.0
#: Chunks a finished task's page shows (the rest: ``taskfleet``'s ``Queue.stream``).
SHOWN_CHUNKS = 2000
#: How long a browser waits before it reconnects (the ``retry`` field, ms).
RETRY_MS = 2000

_ENTRY_ID = re.compile(r"^[0-9]{1,20}-[0-9]{1,20}$")


def chunk_text(chunk: OutputChunk) -> str:
    """A chunk as the page shows it: text as written, JSON on a line of its own."""
    if chunk.json:
        return json.dumps(chunk.data, ensure_ascii=False) + "\n"
    return str(chunk.data)


@dataclass(frozen=True)
class Shown:
    """A finished task's output as its page shows it: the first ``SHOWN_CHUNKS`` chunks."""

    chunks: list[OutputChunk]
    more: bool


def read_output(client: SyncClient, keys: QueueKeys, task_id: str) -> Shown:
    """The task's chunks, every attempt's, up to ``SHOWN_CHUNKS`` (pages of ``READ_COUNT``)."""
    chunks: list[OutputChunk] = []
    after = "0-0"
    while len(chunks) < SHOWN_CHUNKS:
        entries = run(client, output_range(keys, task_id, after))
        chunks += [item for _, item in entries if isinstance(item, OutputChunk)]
        if len(entries) < READ_COUNT:
            return Shown(chunks[:SHOWN_CHUNKS], len(chunks) > SHOWN_CHUNKS)
        after = entries[-1][0]
    return Shown(chunks[:SHOWN_CHUNKS], True)


def resume_point(last_event_id: str | None, since: str | None) -> str | None:
    """Where a stream starts: after the browser's ``Last-Event-ID`` (a reconnection), else
    after ``since``, else from the first chunk; None for a value that is no entry id."""
    value = last_event_id or since or "0-0"
    return value if _ENTRY_ID.fullmatch(value) else None


def event(kind: str, data: dict[str, Any], entry_id: str | None = None) -> bytes:
    """One server-sent event; ``data`` as one line of JSON (it escapes newlines)."""
    head = f"id: {entry_id}\n" if entry_id else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class Streams:
    """The open streams: a bounded count and the pool their blocking reads run on."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(limit, thread_name_prefix="dashboard-stream")

    @property
    def open(self) -> int:
        with self._lock:
            return self._open

    def take(self) -> bool:
        """One more stream, or False at the limit."""
        with self._lock:
            if self._open >= self.limit:
                return False
            self._open += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self._open -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def events(self, queue: Queue, task_id: str, since: str) -> AsyncIterator[bytes]:
        """The task's chunks after ``since`` as events, then ``end`` (the caller holds a slot:
        ``take``, then ``Released``)."""
        loop = asyncio.get_running_loop()
        began = quiet = time.monotonic()
        yield f"retry: {RETRY_MS}\n\n".encode()
        steps = control.stream(queue, task_id, since=since, block=BLOCK_S)
        reply: Any = None
        while True:
            try:
                step = steps.send(reply)
            except StopIteration:
                break
            reply = None
            if isinstance(step, Emit):
                chunk: OutputChunk = step.value
                data = {"attempt": chunk.attempt, "text": chunk_text(chunk)}
                yield event("chunk", data, chunk.id)
                quiet = time.monotonic()
                continue
            reply = await loop.run_in_executor(self._pool, run, queue.client, step)
            now = time.monotonic()
            if now - began > MAX_STREAM_S:
                return  # the browser reconnects after its last id
            if now - quiet > KEEPALIVE_S:
                yield b": still running\n\n"
                quiet = now
        state = await loop.run_in_executor(
            self._pool, run, queue.client, task_state(queue.keys, task_id)
        )
        yield event("end", {"state": state or "gone"})


class Released(StreamingResponse):
    """A stream's response that gives its slot back when it ends, however it ends (the
    browser gone before the first byte included)."""

    def __init__(self, streams: Streams, body: AsyncIterator[bytes]) -> None:
        super().__init__(body, media_type="text/event-stream", headers={"X-Accel-Buffering": "no"})
        self._streams = streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._streams.give_back()
