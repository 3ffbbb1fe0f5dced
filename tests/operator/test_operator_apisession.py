"""kopf's session to the Kubernetes API, bounded (`apisession`)."""

from __future__ import annotations

import asyncio

import kopf
from taskfleet_operator import apisession
from taskfleet_operator.settings import OperatorSettings


def test_the_limit_counts_a_connection_per_watch_stream_besides_the_requests() -> None:
    per_ns, cluster = apisession.NAMESPACED_STREAMS, apisession.CLUSTER_STREAMS
    assert apisession.connection_limit([], 32, exact=True) == per_ns + cluster + 32
    assert apisession.connection_limit(["a", "b", "c"], 8, exact=True) == 3 * per_ns + cluster + 8


def test_no_limit_for_namespace_patterns_or_when_turned_off() -> None:
    assert apisession.connection_limit(["team-*"], 32, exact=False) == 0
    assert apisession.connection_limit(["a"], 0, exact=True) == 0


def test_the_setting_defaults_to_32_and_0_turns_it_off() -> None:
    assert OperatorSettings.from_env({}).api_connections == 32
    assert OperatorSettings.from_env({"TASKFLEET_API_CONNECTIONS": "0"}).api_connections == 0


def test_the_session_keeps_kopfs_credentials_with_a_bounded_connector() -> None:
    info = kopf.ConnectionInfo(
        server="https://127.0.0.1:6443",
        token="secret-token",
        default_namespace="ns",
        insecure=True,
    )

    async def build() -> tuple[kopf.AiohttpSession, int, str | None]:
        context = apisession.bounded_session(info, 40)
        session = context.aiohttp_session
        try:
            assert session.connector is not None
            return context, session.connector.limit, session.headers.get("Authorization")
        finally:
            await session.close()

    context, limit, authorization = asyncio.run(build())
    assert limit == 40
    assert authorization == "Bearer secret-token"
    assert (context.server, context.default_namespace) == (info.server, "ns")
