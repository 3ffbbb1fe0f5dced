"""The operator's Redis connections: one per TaskQueue, from its resolved URL, and error
texts with every secret masked."""

from __future__ import annotations

import gc
import secrets
import threading
import weakref
from typing import Any

import pytest
import redis
from taskfleet.protocol.redisurl import redact_redis_url
from taskfleet_operator import kube
from taskfleet_operator.connections import Connections, describe_error
from taskfleet_operator.models import TaskQueueSpec

from tests.polling import wait_for


def make_spec(**overrides: Any) -> TaskQueueSpec:
    raw: dict[str, Any] = {
        "image": "localhost/worker:dev",
        "handler": "app.tasks:handle",
        "redis": {"url": "redis://127.0.0.1:1/0"},
    }
    raw.update(overrides)
    return TaskQueueSpec.model_validate(raw)


def test_connections_reconnect_when_the_url_changes_and_reuse_otherwise(redis_url: str) -> None:
    urls = {"current": redis_url}
    connections = Connections(1.0, resolve_url=lambda _ns, _spec: urls["current"], url_ttl_s=0.0)
    spec = make_spec()
    try:
        first = connections.get("ns", "q", spec)
        assert connections.get("ns", "q", spec) is first
        urls["current"] = redis_url.replace("/0", "/1")
        second = connections.get("ns", "q", spec)
        assert second is not first
        assert second.client.ping()
        assert second.name == "ns.q"
    finally:
        connections.close()


def test_a_resolved_url_is_reused_until_invalidated_or_the_spec_changes(redis_url: str) -> None:
    reads: list[str] = []

    def resolve(_namespace: str, spec: TaskQueueSpec) -> str:
        reads.append(spec.redis.model_dump_json())
        return redis_url

    connections = Connections(1.0, resolve_url=resolve, url_ttl_s=60.0)
    secret_spec = make_spec(redis={"secretRef": {"name": "a"}})
    try:
        for _ in range(3):
            connections.get("ns", "q", secret_spec)
        assert len(reads) == 1
        connections.invalidate("ns", "q")
        connections.get("ns", "q", secret_spec)
        assert len(reads) == 2
        connections.get("ns", "q", make_spec(redis={"secretRef": {"name": "b"}}))
        assert len(reads) == 3
    finally:
        connections.close()


def test_a_secret_holding_no_redis_url_is_reported_without_its_value() -> None:
    value = "http://user:hunter2@redis:6379/0"
    spec = make_spec(redis={"secretRef": {"name": "redis-auth", "key": "url"}})
    connections = Connections(0.5, resolve_url=lambda _ns, _spec: value)
    try:
        with pytest.raises(kube.SecretUnavailable) as raised:
            connections.get("ns", "q", spec)
    finally:
        connections.close()

    message = str(raised.value)
    assert message.startswith("key 'url' of Secret ns/redis-auth is not a usable Redis URL")
    assert "hunter2" not in message
    assert "http" not in message


def test_passwords_are_masked_in_urls_and_error_texts() -> None:
    url = "redis://worker:s3cret@redis.example:6380/2"

    assert redact_redis_url(url) == "redis://worker:***@redis.example:6380/2"
    assert redact_redis_url("redis://redis:6379/0") == "redis://redis:6379/0"
    error = redis.ConnectionError(f"cannot connect to {url}")
    assert "s3cret" not in describe_error(error, url)
    assert "ConnectionError" in describe_error(error, url)


def test_a_password_in_the_url_query_is_masked_in_every_encoding() -> None:
    url = "redis://redis:6379/0?pass%77ord=hunter2"

    assert redact_redis_url(url) == "redis://redis:6379/0?password=***"
    assert redact_redis_url("redis://h/0?mypassword=x") == "redis://h/0?mypassword=***"
    error = redis.AuthenticationError(f"invalid password hunter2 for {url}")
    assert "hunter2" not in describe_error(error, url)


def test_a_taskqueue_gone_has_its_connection_closed_and_its_url_forgotten(
    redis_url: str, redis_client: redis.Redis
) -> None:
    name = f"tq-{secrets.token_hex(4)}"
    url = f"{redis_url}?client_name={name}"
    reads: list[str] = []

    def resolve(_namespace: str, _spec: TaskQueueSpec) -> str:
        reads.append(url)
        return url

    def connected() -> int:
        return sum(1 for client in redis_client.client_list() if client["name"] == name)

    connections = Connections(1.0, resolve_url=resolve, url_ttl_s=60.0)
    spec = make_spec()
    try:
        first = connections.get("ns", "q", spec)
        assert first.client.ping()
        assert connected() == 1

        connections.forget("ns", "q")

        wait_for(lambda: connected() == 0, what="the server saw the connection close")
        again = connections.get("ns", "q", spec)
        assert again is not first
        assert len(reads) == 2
    finally:
        connections.close()


def test_queues_on_one_server_share_one_client_closed_with_the_last(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The operator's state per TaskQueue is a `Queue` (names), not a client: 50 queues
    on one server hold one client and one connection, and forgetting them all leaves
    nothing held and nothing connected."""
    name = f"tq-{secrets.token_hex(4)}"
    url = f"{redis_url}?client_name={name}"

    def connected() -> int:
        return sum(1 for client in redis_client.client_list() if client["name"] == name)

    connections = Connections(1.0, resolve_url=lambda _ns, _spec: url, url_ttl_s=60.0)
    spec = make_spec()
    try:
        queues = [connections.get("ns", f"q{i}", spec) for i in range(50)]
        assert all(queue.client.ping() for queue in queues)
        assert len({id(queue.client) for queue in queues}) == 1
        assert connected() == 1
        assert connections.held() == {"queues": 50, "urls": 50, "targets": 50, "clients": 1}

        for i in range(49):
            connections.forget("ns", f"q{i}")
        assert queues[-1].client.ping()  # the last one's client is still open
        assert connections.held() == {"queues": 1, "urls": 1, "targets": 1, "clients": 1}

        connections.forget("ns", "q49")
        assert connections.held() == {"queues": 0, "urls": 0, "targets": 0, "clients": 0}
        wait_for(lambda: connected() == 0, what="the server saw the shared connection close")
        # Nothing else keeps it either (the scripts registered on it did, for good).
        client = weakref.ref(queues[0].client)
        del queues
        gc.collect()
        assert client() is None
    finally:
        connections.close()


def test_two_threads_getting_a_new_queue_at_once_share_one_client_left_open(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new TaskQueue's handler and its sweep ask for its queue at the same moment: both
    connect, one client is kept for both, and neither thread's call is cut off by the
    other closing it (it was: the later thread released the key it had just added, closed
    the shared client under the first thread's call, and the server was parked as
    unreachable)."""
    import taskfleet_operator.connections as module
    from taskfleet.producer.queue import Queue

    both = threading.Barrier(2, timeout=10)
    made = {"n": 0}

    def queue(*args: Any, **kwargs: Any) -> Any:
        made["n"] += 1
        if made["n"] <= 2:  # both threads have connected before either records its queue
            both.wait()
        return Queue(*args, **kwargs)

    monkeypatch.setattr(module, "Queue", queue)
    connections = Connections(1.0, resolve_url=lambda _ns, _spec: redis_url, url_ttl_s=60.0)
    got: list[Any] = []
    try:
        threads = [
            threading.Thread(target=lambda: got.append(connections.get("ns", "q", make_spec())))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert len(got) == 2
        assert got[0].client is got[1].client
        assert connections.held()["clients"] == 1
        assert connections.get("ns", "q", make_spec()).client is got[0].client
        assert got[0].client.ping()
    finally:
        connections.close()


def test_a_queue_moved_to_another_server_leaves_the_old_client_to_its_other_queues(
    redis_url: str,
) -> None:
    urls = {"a": redis_url, "b": redis_url}
    connections = Connections(1.0, resolve_url=lambda _ns, spec: urls[spec.image], url_ttl_s=0.0)
    try:
        a = connections.get("ns", "a", make_spec(image="a"))
        b = connections.get("ns", "b", make_spec(image="b"))
        assert a.client is b.client
        urls["b"] = redis_url.replace("/0", "/1")
        moved = connections.get("ns", "b", make_spec(image="b"))
        assert moved.client is not a.client
        assert a.client.ping() and moved.client.ping()
        assert connections.held()["clients"] == 2
    finally:
        connections.close()


def test_a_closed_queue_frees_its_client(redis_url: str) -> None:
    """A producer that opens and closes queues does not keep their clients."""
    from taskfleet.producer.queue import Queue

    queue = Queue("ns.freed", redis_url)
    queue.stats()
    queue.enqueue({"n": 1})  # a script call: the client's scripts registered
    client = weakref.ref(queue.client)
    queue.close()
    del queue
    gc.collect()
    assert client() is None
