"""kopf's session to the Kubernetes API, bounded (`apisession`)."""

from __future__ import annotations

import asyncio

import aiohttp
import kopf
from aiohttp import web
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


def test_the_paths_of_kopfs_peering_are_told_from_every_other_request() -> None:
    for path in (
        "/apis/kopf.dev/v1/clusterkopfpeerings",
        "/apis/kopf.dev/v1/clusterkopfpeerings/taskfleet",
        "/apis/kopf.dev/v1/namespaces/apps/kopfpeerings/taskfleet",
    ):
        assert apisession.peering_request(path), path
    for path in (
        "/apis/taskfleet.dev/v1alpha1/namespaces/apps/taskqueues/emails/status",
        "/apis/apps/v1/namespaces/apps/deployments",
        "/api/v1/namespaces/apps/events",
        "/apis/kopf.dev/v1/clusterkopfpeeringsx",
    ):
        assert not apisession.peering_request(path), path


def test_a_peering_request_never_waits_behind_requests_that_hold_every_bounded_connection() -> None:
    """One connection for requests, held by a slow one: a second request waits for it, and
    a peering PATCH (a keep-alive) is served meanwhile, on a connection of its own."""

    async def scenario() -> tuple[bool, bool, bool]:
        release, slow_arrived = asyncio.Event(), asyncio.Event()
        arrived: list[str] = []

        async def slow(request: web.Request) -> web.Response:
            arrived.append(request.path)
            slow_arrived.set()
            await release.wait()
            return web.Response(text="{}")

        async def fast(request: web.Request) -> web.Response:
            arrived.append(request.path)
            return web.Response(text="{}")

        app = web.Application()
        app.router.add_get("/apis/taskfleet.dev/v1alpha1/slow", slow)
        app.router.add_get("/apis/taskfleet.dev/v1alpha1/other", fast)
        app.router.add_patch("/apis/kopf.dev/v1/clusterkopfpeerings/taskfleet", fast)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        base = f"http://127.0.0.1:{port}"
        connector = apisession.PeeringApart(limit=1, ssl=False)
        try:
            async with aiohttp.ClientSession(connector=connector) as session:
                held = asyncio.create_task(session.get(f"{base}/apis/taskfleet.dev/v1alpha1/slow"))
                async with asyncio.timeout(10):
                    await slow_arrived.wait()
                queued = asyncio.create_task(
                    session.get(f"{base}/apis/taskfleet.dev/v1alpha1/other")
                )
                async with asyncio.timeout(10):
                    peering = await session.patch(
                        f"{base}/apis/kopf.dev/v1/clusterkopfpeerings/taskfleet", json={}
                    )
                served_while_held = peering.status == 200 and not held.done()
                other_waited = "/apis/taskfleet.dev/v1alpha1/other" not in arrived
                peering.release()
                release.set()
                for task in (held, queued):
                    (await task).release()
                return served_while_held, other_waited, queued.done()
        finally:
            await runner.cleanup()

    served_while_held, other_waited, queued_done = asyncio.run(scenario())
    assert served_while_held, "the keep-alive waited for the held connection"
    assert other_waited, "the bound let a second request through"
    assert queued_done
