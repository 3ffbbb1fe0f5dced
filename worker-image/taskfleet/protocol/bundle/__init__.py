"""The assembled scripts, as committed: ``<name>.lua`` is the exact text a client sends to
Redis (SCRIPT LOAD / EVALSHA of its SHA1), ``manifest.json`` says what each takes and
returns. Built from ``lua/`` and ``signatures`` by ``python -m taskfleet.protocol.bundle
--write`` (``build``); read here at run time, never assembled.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

__all__ = ["NAMES", "manifest", "source"]

#: Every script, in the manifest's order (``signatures.SCRIPTS``; a test holds them equal).
NAMES = (
    "enqueue",
    "enqueue_plain",
    "claim",
    "extend",
    "complete",
    "fail",
    "release",
    "requeue",
    "register",
    "deregister",
    "disown",
    "sweep",
    "repair",
    "schedule_put",
    "schedule_delete",
    "schedule_pause",
    "schedule_due",
    "schedule_fire",
    "cancel",
    "retry",
    "promote",
    "drop",
    "report",
    "checkpoint",
    "emit",
    "watch",
    "quota",
    "provider_quota",
    "settle",
    "pq_run",
    "pq_defer",
)


@functools.cache
def source(name: str) -> str:
    """The text sent to Redis for script ``name`` (its bytes, UTF-8)."""
    if name not in NAMES:
        raise KeyError(f"unknown script {name!r}")
    return resources.files(__name__).joinpath(f"{name}.lua").read_bytes().decode()


@functools.cache
def manifest() -> dict[str, Any]:
    """``manifest.json``: the protocol version, the keys, each script's arguments and SHA1."""
    data: dict[str, Any] = json.loads(
        resources.files(__name__).joinpath("manifest.json").read_bytes()
    )
    return data
