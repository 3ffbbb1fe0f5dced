"""The Redis fixtures themselves: other tests rely on them for outages and isolation."""

from __future__ import annotations

import pytest
import redis

from tests.fixtures_redis import RedisServerFactory


def test_redis_url_starts_each_test_with_an_empty_server(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.dbsize() == 0
        client.set("left-behind", "1")
    finally:
        client.close()


def test_redis_url_does_not_see_keys_of_an_earlier_test(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.get("left-behind") is None
    finally:
        client.close()


def test_factory_server_keeps_data_across_a_restart(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory()
    client = redis.Redis.from_url(server.url)
    try:
        client.set("kept", "yes")
        server.restart()
        assert client.get("kept") == b"yes"
    finally:
        client.close()


def test_factory_server_refuses_connections_while_stopped(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory()
    server.stop()
    client = redis.Redis.from_url(server.url, socket_connect_timeout=1)
    try:
        with pytest.raises(redis.ConnectionError):
            client.ping()
        server.start()
        assert client.ping()
    finally:
        client.close()
