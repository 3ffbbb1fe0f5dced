"""Every API request an operator process makes and every watch event it receives, counted
by verb and resource, for the burst benchmark (`bench.operator_memory`,
``BENCH_MEMORY_REQUESTS=1``).

`SITE` is installed as the operator process's ``sitecustomize``: it wraps kopf's request
and stream functions (every kopf call and watch goes through them) and the Kubernetes
client's REST call (the operator's own writes: the Deployment apply, status patches), and
writes the counts as JSON on SIGUSR2. Instrumentation for the bench only: nothing of it is
in the operator.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

SITE = """
import collections, json, os, signal
from urllib.parse import urlsplit

_TF_COUNTS = collections.Counter()

def _tf_kind(url):
    parts = urlsplit(url)
    segs = [s for s in parts.path.split("/") if s]
    if segs[:1] == ["api"]:
        segs = segs[2:]
    elif segs[:1] == ["apis"]:
        segs = segs[3:]
    if len(segs) > 2 and segs[0] == "namespaces":
        segs = segs[2:]
    resource = segs[0] if segs else "?"
    if len(segs) > 2:
        resource += "/" + segs[2]
    return resource, "watch=true" in parts.query

def _tf_request(method, url):
    resource, watch = _tf_kind(url)
    _TF_COUNTS[("WATCH" if watch else method.upper()) + " " + resource] += 1

from kopf._cogs.clients import api as _tf_api

_tf_kopf_request, _tf_kopf_stream = _tf_api.request, _tf_api.stream

async def _tf_counted_request(method, url, **kwargs):
    _tf_request(method, url)
    return await _tf_kopf_request(method, url, **kwargs)

async def _tf_counted_stream(url, **kwargs):
    resource, _ = _tf_kind(url)
    async for event in _tf_kopf_stream(url, **kwargs):
        kind = event.get("type") if isinstance(event, dict) else "?"
        _TF_COUNTS["EVENT " + resource + " " + str(kind)] += 1
        yield event

_tf_api.request, _tf_api.stream = _tf_counted_request, _tf_counted_stream

from kubernetes.client import rest as _tf_rest

_tf_rest_request = _tf_rest.RESTClientObject.request

def _tf_counted_rest(self, method, url, *args, **kwargs):
    _tf_request(method, url)
    return _tf_rest_request(self, method, url, *args, **kwargs)

_tf_rest.RESTClientObject.request = _tf_counted_rest

def _tf_dump(signum, frame):
    path = os.environ["BENCH_MEMORY_REQUESTS_FILE"]
    with open(path + ".tmp", "w") as out:
        json.dump(dict(_TF_COUNTS), out)
    os.replace(path + ".tmp", path)

signal.signal(signal.SIGUSR2, _tf_dump)
"""


def read(path: Path) -> dict[str, int]:
    counts: dict[str, int] = json.loads(path.read_text())
    return counts


def per_queue(before: Mapping[str, int], after: Mapping[str, int], queues: int) -> dict[str, float]:
    """What was counted between two dumps, per TaskQueue (watch events and requests)."""
    keys = sorted(set(before) | set(after))
    out = {k: round((after.get(k, 0) - before.get(k, 0)) / queues, 2) for k in keys}
    return {k: v for k, v in out.items() if v}
