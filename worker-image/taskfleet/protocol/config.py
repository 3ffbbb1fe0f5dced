"""``QueueConfig``: the settings every producer and worker of a queue shares.

It is stored in the queue's ``config`` hash (written by the operator or
``Queue.configure``) and read by the Lua scripts at each call, so a change applies to
the whole fleet at once without restarts. The defaults here are also the defaults the
scripts use for absent fields: ``scripts.py`` generates the Lua defaults from this model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from taskfleet.protocol.bounds import (
    MAX_ATTEMPTS,
    MAX_COUNT,
    MAX_DURATION_S,
    MAX_LOST,
    MAX_PAYLOAD_BYTES,
    MAX_TIMEOUT_S,
)


class QueueConfig(BaseModel):
    # nan / inf would pass the bounds below (nan compares false) and poison the whole
    # fleet: a lease that never expires, a rate limit that never refills. The upper
    # bounds (taskfleet.protocol.bounds) keep the scripts' ms arithmetic exact: now + a duration
    # in ms prints as an integer in Lua, and counts stay exact doubles.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_concurrency: int = Field(
        default=0, ge=0, le=MAX_COUNT, description="tasks running at once, fleet-wide; 0 = no limit"
    )
    rate_limit_tasks: int | None = Field(
        default=None, gt=0, le=MAX_COUNT, description="tasks started per period"
    )
    rate_limit_cost: int | None = Field(
        default=None, gt=0, le=MAX_COUNT, description="cost units started per period"
    )
    rate_limit_period_s: float = Field(default=1.0, gt=0, le=MAX_DURATION_S)
    max_attempts: int = Field(
        default=3, ge=1, le=MAX_ATTEMPTS, description="starts before a failing task goes dead"
    )
    backoff_base_s: float = Field(default=1.0, ge=0, le=MAX_DURATION_S)
    backoff_max_s: float = Field(default=300.0, ge=0, le=MAX_DURATION_S)
    backoff_jitter: float = Field(
        default=0.2, ge=0, le=1, description="+- fraction of each backoff"
    )
    max_lost: int = Field(
        default=3,
        ge=1,
        le=MAX_LOST,
        description="lost workers a task survives; one more and it goes dead",
    )
    lease_ttl_s: float = Field(
        default=30.0,
        gt=0,
        le=MAX_DURATION_S,
        description="a lease not extended for this long expires",
    )
    done_retention_s: float = Field(default=3600.0, ge=0, le=MAX_DURATION_S)
    dead_retention_s: float = Field(default=259200.0, ge=0, le=MAX_DURATION_S)
    max_payload_bytes: int = Field(
        default=1024 * 1024,
        gt=0,
        le=MAX_PAYLOAD_BYTES,
        description="bound on payloads and results",
    )
    default_timeout_s: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S)

    @model_validator(mode="after")
    def _backoff_cap_not_below_base(self) -> QueueConfig:
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError("backoff_max_s must be >= backoff_base_s")
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
        return cls.model_validate(data, strict=False)


def _encode(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, float) else str(value)


def lua_defaults() -> dict[str, str]:
    """Defaults of the Lua scripts for config fields absent from the hash."""
    return QueueConfig.model_validate({}).to_redis()
