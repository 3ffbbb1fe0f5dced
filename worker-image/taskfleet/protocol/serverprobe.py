"""The Redis server's settings that decide whether it keeps tasks: one probe.

The worker's start, the CLI and the operator read them here, and only here:

- the eviction policy (``maxmemory-policy``): only ``noeviction`` keeps an acknowledged
  task; any other lets a full Redis delete it;
- the version (``redis_version``);
- persistence: whether AOF is on and whether RDB snapshots are configured.

``CONFIG GET`` answers first (managed services often refuse it); ``INFO`` answers the
rest, and the policy when ``CONFIG`` is refused. A field no command answered is None:
the caller decides what an unknown setting means. The Node client has its twin
(``clients/node/src/serverProbe.ts``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio
import redis.exceptions

from taskfleet.protocol.connect import SyncClient

__all__ = [
    "SAFE_EVICTION_POLICY",
    "ServerSettings",
    "probe",
    "probe_async",
    "settings_of",
]

#: The only ``maxmemory-policy`` that keeps the queue's promise: a full Redis refuses
#: writes (an outage workers wait out) instead of deleting tasks it acknowledged.
SAFE_EVICTION_POLICY = "noeviction"

#: What the probe asks ``CONFIG GET`` (one parameter a call: Redis 6 takes no more).
CONFIG_PARAMETERS = ("maxmemory-policy", "save")

#: Whether an error of a command means "refused: go on without its answer" (else raised).
Refused = Callable[[redis.exceptions.RedisError], bool]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What the server said of itself (None: it did not say)."""

    eviction_policy: str | None
    version: str | None
    aof: bool | None
    rdb: bool | None

    @property
    def evicts(self) -> bool:
        """Known to delete keys when full (a policy other than ``noeviction``)."""
        return self.eviction_policy is not None and self.eviction_policy != SAFE_EVICTION_POLICY

    @property
    def persistent(self) -> bool | None:
        """Whether a restart keeps its data (AOF or RDB snapshots); None: not known."""
        if self.aof or self.rdb:
            return True
        if self.aof is None or self.rdb is None:
            return None
        return False


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return None if value is None else str(value)


def settings_of(config: Mapping[Any, Any] | None, info: Mapping[Any, Any] | None) -> ServerSettings:
    """The settings from the replies of ``CONFIG GET`` (its pairs, merged) and ``INFO``
    (redis-py's dict); either None when refused."""
    conf = {_text(k): _text(v) for k, v in (config or {}).items()}
    facts = {_text(k): v for k, v in (info or {}).items()}
    policy = conf.get("maxmemory-policy") or _text(facts.get("maxmemory_policy")) or None
    aof = facts.get("aof_enabled")
    save = conf.get("save")
    return ServerSettings(
        eviction_policy=policy,
        version=_text(facts.get("redis_version")) or None,
        aof=None if aof is None else str(aof) not in ("0", "False", "no"),
        rdb=None if save is None else bool(save.strip()),
    )


def _everything(_: redis.exceptions.RedisError) -> bool:
    return True


def _commands() -> Generator[tuple[str, ...], Any, ServerSettings]:
    """The probe's commands, each reply received (None: refused), then the settings.
    ``CONFIG GET`` is one command name: a cluster client routes by it (two words would
    read as the command ``CONFIG`` with a key ``GET``)."""
    config: dict[Any, Any] = {}
    for parameter in CONFIG_PARAMETERS:
        config.update((yield ("CONFIG GET", parameter)) or {})
    info = yield ("INFO",)
    return settings_of(config, info)


def probe(client: SyncClient, *, refused: Refused = _everything) -> ServerSettings:
    """Ask a sync client's server (on a cluster: the node redis-py picks). By default
    every Redis error counts as refused (the CLI's warning is best effort)."""
    commands, reply = _commands(), None
    while True:
        try:
            command = commands.send(reply)
        except StopIteration as done:
            settings: ServerSettings = done.value
            return settings
        try:
            reply = client.execute_command(*command)  # type: ignore[no-untyped-call]
        except redis.exceptions.RedisError as exc:
            if not refused(exc):
                raise
            reply = None


async def probe_async(
    client: redis.asyncio.Redis, *, refused: Refused = _everything
) -> ServerSettings:
    """``probe`` on an asyncio client (the worker's start)."""
    commands, reply = _commands(), None
    while True:
        try:
            command = commands.send(reply)
        except StopIteration as done:
            settings: ServerSettings = done.value
            return settings
        try:
            reply = await client.execute_command(*command)  # type: ignore[no-untyped-call]
        except redis.exceptions.RedisError as exc:
            if not refused(exc):
                raise
            reply = None
