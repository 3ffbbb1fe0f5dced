"""``QueueConfig``: the settings every producer and worker of a queue shares.

It is stored in the queue's ``config`` hash (written by the operator or
``Queue.configure``) and read by the Lua scripts at each call, so a change applies to
the whole fleet at once without restarts. The defaults here are also the defaults the
scripts use for absent fields: ``scripts.py`` generates the Lua defaults from this model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from taskfleet.protocol.bounds import (
    MAX_ATTEMPTS,
    MAX_COUNT,
    MAX_DURATION_S,
    MAX_LOST,
    MAX_PAYLOAD_BYTES,
    MAX_TIMEOUT_S,
    MIN_LEASE_TTL_S,
)
from taskfleet.protocol.defaults import CONFIG_DEFAULTS as _DEFAULTS
from taskfleet.protocol.defaults import encode as _encode
from taskfleet.protocol.defaults import lua_defaults


class QueueConfig(BaseModel):
    # nan / inf would pass the bounds below (nan compares false) and poison the whole
    # fleet: a lease that never expires, a rate limit that never refills. The upper
    # bounds (taskfleet.protocol.bounds) keep the scripts' ms arithmetic exact: now + a duration
    # in ms prints as an integer in Lua, and counts stay exact doubles.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_concurrency: int = Field(
        default=_DEFAULTS["max_concurrency"],
        ge=0,
        le=MAX_COUNT,
        description="tasks running at once, fleet-wide; 0 = no limit",
    )
    rate_limit_tasks: int | None = Field(
        default=_DEFAULTS["rate_limit_tasks"],
        gt=0,
        le=MAX_COUNT,
        description="tasks started per period",
    )
    rate_limit_cost: int | None = Field(
        default=_DEFAULTS["rate_limit_cost"],
        gt=0,
        le=MAX_COUNT,
        description="cost units started per period",
    )
    rate_limit_period_s: float = Field(
        default=_DEFAULTS["rate_limit_period_s"], gt=0, le=MAX_DURATION_S
    )
    max_attempts: int = Field(
        default=_DEFAULTS["max_attempts"],
        ge=1,
        le=MAX_ATTEMPTS,
        description="starts before a failing task goes dead",
    )
    backoff_base_s: float = Field(default=_DEFAULTS["backoff_base_s"], ge=0, le=MAX_DURATION_S)
    backoff_max_s: float = Field(default=_DEFAULTS["backoff_max_s"], ge=0, le=MAX_DURATION_S)
    backoff_jitter: float = Field(
        default=_DEFAULTS["backoff_jitter"], ge=0, le=1, description="+- fraction of each backoff"
    )
    max_lost: int = Field(
        default=_DEFAULTS["max_lost"],
        ge=1,
        le=MAX_LOST,
        description="lost workers a task survives; one more and it goes dead",
    )
    lease_ttl_s: float = Field(
        default=_DEFAULTS["lease_ttl_s"],
        ge=MIN_LEASE_TTL_S,
        le=MAX_DURATION_S,
        description="a lease not extended for this long expires",
    )
    done_retention_s: float = Field(default=_DEFAULTS["done_retention_s"], ge=0, le=MAX_DURATION_S)
    dead_retention_s: float = Field(default=_DEFAULTS["dead_retention_s"], ge=0, le=MAX_DURATION_S)
    max_payload_bytes: int = Field(
        default=_DEFAULTS["max_payload_bytes"],
        gt=0,
        le=MAX_PAYLOAD_BYTES,
        description="bound on payloads and results",
    )
    default_timeout_s: float | None = Field(
        default=_DEFAULTS["default_timeout_s"], gt=0, le=MAX_TIMEOUT_S
    )

    throttle_base_s: float = Field(
        default=_DEFAULTS["throttle_base_s"],
        gt=0,
        le=MAX_DURATION_S,
        description="the fleet's first claim pause after a rate limit without a retry-after",
    )
    throttle_max_s: float = Field(
        default=_DEFAULTS["throttle_max_s"],
        gt=0,
        le=MAX_DURATION_S,
        description="cap of that pause, which doubles with each rate limit in a row",
    )
    budget_day: int | None = Field(
        default=_DEFAULTS["budget_day"],
        gt=0,
        le=MAX_COUNT,
        description="cost units claimed per UTC day; claims wait for the next day past it",
    )
    budget_month: int | None = Field(
        default=_DEFAULTS["budget_month"],
        gt=0,
        le=MAX_COUNT,
        description="cost units claimed per UTC calendar month",
    )
    group_max_concurrency: int = Field(
        default=_DEFAULTS["group_max_concurrency"],
        ge=0,
        le=MAX_COUNT,
        description="tasks of one group running at once (every group's default); 0 = no limit",
    )
    group_rate_limit_tasks: int | None = Field(
        default=_DEFAULTS["group_rate_limit_tasks"],
        gt=0,
        le=MAX_COUNT,
        description="tasks of one group started per rate_limit_period_s (every group's default)",
    )
    group_rate_limit_cost: int | None = Field(
        default=_DEFAULTS["group_rate_limit_cost"],
        gt=0,
        le=MAX_COUNT,
        description="cost of one group started per rate_limit_period_s (every group's default)",
    )
    group_budget_day: int | None = Field(
        default=_DEFAULTS["group_budget_day"],
        gt=0,
        le=MAX_COUNT,
        description="cost units one group claims per UTC day (every group's default)",
    )
    group_budget_month: int | None = Field(
        default=_DEFAULTS["group_budget_month"],
        gt=0,
        le=MAX_COUNT,
        description="cost units one group claims per UTC calendar month (every group's default)",
    )

    @model_validator(mode="after")
    def _backoff_cap_not_below_base(self) -> QueueConfig:
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError("backoff_max_s must be >= backoff_base_s")
        if self.throttle_max_s < self.throttle_base_s:
            raise ValueError("throttle_max_s must be >= throttle_base_s")
        return self

    def to_redis(self) -> dict[str, str]:
        """Field -> string for HSET; unset optional fields are left out (the script default)."""
        return {
            name: _encode(value) for name, value in self.model_dump().items() if value is not None
        }

    @classmethod
    def from_redis(cls, raw: Mapping[Any, Any]) -> QueueConfig:
        """Parse the ``config`` hash; fields this version does not know are ignored."""
        known = cls.model_fields
        data: dict[str, str] = {}
        for key, value in raw.items():
            name = key.decode() if isinstance(key, bytes) else str(key)
            if name in known:
                data[name] = value.decode() if isinstance(value, bytes) else str(value)
        try:
            return cls.model_validate(data, strict=False)
        except ValidationError as exc:
            bad = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
        # A stored value this model refuses (written before a bound was added, or by hand):
        # the scripts read it as it is, so readers show it as it is when it is a number,
        # and never fail on it; anything else reads as the default.
        try:
            config = cls.model_validate({k: v for k, v in data.items() if k not in bad})
        except ValidationError:  # fields that only fail together: the defaults hold
            config = cls()
        kept: dict[str, float | int] = {}
        for name in bad:
            number = _stored_number(data.get(name, ""))
            if number is not None:
                integral = cls.model_fields[name].annotation is int
                kept[name] = int(number) if integral and number.is_integer() else number
        return config.model_copy(update=kept)


def _stored_number(text: str) -> float | None:
    """A finite number written in ASCII, else None (``float`` also reads other digits)."""
    if not text.isascii():
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


__all__ = ["QueueConfig", "lua_defaults"]
