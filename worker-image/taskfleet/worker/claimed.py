"""What a claim hands this worker (``ClaimedTask``, ``ClaimResult``), read from the claim
script's records: pure, no Redis, so every shape a record can take is tested directly.

A record is tagged (``protocol/claimrecord.py``: name, value pairs and the payload) and
carries all a run reads: the group, the trace context and the dependency handle come
with it, so nothing is read per task after a claim. A positional record (``id, token,
attempts, max_attempts, timeout_s, lost, priority, cost[, waited_ms], payload``, an
older producer's hand-off) reads as one with those fields alone, marked ``unread``: the
broker reads its group and trace from the task hash. A named task's payload
is stored and claimed as ``\\x01<name>\\x01<payload>`` (``protocol/tasknames.py``); a
task whose name this worker does not serve (``Served``) is unrunnable, reason ``unknown
task``. Nothing in a record
may crash the worker: a crash would release the task uncounted and the next worker would
claim it and crash too. A task that can't be run as stored comes back as ``Unrunnable``
for the broker to fail for good; a record that names no task is dropped with a log line.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from taskfleet.protocol import claimrecord as cr

log = logging.getLogger("taskfleet.worker")
_decode = json.JSONDecoder().decode

#: A task that can't be run as stored: ``(id, token, error, reason)``, to be failed
#: permanently (reason ``bad payload`` or ``bad task``).
Unrunnable = tuple[str, str, str, str]


@dataclass(slots=True)
class ClaimedTask:
    """A task handed to this worker. ``token`` fences every later write about it."""

    id: str
    token: str
    payload: dict[str, Any]
    attempts: int  # starts of this task, this one included (1 on the first run)
    max_attempts: int
    timeout: float | None  # seconds; None = no limit
    lost: int
    priority: int
    cost: int
    #: seconds from when it was ready (enqueued, due, retried) to its claim; None: unknown
    waited: float | None = None
    #: the producer's trace context as stored; None when it has none
    trace: bytes | None = None
    #: which handler runs it (``enqueue(..., task=...)``); None: the default one
    name: str | None = None
    #: the group it belongs to; None: none
    group: str | None = None
    #: the JSON list of the tasks it waited for (its dependency results' handle); "": it
    #: waited for none; None: not known (a positional record: read from the task)
    after: str | None = None
    #: its deadline to start (epoch ms); None: none
    deadline_ms: int | None = None
    #: the state an earlier attempt checkpointed (JSON text); None: none
    checkpoint: str | None = None
    #: on a Redis Cluster, the estimate ({name: {unit: amount}} JSON) of provider quotas in
    #: other slots, which the broker reserves before the run starts; None: nothing to reserve
    quotas: str | None = None
    #: its record carried no group or trace (an older producer's positional hand-off):
    #: the broker reads both from the task hash
    unread: bool = False


@dataclass(frozen=True, slots=True)
class Served:
    """The task names a worker has handlers for, and whether it runs tasks without one."""

    names: frozenset[str]
    unnamed: bool = True

    def refusal(self, name: str | None) -> str | None:
        """Why a task of this name can't run here (its error), or None when it can."""
        if name is None:
            if self.unnamed:
                return None
            return f"the task has no name and this worker serves only {self._listed()}"
        if name in self.names:
            return None
        return f"no handler for task name {name!r}; this worker serves {self._listed()}"

    def _listed(self) -> str:
        names = ", ".join(repr(n) for n in sorted(self.names)) or "no named tasks"
        return names + (" and tasks without a name" if self.unnamed else "")


@dataclass(slots=True)
class ClaimResult:
    """One claim's tasks, and what the queue said besides."""

    tasks: list[ClaimedTask]
    #: >0: a rate limit held tasks back; ms until capacity returns
    retry_after_ms: int = 0
    #: ms until the earliest delayed task is due (None: nothing delayed); bounds idle waits
    next_due_ms: int | None = None
    #: tasks were still pending after this claim (False: the queue had no more to give)
    more_pending: bool = False


def _dropped(record: bytes) -> None:
    log.warning(
        "claim_record_dropped",
        extra={"fields": {"record": repr(record[:200]), "note": "names no task"}},
    )


def _whole(raw: bytes, what: str) -> int:
    """An integer field of a claim record; ValueError naming it if it is not one."""
    try:
        return int(raw)
    except ValueError:
        pass
    try:  # a foreign writer's "3.0" or "1e+14": whole numbers only
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value.is_integer():
        raise ValueError(f"{what} {raw[:40]!r} is not an integer")
    return int(value)


def _wholes(numbers: list[bytes]) -> tuple[int, int, int, int, int]:
    """A record's integer fields (``numbers``: attempts, max_attempts, timeout, lost,
    priority, cost) read one by one, in order, the timeout between them checked too: the
    error names the first field that is not as written."""
    attempts, max_attempts, timeout, lost, priority, cost = numbers
    first = _whole(attempts, "attempts"), _whole(max_attempts, "max_attempts")
    if timeout:
        _seconds(timeout)
    return (*first, _whole(lost, "lost"), _whole(priority, "priority"), _whole(cost, "cost"))


def _seconds(raw: bytes) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"timeout {raw[:40]!r} is not a positive number of seconds")
    return value


def _waited(raw: bytes) -> float | None:
    """The record's wait in seconds; None when absent or unreadable (a metric, never a
    reason to refuse a task)."""
    if not raw:
        return None
    try:
        value = float(raw) / 1000
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _optional(task: ClaimedTask, f: dict[bytes, bytes]) -> None:
    """The fields a tagged record carries only when set (never a reason to refuse a task:
    an unreadable deadline is left unknown)."""
    group, after, deadline = f.get(cr.GROUP), f.get(cr.AFTER), f.get(cr.DEADLINE)
    task.trace = f.get(cr.TRACE)
    checkpoint = f.get(cr.CHECKPOINT)
    quotas = f.get(cr.QUOTAS)
    if quotas is not None:
        task.quotas = quotas.decode(errors="replace")
    if checkpoint is not None:
        task.checkpoint = checkpoint.decode(errors="replace")
    if group is not None:
        task.group = group.decode(errors="replace")
    task.after = "" if after is None else after.decode(errors="replace")
    if deadline is not None and deadline.isdigit():
        task.deadline_ms = int(deadline)


def parse_claim_records(
    records: Iterable[bytes | str], served: Served | None = None
) -> tuple[list[ClaimedTask], list[Unrunnable]]:
    """The tasks of a claim reply, and those that can't be run as stored.

    A payload that is not a JSON object is ``bad payload``; any other field that can't be
    read (a hash edited by a foreign writer) is ``bad task``; a name ``served`` refuses
    (None: every name is run) is ``unknown task``. A record that names no task is dropped
    with a log line (only a foreign write to a wake list makes one).
    """
    tasks: list[ClaimedTask] = []
    bad: list[Unrunnable] = []
    for record in records:
        packed = record.encode() if isinstance(record, str) else record
        f: dict[bytes, bytes] | None
        tagged = cr.tagged_fields(packed)
        if tagged is not None:
            f, data = tagged
            raw_id, raw_token = f.get(cr.ID), f.get(cr.TOKEN)
            if raw_id is None or raw_token is None:
                _dropped(packed)
                continue
            numbers = [
                f.get(cr.ATTEMPTS, b""),
                f.get(cr.MAX_ATTEMPTS, b""),
                f.get(cr.TIMEOUT, b""),
                f.get(cr.LOST, b"0"),
                f.get(cr.PRIORITY, b"0"),
                f.get(cr.COST, b"1"),
            ]
            waited = f.get(cr.WAITED_MS, b"")
        else:
            fields = packed.split(b"\0", 9)
            if len(fields) == 10:
                waited = fields.pop(8)
            elif len(fields) == 9:
                waited = b""
            else:
                _dropped(packed)
                continue
            f = None
            raw_id, raw_token, data = fields[0], fields[1], fields[8]
            numbers = fields[2:8]
        attempts, max_attempts, timeout, lost, priority, cost = numbers
        try:
            tid, tok = raw_id.decode(), raw_token.decode()
        except UnicodeDecodeError:
            _dropped(packed)
            continue
        try:
            try:  # as the scripts write them: plain integers, read in one go
                whole = int(attempts), int(max_attempts), int(lost), int(priority), int(cost)
            except ValueError:  # a foreign writer's "3.0": each field on its own
                whole = _wholes(numbers)
            task = ClaimedTask(
                tid,
                tok,
                {},
                whole[0],
                whole[1],
                _seconds(timeout) if timeout else None,
                whole[2],
                whole[3],
                whole[4],
                int(waited) / 1000 if waited.isdigit() else _waited(waited),
            )
        except ValueError as exc:
            bad.append((tid, tok, f"task unreadable: {exc}", "bad task"))
            continue
        if f is not None:
            _optional(task, f)
        else:
            task.unread = True
        if data[:1] == b"\1":
            raw_name, _, data = data[1:].partition(b"\1")
            task.name = raw_name.decode(errors="replace")
        if served is not None and (task.name is not None or not served.unnamed):
            refusal = served.refusal(task.name)  # (an unnamed task where those run: none)
            if refusal is not None:
                bad.append((tid, tok, refusal, "unknown task"))
                continue
        if data == b"{}":  # the commonest payload: no decoder call
            task.payload = {}
            tasks.append(task)
            continue
        try:
            # A payload as producers store it (UTF-8, an object) straight to the decoder,
            # decoded as json.loads decodes UTF-8; anything else through json.loads, which
            # also reads UTF-16 and -32.
            payload = (
                _decode(data.decode("utf-8", "surrogatepass"))
                if data[:1] == b"{"
                else json.loads(data)
            )
        except (ValueError, RecursionError) as exc:  # nesting too deep: RecursionError
            bad.append((tid, tok, f"payload is not valid JSON: {exc}", "bad payload"))
            continue
        if not isinstance(payload, dict):
            bad.append((tid, tok, "payload is not a JSON object", "bad payload"))
            continue
        task.payload = payload
        tasks.append(task)
    return tasks, bad
