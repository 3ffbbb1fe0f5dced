"""The queue config's defaults and bounds as plain data.

This file is generated from taskfleet/protocol/defaults_table.py by `make bundle`
(edit the table, not this file).

``QueueConfig`` takes its defaults and bounds from here, and the Lua scripts' ``DEFAULTS`` from
``lua_defaults``, so a worker builds its scripts without loading the config model (and pydantic)
on its way to its first claim.
"""

from __future__ import annotations

from typing import NamedTuple, TypedDict

from taskfleet.protocol.bounds import (
    MAX_ATTEMPTS,
    MAX_COUNT,
    MAX_DURATION_S,
    MAX_LOST,
    MAX_PAYLOAD_BYTES,
    MAX_TIMEOUT_S,
    MIN_LEASE_TTL_S,
)

__all__ = [
    "CONFIG_DEFAULTS",
    "CONFIG_LIMITS",
    "DEFAULT",
    "LUA_DEFAULTS",
    "ConfigDefaults",
    "ConfigLimit",
    "Defaults",
    "encode",
    "lua_defaults",
]


class ConfigDefaults(TypedDict):
    max_concurrency: int
    rate_limit_tasks: int | None
    rate_limit_cost: int | None
    rate_limit_period_s: float
    max_attempts: int
    backoff_base_s: float
    backoff_max_s: float
    backoff_jitter: float
    max_lost: int
    lease_ttl_s: float
    done_retention_s: float
    dead_retention_s: float
    max_payload_bytes: int
    default_timeout_s: float | None
    throttle_base_s: float
    throttle_max_s: float
    budget_day: int | None
    budget_month: int | None
    group_max_concurrency: int
    group_rate_limit_tasks: int | None
    group_rate_limit_cost: int | None
    group_budget_day: int | None
    group_budget_month: int | None


class Defaults(NamedTuple):
    """Every field's default by attribute (``DEFAULT.lease_ttl_s``), for code
    outside the protocol, which spells no field name (tests/codebase/test_layers.py)."""

    max_concurrency: int
    rate_limit_tasks: int | None
    rate_limit_cost: int | None
    rate_limit_period_s: float
    max_attempts: int
    backoff_base_s: float
    backoff_max_s: float
    backoff_jitter: float
    max_lost: int
    lease_ttl_s: float
    done_retention_s: float
    dead_retention_s: float
    max_payload_bytes: int
    default_timeout_s: float | None
    throttle_base_s: float
    throttle_max_s: float
    budget_day: int | None
    budget_month: int | None
    group_max_concurrency: int
    group_rate_limit_tasks: int | None
    group_rate_limit_cost: int | None
    group_budget_day: int | None
    group_budget_month: int | None


class ConfigLimit(NamedTuple):
    """A field's bounds (``low`` excluded when ``above``, else included; ``high`` included),
    its unit and what it is."""

    low: float
    above: bool
    high: float
    unit: str
    doc: str


#: Every ``QueueConfig`` field and its default (None: unset, the field is left out).
CONFIG_DEFAULTS: ConfigDefaults = {
    "max_concurrency": 0,
    "rate_limit_tasks": None,
    "rate_limit_cost": None,
    "rate_limit_period_s": 1.0,
    "max_attempts": 3,
    "backoff_base_s": 1.0,
    "backoff_max_s": 300.0,
    "backoff_jitter": 0.2,
    "max_lost": 3,
    "lease_ttl_s": 30.0,
    "done_retention_s": 3600.0,
    "dead_retention_s": 259200.0,
    "max_payload_bytes": 1048576,
    "default_timeout_s": None,
    "throttle_base_s": 1.0,
    "throttle_max_s": 300.0,
    "budget_day": None,
    "budget_month": None,
    "group_max_concurrency": 0,
    "group_rate_limit_tasks": None,
    "group_rate_limit_cost": None,
    "group_budget_day": None,
    "group_budget_month": None,
}
#: The same by attribute: what the operator's models and the help texts read.
DEFAULT = Defaults(**CONFIG_DEFAULTS)
#: Every field's bounds, unit and doc.
CONFIG_LIMITS: dict[str, ConfigLimit] = {
    "max_concurrency": ConfigLimit(
        0, False, MAX_COUNT, "tasks", "tasks running at once, fleet-wide; 0 = no limit"
    ),
    "rate_limit_tasks": ConfigLimit(0, True, MAX_COUNT, "tasks", "tasks started per period"),
    "rate_limit_cost": ConfigLimit(0, True, MAX_COUNT, "cost", "cost units started per period"),
    "rate_limit_period_s": ConfigLimit(
        0, True, MAX_DURATION_S, "s", "the period of both rate limits"
    ),
    "max_attempts": ConfigLimit(
        1,
        False,
        MAX_ATTEMPTS,
        "starts",
        "starts before a failing task goes dead (of a task enqueued without its own)",
    ),
    "backoff_base_s": ConfigLimit(0, False, MAX_DURATION_S, "s", "first retry delay"),
    "backoff_max_s": ConfigLimit(0, False, MAX_DURATION_S, "s", "longest retry delay"),
    "backoff_jitter": ConfigLimit(0, False, 1, "fraction", "+- fraction of each backoff"),
    "max_lost": ConfigLimit(
        1, False, MAX_LOST, "losses", "lost workers a task survives; one more and it goes dead"
    ),
    "lease_ttl_s": ConfigLimit(
        MIN_LEASE_TTL_S, False, MAX_DURATION_S, "s", "a lease not extended for this long expires"
    ),
    "done_retention_s": ConfigLimit(
        0, False, MAX_DURATION_S, "s", "how long done tasks are kept (0: deleted at completion)"
    ),
    "dead_retention_s": ConfigLimit(
        0, False, MAX_DURATION_S, "s", "how long dead and cancelled tasks are kept"
    ),
    "max_payload_bytes": ConfigLimit(
        0, True, MAX_PAYLOAD_BYTES, "bytes", "bound on payloads and results"
    ),
    "default_timeout_s": ConfigLimit(
        0, True, MAX_TIMEOUT_S, "s", "a task's timeout when it sets none; unset: none"
    ),
    "throttle_base_s": ConfigLimit(
        0,
        True,
        MAX_DURATION_S,
        "s",
        "the fleet's first claim pause after a rate limit without a retry-after",
    ),
    "throttle_max_s": ConfigLimit(
        0,
        True,
        MAX_DURATION_S,
        "s",
        "cap of that pause, which doubles with each rate limit in a row",
    ),
    "budget_day": ConfigLimit(
        0,
        True,
        MAX_COUNT,
        "cost",
        "cost units claimed per UTC day; claims wait for the next day past it",
    ),
    "budget_month": ConfigLimit(
        0, True, MAX_COUNT, "cost", "cost units claimed per UTC calendar month"
    ),
    "group_max_concurrency": ConfigLimit(
        0,
        False,
        MAX_COUNT,
        "tasks",
        "tasks of one group running at once (every group's default); 0 = no limit",
    ),
    "group_rate_limit_tasks": ConfigLimit(
        0,
        True,
        MAX_COUNT,
        "tasks",
        "tasks of one group started per rate_limit_period_s (every group's default)",
    ),
    "group_rate_limit_cost": ConfigLimit(
        0,
        True,
        MAX_COUNT,
        "cost",
        "cost of one group started per rate_limit_period_s (every group's default)",
    ),
    "group_budget_day": ConfigLimit(
        0,
        True,
        MAX_COUNT,
        "cost",
        "cost units one group claims per UTC day (every group's default)",
    ),
    "group_budget_month": ConfigLimit(
        0,
        True,
        MAX_COUNT,
        "cost",
        "cost units one group claims per UTC calendar month (every group's default)",
    ),
}
#: What the scripts read for a field the config hash leaves unset, as stored text (a
#: field unset by default is absent: the scripts read it as its ``off``, 0 for a limit).
LUA_DEFAULTS: dict[str, str] = {
    "max_concurrency": "0",
    "rate_limit_period_s": "1.0",
    "max_attempts": "3",
    "backoff_base_s": "1.0",
    "backoff_max_s": "300.0",
    "backoff_jitter": "0.2",
    "max_lost": "3",
    "lease_ttl_s": "30.0",
    "done_retention_s": "3600.0",
    "dead_retention_s": "259200.0",
    "max_payload_bytes": "1048576",
    "throttle_base_s": "1.0",
    "throttle_max_s": "300.0",
    "group_max_concurrency": "0",
}


def encode(value: object) -> str:
    """A config value as stored in the ``config`` hash."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, float) else str(value)


def lua_defaults() -> dict[str, str]:
    """Defaults of the Lua scripts for config fields absent from the hash."""
    return dict(LUA_DEFAULTS)
