"""The TaskQueue's limits on claiming: the fleet-wide rate limit, every group's default
limits, the spend budget and the claim pause after a provider's rate limit (spec fields
`rateLimit`, `groups`, `budget`, `throttle`; part of the CRD schema through models.py)."""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator
from taskfleet.protocol.bounds import MAX_COUNT
from taskfleet.protocol.defaults import DEFAULT

from taskfleet_operator.modelbase import CamelModel, cel

__all__ = ["THROTTLE_ORDER_MESSAGE", "Budget", "GroupLimits", "RateLimit", "Throttle"]


class Budget(CamelModel):
    """Cost units spent per UTC day / calendar month; past it, claims wait for the next."""

    day: int | None = Field(default=None, ge=1, le=1_000_000_000, description="Per UTC day.")
    month: int | None = Field(
        default=None, ge=1, le=1_000_000_000, description="Per UTC calendar month."
    )


THROTTLE_ORDER_MESSAGE = "throttle.maxSeconds must be >= throttle.baseSeconds"


class GroupLimits(CamelModel):
    """Every group's defaults (tasks enqueued with a group: claims are fair between
    groups); a group's own settings, set at run time (`taskfleet group`), win."""

    # bounds.MAX_COUNT: the bound of the same limits set at run time (protocol.groups) and
    # of the config fields these are written to (QueueConfig.group_*)
    max_concurrency: int = Field(
        default=DEFAULT.group_max_concurrency,
        ge=0,
        le=MAX_COUNT,
        description="Tasks of one group run at once; 0 = unlimited.",
    )
    rate_limit_tasks: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="Tasks of one group started per rateLimit.periodSeconds (1 s without it).",
    )
    rate_limit_cost: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="Cost units of one group started per rateLimit.periodSeconds.",
    )
    budget: Budget | None = Field(
        default=None,
        description="Cost units one group claims per UTC day / month (every group's default; "
        "taskfleet quota budget QUEUE --group G sets one group's own).",
    )
    fair_by: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[a-z][a-z0-9_]{0,63}$",
        description="Groups are fair by their settled use of this unit of the provider quotas "
        "their tasks name (output_tokens, say), weighted; unset: by claims.",
    )


class RateLimit(CamelModel):
    """At most `tasks` claims and `cost` units per `periodSeconds`, across the whole fleet."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "has(self.periodSeconds)",
                    "rateLimit.periodSeconds is required when rateLimit is set",
                ),
                cel(
                    "has(self.tasks) || has(self.cost)",
                    "rateLimit needs tasks or cost (or both); remove rateLimit for no limit",
                ),
            ]
        }
    )

    tasks: int | None = Field(default=None, ge=1, le=1_000_000_000, description="Tasks per period.")
    cost: int | None = Field(
        default=None, ge=1, le=1_000_000_000, description="Cost units per period."
    )
    period_seconds: int | None = Field(
        default=None, ge=1, le=86_400, description="Length of a period."
    )

    @model_validator(mode="after")
    def _complete(self) -> RateLimit:
        if self.period_seconds is None:
            raise ValueError("rateLimit.periodSeconds is required when rateLimit is set")
        if self.tasks is None and self.cost is None:
            raise ValueError(
                "rateLimit needs tasks or cost (or both); remove rateLimit for no limit"
            )
        return self


class Throttle(CamelModel):
    """The fleet's claim pause after a rate limit without retry-after (RateLimited)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self.maxSeconds >= self.baseSeconds", THROTTLE_ORDER_MESSAGE)
            ]
        }
    )

    base_seconds: float = Field(
        default=DEFAULT.throttle_base_s, ge=0.01, le=3600, description="First pause."
    )
    max_seconds: float = Field(
        default=DEFAULT.throttle_max_s, ge=0.01, le=86_400, description="Longest pause."
    )

    @model_validator(mode="after")
    def _ordered(self) -> Throttle:
        if self.max_seconds < self.base_seconds:
            raise ValueError(THROTTLE_ORDER_MESSAGE)
        return self
