"""kopf's HTTP session to the Kubernetes API, with a bounded number of connections.

kopf's own session opens as many connections as it has requests in flight (no limit),
and keeps each open for a while after. A burst of TaskQueues puts one request in flight
per object being handled (finalizer, status patches, events): the 300-TaskQueue burst of
bench/journal/2026-11-29-operator-memory.md held 608 connections open to the apiserver
at once, each with its TLS state and asyncio's 256 KiB read buffer: 80 of the 118 MB the
operator's Python heap grew by. Here the same session (kopf's login, the same
credentials, TLS and proxy settings), with at most ``limit`` connections: requests beyond
wait for a free one (inside kopf's request timeout), which costs a burst little since the
apiserver serves them no faster than its cores allow.

The limit counts kopf's watch streams too, each holding its connection for as long as it
watches: `connection_limit` adds one per stream to the connections for requests.

kopf's peering (the keep-alives that keep the standby paused, and the clean-up of dead
peers) uses connections of its own, outside the bound (`PeeringApart`): queued behind a
burst's requests, a keep-alive can outwait its own timeout, and kopf stops the operator
when a peering event fails nine times: seen with a burst of 1,000 TaskQueues on an
operator slowed by tracing, where every peering PATCH waited out its 30 s for a free
connection for eight minutes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import aiohttp
import kopf
from aiohttp.connector import Connection

#: Kinds kopf watches in each served namespace: TaskQueues, ProviderQuotas, Deployments, pods.
NAMESPACED_STREAMS = 4
#: Cluster-wide streams at most: the ClusterKopfPeering (kopf's and the operator's own
#: event handler), and with namespace patterns the namespaces and the CRDs.
CLUSTER_STREAMS = 4

__all__ = ["PeeringApart", "bounded_session", "connection_limit", "login", "peering_request"]

#: kopf's peering objects, cluster-wide or namespaced, read, patched or watched.
_PEERING = re.compile(r"^/apis/kopf\.dev/v1/(namespaces/[^/]+/)?(cluster)?kopfpeerings(/|$)")


def peering_request(path: str) -> bool:
    """Whether a request to ``path`` is kopf's peering."""
    return _PEERING.match(path) is not None


class PeeringApart(aiohttp.TCPConnector):
    """A connector bounded to ``limit`` connections (0: none) for every request but kopf's
    peering, which gets connections of its own, never waiting behind the others: one
    object, a keep-alive every few seconds and a watch."""

    def __init__(self, *, limit: int, ssl: Any) -> None:
        super().__init__(limit=limit, ssl=ssl)
        self.peering = aiohttp.TCPConnector(limit=0, ssl=ssl)

    async def connect(
        self,
        req: aiohttp.ClientRequest,
        traces: Any,
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 - aiohttp's signature, overridden
    ) -> Connection:
        if peering_request(req.url.path):
            return await self.peering.connect(req, traces, timeout)
        return await super().connect(req, traces, timeout)

    async def close(self, **kwargs: Any) -> None:
        await self.peering.close(**kwargs)
        await super().close(**kwargs)


def connection_limit(namespaces: Sequence[str], requests: int, *, exact: bool) -> int:
    """How many connections kopf's session may hold: one per watch stream plus
    ``requests`` for requests; 0 (no limit, kopf's own way) when ``requests`` is 0 or the
    namespaces are patterns (the number of streams follows the namespaces they match)."""
    if requests <= 0 or not exact:
        return 0
    return NAMESPACED_STREAMS * max(1, len(namespaces)) + CLUSTER_STREAMS + requests


def bounded_session(info: kopf.ConnectionInfo, limit: int) -> kopf.AiohttpSession:
    """kopf's session for ``info``, as kopf builds it, with at most ``limit`` connections
    (0: no limit) besides the peering's (`PeeringApart`). Call it on the event loop. kopf
    closes it when it drops the credentials (a re-login after the apiserver refused
    them)."""
    session = aiohttp.ClientSession(
        connector=PeeringApart(limit=limit, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
    return kopf.AiohttpSession(
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
        aiohttp_session=session,
    )


async def login(limit: int, **kwargs: Any) -> kopf.AiohttpSession | None:
    """kopf's login through the Kubernetes client's configuration (in-cluster, else the
    kubeconfig: kopf's own default), into a bounded session."""
    info = kopf.login_via_client(**kwargs)
    return None if info is None else bounded_session(info, limit)
