"""``QueueConfig``: the settings every producer and worker of a queue shares.

It is stored in the queue's ``config`` hash (written by the operator or
``Queue.configure``) and read by the Lua scripts at each call, so a change applies to
the whole fleet at once without restarts. The defaults here are also the defaults the
scripts use for absent fields: both come from ``defaults.py``, generated from the one
table of defaults and bounds (``defaults_table.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from taskfleet.protocol.defaults import CONFIG_DEFAULTS, CONFIG_LIMITS, lua_defaults
from taskfleet.protocol.defaults import encode as _encode


def _field(name: str) -> Any:
    """The field's default, bounds and doc, as the table of defaults states them."""
    limit = CONFIG_LIMITS[name]
    return Field(
        default=cast(Mapping[str, object], CONFIG_DEFAULTS)[name],
        gt=limit.low if limit.above else None,
        ge=None if limit.above else limit.low,
        le=limit.high,
        description=limit.doc,
    )


class QueueConfig(BaseModel):
    # nan / inf would pass the bounds below (nan compares false) and poison the whole
    # fleet: a lease that never expires, a rate limit that never refills. The upper
    # bounds (taskfleet.protocol.bounds) keep the scripts' ms arithmetic exact: now + a duration
    # in ms prints as an integer in Lua, and counts stay exact doubles.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_concurrency: int = _field("max_concurrency")
    rate_limit_tasks: int | None = _field("rate_limit_tasks")
    rate_limit_cost: int | None = _field("rate_limit_cost")
    rate_limit_period_s: float = _field("rate_limit_period_s")
    max_attempts: int = _field("max_attempts")
    backoff_base_s: float = _field("backoff_base_s")
    backoff_max_s: float = _field("backoff_max_s")
    backoff_jitter: float = _field("backoff_jitter")
    max_lost: int = _field("max_lost")
    lease_ttl_s: float = _field("lease_ttl_s")
    done_retention_s: float = _field("done_retention_s")
    dead_retention_s: float = _field("dead_retention_s")
    max_payload_bytes: int = _field("max_payload_bytes")
    default_timeout_s: float | None = _field("default_timeout_s")
    throttle_base_s: float = _field("throttle_base_s")
    throttle_max_s: float = _field("throttle_max_s")
    budget_day: int | None = _field("budget_day")
    budget_month: int | None = _field("budget_month")
    group_max_concurrency: int = _field("group_max_concurrency")
    group_rate_limit_tasks: int | None = _field("group_rate_limit_tasks")
    group_rate_limit_cost: int | None = _field("group_rate_limit_cost")
    group_budget_day: int | None = _field("group_budget_day")
    group_budget_month: int | None = _field("group_budget_month")

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
