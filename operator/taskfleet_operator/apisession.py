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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiohttp
import kopf

#: Kinds kopf watches in each served namespace: TaskQueues, ProviderQuotas, Deployments, pods.
NAMESPACED_STREAMS = 4
#: Cluster-wide streams at most: the ClusterKopfPeering (kopf's and the operator's own
#: event handler), and with namespace patterns the namespaces and the CRDs.
CLUSTER_STREAMS = 4

__all__ = ["bounded_session", "connection_limit", "login"]


def connection_limit(namespaces: Sequence[str], requests: int, *, exact: bool) -> int:
    """How many connections kopf's session may hold: one per watch stream plus
    ``requests`` for requests; 0 (no limit, kopf's own way) when ``requests`` is 0 or the
    namespaces are patterns (the number of streams follows the namespaces they match)."""
    if requests <= 0 or not exact:
        return 0
    return NAMESPACED_STREAMS * max(1, len(namespaces)) + CLUSTER_STREAMS + requests


def bounded_session(info: kopf.ConnectionInfo, limit: int) -> kopf.AiohttpSession:
    """kopf's session for ``info``, as kopf builds it, with at most ``limit`` connections
    (0: no limit). Call it on the event loop. kopf closes it when it drops the
    credentials (a re-login after the apiserver refused them)."""
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, ssl=info.as_ssl_context()),
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
