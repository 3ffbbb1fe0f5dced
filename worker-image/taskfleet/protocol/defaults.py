"""The queue config's defaults as plain data: ``QueueConfig`` takes its defaults from here,
and the Lua scripts' defaults are generated from here, so a worker builds its scripts
without loading the config model (and pydantic) on its way to its first claim.
"""

from __future__ import annotations

from typing import TypedDict

__all__ = ["CONFIG_DEFAULTS", "ConfigDefaults", "encode", "lua_defaults"]


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
    "max_payload_bytes": 1024 * 1024,
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


def encode(value: object) -> str:
    """A config value as stored in the ``config`` hash."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, float) else str(value)


def lua_defaults() -> dict[str, str]:
    """Defaults of the Lua scripts for config fields absent from the hash."""
    return {name: encode(value) for name, value in CONFIG_DEFAULTS.items() if value is not None}
