"""A queue's keys as a whole: the plain writes that are no script, the keyspace scans,
and where a queue lives.

- ``configure``: the ``config`` hash replaced in one transaction (its one writer: the
  operator, or ``Queue.configure`` outside Kubernetes); the scripts read it at each call.
- ``queue_keys`` / ``delete``: every key of a queue, found by SCAN and deleted (a purge).
- ``queues``: every queue of a Redis, by its ``stats`` hash (a queue that ever had a task
  has one); ``provider_quotas``: every provider quota, by its hash.
- ``slot_key``: a key of the queue to route by: all of a queue's keys share one hash tag,
  so one cluster slot, and a client pinned to a queue is pinned to that slot.
- ``writable``: "would a write pass now?" at no cost (``faults.WRITABLE_PROBE``).

No pydantic here (a worker probes from here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskfleet.protocol.calls import Call, Command, Scan, one
from taskfleet.protocol.faults import WRITABLE_PROBE
from taskfleet.protocol.keys import (
    PREFIX,
    SHARED_KEYS,
    QueueKeys,
    provider_quota_key,
    validate_queue_name,
    validate_quota_name,
)
from taskfleet.protocol.records import hash_of, text

if TYPE_CHECKING:
    from taskfleet.protocol.config import QueueConfig

__all__ = [
    "ACL_KEYS",
    "config_fields",
    "configure",
    "delete",
    "provider_quotas",
    "queue_keys",
    "queues",
    "quota_clock",
    "slot_key",
    "writable",
]

#: Every key of a queue named ``<queue>``, as a Redis ACL key pattern (``~`` + this).
ACL_KEYS = f"{PREFIX}:{{<queue>}}:*"
_STATS_TAIL = "}:stats"


def slot_key(queue: str) -> str:
    """A key of ``queue`` (any: they share a slot) for a client to find its node by."""
    return QueueKeys(queue).stats


def configure(keys: QueueKeys, config: QueueConfig) -> Call[None]:
    """Replace the queue's settings: fields left unset go (their defaults apply)."""
    fields: list[str] = []
    for name, value in config.to_redis().items():
        fields += [name, value]
    commands: list[Command] = [("DEL", keys.config)]
    if fields:
        commands.append(("HSET", keys.config, *fields))
    return Call(tuple(commands), lambda replies: None, transaction=True)


def config_fields(keys: QueueKeys) -> Call[dict[str, str]]:
    """The queue's settings as stored, field -> text: what `configure` wrote is
    ``QueueConfig.to_redis()`` again, so a writer can tell whether to write."""
    return one(("HGETALL", keys.config), hash_of)


def writable(keys: QueueKeys) -> Call[None]:
    """Returns if the queue's server takes writes now; its refusal (OOM, MISCONF,
    READONLY...) is raised. Changes nothing; declared with a key of the queue so a
    cluster routes it to the queue's slot."""
    return one(("EVAL", WRITABLE_PROBE, 1, keys.config), lambda reply: None)


def queue_keys(keys: QueueKeys) -> Scan[bytes | str]:
    """Every key of the queue, as stored (to delete them)."""
    return Scan(keys.pattern, lambda key: key)


def delete(found: list[bytes | str]) -> Call[int]:
    """Delete keys a scan found (UNLINK: freed in the background); how many were."""
    return one(("UNLINK", *found), int)


def _queue_of(key: Any) -> str | None:
    raw = text(key)
    head = f"{PREFIX}:{{"
    if not (raw.startswith(head) and raw.endswith(_STATS_TAIL)):
        return None
    name = raw[len(head) : -len(_STATS_TAIL)]
    try:
        return validate_queue_name(name)
    except ValueError:
        return None


def queues() -> Scan[str]:
    """The name of every queue with counters in the Redis (its ``stats`` hash)."""
    return Scan(f"{PREFIX}:{{*{_STATS_TAIL}", _queue_of)


def _quota_of(key: Any) -> str | None:
    raw = text(key)
    head = SHARED_KEYS["pquota"][0]
    if not raw.startswith(head):
        return None
    try:
        return validate_quota_name(raw[len(head) :])
    except ValueError:
        return None


def provider_quotas() -> Scan[str]:
    """The name of every provider quota of the Redis (its hash, once configured)."""
    return Scan(SHARED_KEYS["pquota"][0] + "*", _quota_of)


def _ms(reply: Any) -> int:
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def quota_clock(name: str) -> Call[int]:
    """The clock (ms) of the server that holds provider quota ``name`` (its pause and
    window are on that clock)."""
    return one(("TIME",), _ms, route=provider_quota_key(name))
