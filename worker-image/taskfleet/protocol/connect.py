"""The one way every part of taskfleet connects to Redis: a single server or a Redis Cluster.

A URL says which (``redisurl``): ``?cluster=true`` names one node of a Redis Cluster
(any node; the rest is discovered from it). Two kinds of client come out of it:

- ``connect(url)``: a sync client for producers, the CLI and the operator. On a cluster
  it is redis-py's ``RedisCluster``, which follows MOVED/ASK and refreshes its map of
  the cluster after a failover on its own.
- ``connect_queue_async(url, queue)``: the asyncio client of a worker (or anything else
  that serves one queue). Every key of a queue shares its hash tag, so a queue lives on
  one slot: on a cluster this is a plain client *pinned to the master of that slot*,
  which costs the hot path nothing over a single server and keeps what the worker needs
  of a plain client (a connection pool for its blocking wait). ``follow_slot`` points it
  at the slot's master again after a failover or resharding: the worker's outage gate
  calls it when a call fails with one of ``CLUSTER_EVENTS``.

``durability(url)`` reads ``wait_replicas`` / ``wait_timeout_ms``: how many replicas an
enqueue or completion waits for (``WAIT``) before it counts as written; see docs/redis.md
for what each set-up promises.

Protocol layer: imports nothing of taskfleet but the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import redis
import redis.asyncio
import redis.exceptions as rx
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from taskfleet.protocol.redisurl import TASKFLEET_OPTIONS, RedisURL, parse_redis_url

__all__ = [
    "CLUSTER_EVENTS",
    "Durability",
    "SyncClient",
    "connect",
    "connect_async",
    "connect_queue_async",
    "durability",
    "follow_slot",
    "is_cluster",
    "redis_py_url",
    "slot_master",
]

#: A sync client of either kind: every sync part of taskfleet accepts both.
SyncClient = redis.Redis | RedisCluster

#: Replies of a cluster in motion: the slot moved (resharding, a failover), the cluster
#: is electing a new master or lost a slot's every node, a multi-key call met a slot
#: being migrated, or a former master came back as a replica. None says the request was
#: wrong: each is an outage of the slot, to wait out and follow.
CLUSTER_EVENTS: tuple[type[BaseException], ...] = (
    rx.AskError,  # MovedError too
    rx.TryAgainError,
    rx.ClusterDownError,  # MasterDownError too
    rx.ClusterError,
    rx.ReadOnlyError,
)


def _truthy(value: str) -> bool:
    return value.lower() in ("true", "yes", "1", "y", "t")


def is_cluster(url: str | RedisURL) -> bool:
    """Whether ``url`` names a Redis Cluster (``?cluster=true``)."""
    parsed = parse_redis_url(url) if isinstance(url, str) else url
    return _truthy(dict(parsed.options).get("cluster", "false"))


@dataclass(frozen=True, slots=True)
class Durability:
    """How many replicas must confirm an enqueue or a completion, and how long to wait.

    ``replicas`` 0: no waiting (a write counts once the master has it). A wait that ends
    at ``timeout_ms`` with fewer confirmations leaves the write on the master, applied but
    not confirmed replicated: the producer gets ``NotReplicated``, the worker logs
    ``completion_not_replicated``. ``timeout_ms`` 0 waits for ever (Redis's meaning).
    """

    replicas: int = 0
    timeout_ms: int = 1000

    @property
    def waits(self) -> bool:
        return self.replicas > 0


def durability(url: str | RedisURL) -> Durability:
    """The durability ``url`` asks for (``?wait_replicas=N&wait_timeout_ms=T``)."""
    parsed = parse_redis_url(url) if isinstance(url, str) else url
    options = dict(parsed.options)
    return Durability(
        replicas=int(options.get("wait_replicas", "0")),
        timeout_ms=int(options.get("wait_timeout_ms", "1000")),
    )


def redis_py_url(url: str) -> str:
    """``url`` without taskfleet's own query parameters: what redis-py is given.

    The other fields are kept byte for byte (credentials stay encoded as they were).
    """
    base, sep, query = url.partition("?")
    if not sep:
        return url
    kept = [
        field
        for field in query.split("&")
        if field and unquote(field.partition("=")[0].replace("+", " ")) not in TASKFLEET_OPTIONS
    ]
    return base + ("?" + "&".join(kept) if kept else "")


def connect(url: str, **options: Any) -> SyncClient:
    """A sync client for ``url`` (checked first: ``InvalidRedisURL``, never the URL).

    ``options`` go to redis-py (``socket_timeout=...``). A cluster URL gives a
    ``RedisCluster`` that discovers every node from the one named, at once: a
    ``redis.ConnectionError`` when it cannot.
    """
    parsed = parse_redis_url(url)
    if not is_cluster(parsed):
        return redis.Redis.from_url(redis_py_url(url), **options)
    try:
        # Reads the cluster's map now: a cluster no node of which answers fails here.
        return RedisCluster.from_url(redis_py_url(url), **options)
    except RedisClusterException as exc:  # not a RedisError: callers handle those
        raise rx.ConnectionError(str(exc)) from None


def connect_async(url: str, **options: Any) -> redis.asyncio.Redis:
    """An asyncio client of a single server (a cluster URL: of the node it names).

    For a queue on a cluster use ``connect_queue_async``, which finds the queue's node.
    """
    parse_redis_url(url)
    return redis.asyncio.Redis.from_url(redis_py_url(url), **options)


@dataclass
class _Route:
    """Where a pinned client's slot lives and the nodes known to ask about it."""

    url: RedisURL
    slot: int
    seeds: list[tuple[str, int]]


_ROUTES: weakref.WeakKeyDictionary[redis.asyncio.Redis, _Route] = weakref.WeakKeyDictionary()


class _SlotPool(redis.asyncio.ConnectionPool):
    """The pool of a client pinned to a slot: it remembers every connection it made
    (through ``make_connection``, the hook redis-py leaves to subclasses), so that
    ``follow_slot`` can point each at the slot's new master."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.taskfleet_made: weakref.WeakSet[Any] = weakref.WeakSet()

    def make_connection(self) -> Any:
        connection = super().make_connection()  # type: ignore[no-untyped-call]
        self.taskfleet_made.add(connection)
        return connection


async def connect_queue_async(url: str, key: str, **options: Any) -> redis.asyncio.Redis:
    """An asyncio client for the queue that owns ``key`` (any of its keys).

    A single-server URL gives a client of that server. A cluster URL gives a client of
    the master that holds ``key``'s slot (of the named node while no node answers),
    which ``follow_slot`` re-points after the slot moves.
    """
    parsed = parse_redis_url(url)
    if not is_cluster(parsed):
        return redis.asyncio.Redis.from_url(redis_py_url(url), **options)
    # What redis.asyncio.Redis.from_url does, with a pool that knows its connections.
    single = bool(options.pop("single_connection_client", False))
    client = redis.asyncio.Redis(
        connection_pool=_SlotPool.from_url(redis_py_url(url), **options),
        single_connection_client=single,
    )
    client.auto_close_connection_pool = True
    seed = (parsed.host or "", parsed.port or 6379)
    _ROUTES[client] = _Route(parsed, key_slot(key.encode()), [seed])
    # A cluster that cannot say yet leaves the client at the named node: its first call
    # fails (an outage to wait out) and the caller's reconnect follows the slot then.
    with contextlib.suppress(rx.RedisError, OSError):
        await follow_slot(client)
    return client


def pinned(client: redis.asyncio.Redis) -> bool:
    """Whether ``client`` follows a cluster slot (made by ``connect_queue_async``)."""
    return client in _ROUTES


async def slot_master(
    seeds: Sequence[tuple[str, int]], slot: int, pool: redis.asyncio.ConnectionPool
) -> tuple[tuple[str, int], list[tuple[str, int]]]:
    """The master of ``slot`` as the first answering seed sees it, and every node it knows.

    Seeds are asked with ``pool``'s connection settings (credentials, TLS). Raises
    ``ClusterDownError`` when the answering node knows no master for the slot,
    ``ConnectionError`` when no seed answers.
    """
    last: BaseException | None = None
    for host, port in seeds:
        kwargs = {**pool.connection_kwargs, "host": host, "port": port}
        node = redis.asyncio.Redis.from_pool(
            redis.asyncio.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        )
        try:
            reply = await asyncio.wait_for(
                node.execute_command("CLUSTER", "SLOTS"),  # type: ignore[no-untyped-call]
                2.0,
            )
        except (rx.RedisError, OSError, TimeoutError) as exc:
            last = exc
            continue
        finally:
            await node.aclose()
        known: list[tuple[str, int]] = []
        master: tuple[str, int] | None = None
        for start, end, *nodes in reply:
            addresses = [(_text(n[0]) or host, int(n[1])) for n in nodes]
            known += addresses
            if int(start) <= slot <= int(end) and addresses:
                master = addresses[0]
        if master is None:
            raise rx.ClusterDownError(f"CLUSTERDOWN no master serves slot {slot}")
        return master, list(dict.fromkeys([*known, *seeds]))
    raise rx.ConnectionError(f"no node of the Redis Cluster answered ({last})")


async def follow_slot(client: redis.asyncio.Redis) -> None:
    """Point a pinned client at its slot's master now, dropping old connections.

    Does nothing for a client of a single server. Raises a ``redis.RedisError`` (or
    ``OSError``) when the cluster cannot say yet; the caller retries later.
    """
    route = _ROUTES.get(client)
    if route is None:
        return
    pool = client.connection_pool
    (host, port), known = await slot_master(route.seeds, route.slot, pool)
    route.seeds = known
    pool.connection_kwargs["host"], pool.connection_kwargs["port"] = host, port
    # Connections in use are re-pointed too: each reconnects where its next call goes.
    connections = list(pool.taskfleet_made) if isinstance(pool, _SlotPool) else []
    for connection in connections:
        connection.host, connection.port = host, port
        if hasattr(connection, "orig_host_address"):
            connection.orig_host_address = host
    await pool.disconnect()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
