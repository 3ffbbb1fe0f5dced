"""The claim record: one string per claimed task, as claim.lua, complete.lua and a
producer's hand-off (hand_off.lua) write it. Pure, no Redis.

The tagged form (``CLAIM_RECORD`` 3, what this release's workers read and say so in
their worker record's ``claim_record``): ``CLAIM_MARK``, then name, value pairs, then an
empty name and the payload, all joined by NUL. No value is empty (an absent one is left
out), so the first empty name, ``\\0\\0``, ends the pairs; the payload, last, may hold
anything. Readers ignore names they do not know: a field is added without a new form.
The positional form (``id, token, attempts, max_attempts, timeout_s, lost, priority,
cost[, waited_ms], payload``) is what a hand-off takes for a worker that does not read the
tagged one (0.2), and what an older producer hands over.
"""

from __future__ import annotations

__all__ = [
    "AFTER",
    "ATTEMPTS",
    "CHECKPOINT",
    "CLAIM_MARK",
    "CLAIM_RECORD",
    "COST",
    "DEADLINE",
    "GROUP",
    "ID",
    "LOST",
    "MAX_ATTEMPTS",
    "PRIORITY",
    "QUOTAS",
    "TIMEOUT",
    "TOKEN",
    "TRACE",
    "WAITED_MS",
    "tagged_fields",
]

#: The claim record form this release's workers read (the worker record's ``claim_record``).
CLAIM_RECORD = 3
#: A tagged record's first element: no task id starts with byte 1 (ids are printable).
CLAIM_MARK = b"\x013"
_HEAD = CLAIM_MARK + b"\0"

# The names of a tagged record's fields. Always there: id, token, attempts (this start
# included), max_attempts. Unless the default (0, 0, 1): lost, priority, cost.
ID = b"id"
TOKEN = b"token"
ATTEMPTS = b"attempts"
MAX_ATTEMPTS = b"max_attempts"
LOST = b"lost"
PRIORITY = b"priority"
COST = b"cost"
# Only when set: the timeout in seconds, ms from ready to claimed, the deadline (epoch
# ms), the group, the producer's trace context, the JSON list of the tasks it waited for
# (the handle of its dependency results).
TIMEOUT = b"timeout"
WAITED_MS = b"waited_ms"
DEADLINE = b"deadline"
GROUP = b"group"
TRACE = b"trace"
AFTER = b"after"
# Only when the task has one: the state an earlier attempt stored (checkpoint.lua).
CHECKPOINT = b"checkpoint"
# Only on a Redis Cluster, for a task naming provider quotas in other slots: its estimate
# (the task's ``quotas`` JSON), which the worker reserves on each quota's slot (pq_run).
QUOTAS = b"quotas"


def tagged_fields(record: bytes) -> tuple[dict[bytes, bytes], bytes] | None:
    """A tagged record's fields by name and its payload; None for a positional record."""
    if not record.startswith(_HEAD):
        return None
    head, _, payload = record.partition(b"\0\0")
    parts = iter(head.split(b"\0"))
    next(parts)  # the mark
    return dict(zip(parts, parts, strict=False)), payload
