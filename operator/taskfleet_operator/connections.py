"""The operator's Redis connections: one `Queue` per TaskQueue, from its resolved URL, and
one client (one connection pool) per connection target, shared by every queue on it.

Reconciling, sweeping and the pod-deletion fast path all reach a queue through one
`Connections`, which the startup handler creates and the cleanup handler closes. The
URL comes from the spec or from the Secret it names; it is never logged, and errors are
described with every secret masked (`describe_error`).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster
from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import Call, run, run_all
from taskfleet.protocol.connect import connect, durability
from taskfleet.protocol.lists import QueueLists, any_demand
from taskfleet.protocol.redisurl import InvalidRedisURL, parse_redis_url, scrub
from taskfleet.protocol.scripts import Op, release
from taskfleet.protocol.serverprobe import CONFIG_PARAMETERS, SAFE_EVICTION_POLICY
from taskfleet.protocol.serverprobe import probe as probe_server
from taskfleet.protocol.store import slot_key

from taskfleet_operator import builders, kube
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.outages import (
    PROBE_FIRST_S,
    PROBE_MAX_S,
    Fault,
    Outages,
    ServerParked,
    classify,
    probe,
)

UrlResolver = Callable[[str, TaskQueueSpec], str]
Key = tuple[str, str]  # (namespace, name)
Members = list[tuple[Key, Queue]]  # queues of one Redis server (`Connections.by_server`)
#: Idle queues whose housekeeping shares one pipeline (bounds Redis's busy spell).
HOUSEKEEPING_BATCH = 200

#: What Redis must be told to keep every acknowledged task (docs/redis.md).
SAFE_POLICY = SAFE_EVICTION_POLICY

__all__ = ["SAFE_POLICY", "Connections", "UrlResolver", "describe_error", "resolve_redis_url"]


def describe_error(exc: BaseException, url: str | None = None) -> str:
    """A one-line error text with every secret of ``url`` (userinfo or query, in any
    encoding) and any URL in it masked (`taskfleet.protocol.redisurl.scrub`)."""
    return scrub(f"{type(exc).__name__}: {exc}", url)


def resolve_redis_url(namespace: str, spec: TaskQueueSpec) -> str:
    """The Redis URL: from the spec, or read from the Secret (never logged)."""
    if spec.redis.url is not None:
        return spec.redis.url
    ref = spec.redis.secret_ref
    assert ref is not None  # the model guarantees exactly one of url / secretRef
    return kube.read_secret_value(namespace, ref.name, ref.key)


def _unusable_url(namespace: str, spec: TaskQueueSpec, problem: str) -> Exception:
    """The error for a URL taskfleet refuses; it never quotes the URL (it may hold a
    password), only what is wrong with it."""
    ref = spec.redis.secret_ref
    if ref is None:  # the model refuses such a redis.url; kept for a spec from an older CRD
        return ValueError(f"redis.url is not a usable Redis URL: {problem}")
    return kube.SecretUnavailable(
        f"key {ref.key!r} of Secret {namespace}/{ref.name} is not a usable Redis URL: {problem}"
    )


class Connections:
    """One `Queue` per TaskQueue, rebuilt when its Redis URL changes (e.g. a rotated Secret).

    The queues of one connection target (the same resolved URL) share one client, so one
    connection pool: its connections number the calls in flight at once (the operator's
    threads), not the TaskQueues. A client per queue cost about 120 KB and a connection
    per TaskQueue; the shared client is closed when its last queue is forgotten.

    Clients get short socket timeouts so an unreachable Redis fails a sweep quickly
    instead of stalling a handler thread. A resolved URL (a Secret read) is reused for
    ``url_ttl_s``, so sweeping does not GET every Secret every few seconds. Handlers run
    in kopf's thread pool, hence the lock; no Redis call is made while holding it.

    A server that fails with a fault of its own (`outages.classify`) is parked for all
    of its queues: `get` raises `ServerParked` without a call, `by_server` leaves it out,
    and `probe_due` (the probe loop) probes it once per backoff step, reading each
    Secret its queues name once per probe, so a rotated Secret resumes them too.
    """

    def __init__(
        self,
        timeout_s: float,
        *,
        resolve_url: UrlResolver = resolve_redis_url,
        url_ttl_s: float = 30.0,
        probe_first_s: float = PROBE_FIRST_S,
        probe_max_s: float = PROBE_MAX_S,
    ) -> None:
        self._resolve_url = resolve_url
        self._timeout_s = timeout_s
        self._url_ttl_s = url_ttl_s
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, str], tuple[str, Queue]] = {}
        # Bumped whenever ``_queues`` changes: the demand poll's groups are kept until then.
        self._version = 0
        self._demand_groups: _DemandGroups | None = None
        # One client per target (digest of the resolved URL) and the queues that use it.
        self._clients: dict[str, tuple[Any, set[Key]]] = {}
        self._urls: dict[tuple[str, str], tuple[float, str, str]] = {}
        # Each queue's connection target (digest, URL) and spec as last resolved.
        self._targets: dict[Key, tuple[str, str, TaskQueueSpec]] = {}
        self.outages = Outages(probe_first_s, probe_max_s)
        # maxmemory-policy by target, as the last check read it.
        self._policies: dict[str, str] = {}

    def _url(self, key: tuple[str, str], spec: TaskQueueSpec) -> str:
        source = spec.redis.model_dump_json()
        now = time.monotonic()
        with self._lock:
            cached = self._urls.get(key)
        if cached is not None and cached[0] > now and cached[1] == source:
            return cached[2]
        url = self._resolve_url(key[0], spec)
        with self._lock:
            self._urls[key] = (now + self._url_ttl_s, source, url)
        return url

    def url(self, namespace: str, name: str, spec: TaskQueueSpec) -> str:
        """The TaskQueue's Redis URL, resolved as `get` resolves it (cached the same way);
        never to be logged: it may hold a password."""
        return self._url((namespace, name), spec)

    def invalidate(self, namespace: str, name: str) -> None:
        """Forget the resolved URL: the next `get` reads the Secret again."""
        with self._lock:
            self._urls.pop((namespace, name), None)

    def get(self, namespace: str, name: str, spec: TaskQueueSpec) -> Queue:
        """The TaskQueue's queue; raises `kube.SecretUnavailable` when the Secret is
        missing or holds no usable URL, `ServerParked` when its server is parked
        (`redis.RedisError` comes at the first call)."""
        key = (namespace, name)
        url = self._url(key, spec)
        digest = hashlib.sha256(url.encode()).hexdigest()
        with self._lock:
            self._targets[key] = (digest, url, spec)
        fault = self.outages.fault(digest, key)
        if fault is not None:
            raise ServerParked(fault)
        with self._lock:
            cached = self._queues.get(key)
            if cached is not None and cached[0] == digest:
                return cached[1]
            shared = self._clients.get(digest)
        client = shared[0] if shared is not None else self._connect(key, spec, url)
        queue = Queue(
            builders.queue_name(namespace, name), client=client, durability=durability(url)
        )
        with self._lock:
            previous = self._queues.get(key)
            shared = self._clients.get(digest)
            if shared is None:
                shared = self._clients[digest] = (client, set())
            elif shared[0] is not client:  # another thread connected first: use its client
                queue = Queue(queue.name, client=shared[0], durability=queue.durability)
            shared[1].add(key)
            self._queues[key] = (digest, queue)
            self._version += 1
            # The key leaves its previous client only when it moved to another server:
            # another thread may have recorded it on this very client meanwhile.
            unused: list[Any] = []
            if previous is not None and previous[0] != digest:
                unused = self._release(key, previous[0])
        if shared[0] is not client:
            _close(client)
        for old in unused:
            _close(old)
        return queue

    def _connect(self, key: Key, spec: TaskQueueSpec, url: str) -> Any:
        """A new client for ``url`` (its target has none yet)."""
        try:
            parse_redis_url(url)  # what redis-py would misread or refuse only later
            # Outside the lock: a cluster client reads the cluster's map here.
            return connect(
                url,
                socket_timeout=self._timeout_s,
                socket_connect_timeout=self._timeout_s,
                health_check_interval=30,
            )
        except InvalidRedisURL as exc:
            with self._lock:
                self._urls.pop(key, None)  # read the Secret again once it is fixed
            raise _unusable_url(key[0], spec, str(exc)) from None
        except ValueError:
            with self._lock:
                self._urls.pop(key, None)
            raise _unusable_url(key[0], spec, "redis-py refuses it") from None
        except redis.RedisError as error:
            self.report(*key, error)
            raise

    def _release(self, key: Key, digest: str) -> list[Any]:
        """Drop ``key`` from the users of its target's client (holding the lock): the
        client to close when it was the last, else none."""
        shared = self._clients.get(digest)
        if shared is None:
            return []
        shared[1].discard(key)
        if shared[1]:
            return []
        del self._clients[digest]
        return [shared[0]]

    def report(self, namespace: str, name: str, error: BaseException) -> Fault | None:
        """A call to the queue's Redis failed with ``error``: park its server when the
        fault is the server's (`outages.classify`). Returns that fault, or None."""
        if isinstance(error, ServerParked):
            return error.fault
        fault = classify(error, describe_error(error))
        if fault is None:
            return None
        with self._lock:
            target = self._targets.get((namespace, name))
            # Every queue known on that server is parked with it, and resumed with it.
            keys = [k for k, t in self._targets.items() if target is not None and t[0] == target[0]]
        if target is not None:
            for key in keys:
                self.outages.park(target[0], target[1], fault, key)
        return fault

    def fault(self, namespace: str, name: str) -> Fault | None:
        """The fault the queue's server is parked for (None: not parked, or not known)."""
        with self._lock:
            target = self._targets.get((namespace, name))
        return None if target is None else self.outages.fault(target[0])

    def probe_due(self) -> list[str]:
        """The parked targets whose probe is due, each now marked in flight."""
        return [target for target, _, _ in self.outages.due()]

    def probe(self, target: str) -> set[Key]:
        """One probe of a parked target (blocking: run it in a thread of its own): the
        queues it resumes. First each Secret its queues name is read once: queues whose
        URL changed (a rotated Secret) leave the target at once. Then one connection and
        a PING (with INFO for OOM and READONLY, `outages.probe`); success resumes all."""
        queues = self.outages.queues().get(target, set())
        moved = self._moved_by_secret(target, queues)
        self.outages.release(target, moved)
        with self._lock:
            urls = [t[1] for k, t in self._targets.items() if t[0] == target]
        fault: Fault | None = None
        if urls:
            client = None
            try:
                client = connect(
                    urls[0],
                    socket_timeout=self._timeout_s,
                    socket_connect_timeout=self._timeout_s,
                )
                probe(client, self.outages.fault(target) or _UNKNOWN)
            except (redis.RedisError, OSError) as error:
                fault = classify(error, describe_error(error)) or _failed(error)
            finally:
                if client is not None:
                    client.close()
        resumed = self.outages.probed(target, fault)
        return moved | (resumed or set())

    def _moved_by_secret(self, target: str, queues: set[Key]) -> set[Key]:
        groups: dict[tuple[str, str], list[tuple[Key, TaskQueueSpec]]] = {}
        with self._lock:
            for key in queues:
                entry = self._targets.get(key)
                if entry is not None:
                    source = (key[0], entry[2].redis.model_dump_json())
                    groups.setdefault(source, []).append((key, entry[2]))
        moved: set[Key] = set()
        for (namespace, _), members in groups.items():
            try:
                url = self._resolve_url(namespace, members[0][1])
            except kube.SecretUnavailable:
                continue  # the sweeps say so
            if hashlib.sha256(url.encode()).hexdigest() == target:
                continue
            now = time.monotonic()
            with self._lock:
                for key, spec in members:
                    self._urls[key] = (now + self._url_ttl_s, spec.redis.model_dump_json(), url)
            moved.update(key for key, _ in members)
        return moved

    def check_policies(self) -> None:
        """Read each reachable server's ``maxmemory-policy`` (the server probe: CONFIG GET,
        else INFO where CONFIG is renamed away); on a cluster, the node of the queue's slot."""
        found: dict[str, set[str]] = {}
        for members in self.by_server():
            key, queue = members[0]
            policies = self._read_policies(key, queue)
            with self._lock:
                target = self._targets.get(key)
            if policies is not None and target is not None:
                found.setdefault(target[0], set()).update(policies)
        with self._lock:
            for digest, policies in found.items():
                self._policies[digest] = _worst(policies)

    def check_policy(self, namespace: str, name: str) -> str | None:
        """Read the queue's server's ``maxmemory-policy`` now (None: it did not answer)."""
        key = (namespace, name)
        with self._lock:
            cached = self._queues.get(key)
        policies = None if cached is None else self._read_policies(key, cached[1])
        if policies is None:
            return None
        policy = _worst(policies)
        with self._lock:
            target = self._targets.get(key)
            if target is not None:
                self._policies[target[0]] = policy
        return policy

    def _read_policies(self, key: Key, queue: Queue) -> set[str] | None:
        """The server's policy (None: not known). A refused command is skipped; when every
        one is refused (NOPERM on CONFIG and INFO), the last refusal is reported."""
        client: Any = queue.client
        refusals: list[redis.RedisError] = []

        def refused(error: redis.RedisError) -> bool:
            if _refused(error):
                refusals.append(error)
                return True
            return False

        try:
            if isinstance(client, RedisCluster):  # the node that holds the queue's slot
                node = client.get_node_from_key(slot_key(queue.name))  # type: ignore[no-untyped-call]
                client = client.get_redis_connection(node)
            found = probe_server(client, refused=refused)
            if len(refusals) > len(CONFIG_PARAMETERS):  # no command answered: INFO's says why
                raise refusals[-1]
        except redis.RedisError as error:
            self.report(*key, error)
            return None
        return None if found.eviction_policy is None else {found.eviction_policy}

    def policy(self, namespace: str, name: str) -> str | None:
        """The queue's server's ``maxmemory-policy`` as last checked (None: not yet)."""
        with self._lock:
            target = self._targets.get((namespace, name))
            return None if target is None else self._policies.get(target[0])

    def forget(self, namespace: str, name: str) -> None:
        """Close the TaskQueue's connection and drop its URL: the TaskQueue is gone."""
        key = (namespace, name)
        with self._lock:
            self._urls.pop(key, None)
            self._targets.pop(key, None)
            cached = self._queues.pop(key, None)
            self._version += 1
            unused = [] if cached is None else self._release(key, cached[0])
        for client in unused:
            _close(client)

    def by_server(self, keys: Iterable[Key] | None = None) -> list[Members]:
        """The connected queues (of ``keys``, or all), grouped by Redis server: each group
        can be read in one pipelined round trip on its first queue's client. On a Redis
        Cluster, by the node that holds each queue's slot (as the client's map says).
        Parked servers are left out."""
        groups: dict[tuple[str, str], Members] = {}
        parked = self.outages.targets()
        with self._lock:
            members = [
                (key, cached)
                for key in (self._queues if keys is None else keys)
                if (cached := self._queues.get(key)) is not None and cached[0] not in parked
            ]
        # One isinstance per server, not per queue: each costs about 0.7 µs (redis-py's
        # client classes are typing protocols), 0.7 ms a poll of 1,000 queues.
        clustered: dict[str, bool] = {}
        for key, (digest, queue) in members:
            cluster = clustered.get(digest)
            if cluster is None:
                cluster = clustered[digest] = isinstance(queue.client, RedisCluster)
            groups.setdefault((digest, _node(queue) if cluster else ""), []).append((key, queue))
        return list(groups.values())

    def pop_demand(self, keys: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The TaskQueues among ``keys`` whose `demand` list had an element (popped): one
        pipelined round trip per Redis server, however many queues it holds. Queues not
        connected yet, and servers that fail to answer, are left out."""
        woken: list[tuple[str, str]] = []
        for members, exists in self._demand_plan(keys):
            client = members[0][1].client
            try:
                # Mostly none has demand: one EXISTS says so, without a pop per queue (on
                # a Redis Cluster the queues of one node span slots: popped one by one).
                if exists is not None and not run(client, exists):
                    continue
                pops = [QueueLists(queue.keys).pop_demand() for _, queue in members]
                popped = run_all(client, pops)
            except redis.RedisError as error:
                if self.report(*members[0][0], error) is None:
                    # Pops may have run before the error: wake them all; their sweeps
                    # report it and stop counting as idle.
                    woken.extend(key for key, _ in members)
                continue  # a server fault parks the server: its probe wakes them
            woken.extend(key for (key, _), value in zip(members, popped, strict=True) if value)
        return woken

    def _demand_plan(self, keys: Iterable[Key]) -> list[tuple[Members, Call[bool] | None]]:
        """`by_server` of ``keys`` with each group's `any_demand` check (None on a Redis
        Cluster), kept while the same queues are polled, none connects or goes and no
        server is parked or resumed: with 10,000 idle queues, grouping them and naming
        their keys again took about 10 ms a poll. Never kept with a cluster among them
        (the node that holds a queue's slot can change)."""
        wanted, parked = frozenset(keys), self.outages.targets()
        with self._lock:
            version = self._version
        kept = self._demand_groups
        if kept is not None and (kept.version, kept.parked, kept.keys) == (version, parked, wanted):
            return kept.plan
        plan: list[tuple[Members, Call[bool] | None]] = []
        for members in self.by_server(wanted):
            clustered = isinstance(members[0][1].client, RedisCluster)
            plan.append((members, None if clustered else any_demand([q.keys for _, q in members])))
        if all(exists is not None for _, exists in plan):
            self._demand_groups = _DemandGroups(version, parked, wanted, plan)
        return plan

    def housekeep(self, keys: Iterable[Key], per_pipeline: int = HOUSEKEEPING_BATCH) -> list[Key]:
        """The idle queues' housekeeping, batched: for each of ``keys`` the sweep script
        (bounded: promote, expire, take back leases, prune, drop silent workers) and the
        reads that tell whether it is still idle, for up to ``per_pipeline`` queues per
        round trip to each Redis server (each script call touches one queue's keys: one
        hash slot). Returns the queues a full sweep must look at now: the script found
        something to do, a task is pending, delayed or running, a schedule was made through
        the API (slots to fire while no worker runs), or the queue's settings are missing
        (a Redis restarted without its data). A server that fails to answer wakes all of
        its queues: their sweeps report it; one that fails with a fault of its own is
        parked instead (its probe wakes its queues when it answers again)."""
        woken: list[Key] = []
        for members in self.by_server(keys):
            for start in range(0, len(members), per_pipeline):
                chunk = members[start : start + per_pipeline]
                try:
                    woken.extend(_housekeep_chunk(chunk))
                except redis.RedisError as error:
                    if self.report(*chunk[0][0], error) is None:
                        woken.extend(key for key, _ in chunk)
                    else:
                        break  # parked: its probe wakes them
        return woken

    def close(self) -> None:
        with self._lock:
            clients, self._clients, self._queues = list(self._clients.values()), {}, {}
            self._version += 1
        for client, _ in clients:
            _close(client)

    def held(self) -> dict[str, int]:
        """What this holds, counted (queues, resolved URLs, targets, clients): each falls
        back to what the TaskQueues served need once the others are forgotten."""
        with self._lock:
            return {
                "queues": len(self._queues),
                "urls": len(self._urls),
                "targets": len(self._targets),
                "clients": len(self._clients),
            }


@dataclass(frozen=True)
class _DemandGroups:
    """The demand poll's groups as of one version of the connected queues."""

    version: int
    parked: set[str]
    keys: frozenset[Key]
    plan: list[tuple[Members, Call[bool] | None]]


def _close(client: Any) -> None:
    """Close a client for good, its scripts forgotten (else they keep it in memory)."""
    release(client)
    client.close()


def _refused(error: redis.RedisError) -> bool:
    """A probe's command refused (CONFIG renamed away, NOPERM): INFO may still answer."""
    return isinstance(error, redis.ResponseError)


def _worst(policies: set[str]) -> str:
    """The policy that counts: any but `SAFE_POLICY` (the first by name), else it."""
    unsafe = sorted(p for p in policies if p != SAFE_POLICY)
    return unsafe[0] if unsafe else SAFE_POLICY


#: The fault a probe assumes when the target's record is gone meanwhile (a plain PING).
_UNKNOWN = Fault("RedisUnreachable", "unreachable", "")


def _failed(error: BaseException) -> Fault:
    """A probe's error that is no server fault (a bug, a reply this version cannot
    read): the server stays parked, as unreachable, and is probed again."""
    return Fault("RedisUnreachable", "unreachable", f"cannot use Redis: {describe_error(error)}")


def _node(queue: Queue) -> str:
    """The cluster node that holds the queue's slot ('' for a single server)."""
    client = queue.client
    if not isinstance(client, RedisCluster):
        return ""
    try:
        return str(client.get_node_from_key(slot_key(queue.name)).name)  # type: ignore[no-untyped-call]
    except redis.RedisError:
        return ""  # the map is being refreshed: a group of its own, read as usual


def _housekeep_chunk(members: Members) -> list[Key]:
    """One pipeline of `Connections.housekeep` over queues of one Redis server (of one
    node of a cluster): each queue's sweep script and its activity read. A server that
    lost its scripts answers NOSCRIPT to a sweep, which `run_all` loads and runs again."""
    client = members[0][1].client
    items: list[Call[Any] | Op[Any]] = []
    for _, queue in members:
        items += [queue.ops.sweep(), queue.reads.activity()]
    found = run_all(client, items)
    swept, activity = found[::2], found[1::2]
    woken = []
    for (key, _), result, active in zip(members, swept, activity, strict=True):
        moved = (
            result.promoted,
            result.expired,
            result.requeued,
            result.lost_dead,
            result.pruned_dead,  # the dead count in status changes
        )
        if any(moved) or active.busy or not active.configured:
            woken.append(key)
    return woken
