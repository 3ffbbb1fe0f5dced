"""The ProviderQuota resource as pydantic models: the single source of its CRD schema.

A ProviderQuota declares a provider quota (docs/quotas.md) on a Redis: limits per unit
per period, a concurrency cap and an optional pause. The operator writes it with
``Quota.configure`` and reports its use in status (`providerquotas`). As for TaskQueue,
each rule appears as CEL (``kubectl apply`` refuses a bad spec with a message saying
what to fix) and as a pydantic validator (a spec that slipped past an older CRD).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, field_validator
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.provider_quota import (
    MAX_QUOTA_AMOUNT,
    MAX_UNITS,
    ProviderQuotaOps,
    check_amounts,
)

from taskfleet_operator.modelbase import CamelModel, Opaque, cel
from taskfleet_operator.models import GROUP, VERSION, Condition
from taskfleet_operator.redisspec import RedisRef

__all__ = [
    "KIND",
    "PLURAL",
    "ProviderQuotaSpec",
    "ProviderQuotaStatus",
    "QuotaPause",
    "UnitStatus",
]

KIND = "ProviderQuota"
PLURAL = "providerquotas"
SINGULAR = "providerquota"
SHORT_NAMES = ["pq"]
API_VERSION = f"{GROUP}/{VERSION}"

#: As `taskfleet.protocol.keys` checks them; CEL and re (RE2) read these alike.
UNIT_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
QUOTA_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
UNIT_MESSAGE = (
    "limits keys are unit names: 1-64 lower-case letters, digits or '_', starting with a "
    "letter (requests, input_tokens, output_tokens, ...)"
)
#: The longest period: a year (a provider's window is a minute or a day).
MAX_PERIOD_S = 31_536_000

Limit = Annotated[int, Field(ge=1, le=MAX_QUOTA_AMOUNT)]


class QuotaPause(CamelModel):
    """While set, no claim starts a task naming the quota, in any queue or language."""

    reason: str = Field(
        default="", max_length=200, description="Shown with the pause (status, CLI)."
    )


class ProviderQuotaSpec(CamelModel):
    """A provider quota shared by every queue of one Redis that names it."""

    redis: RedisRef = Field(
        description="The Redis of the queues that share the quota: a URL without a "
        "password, or a Secret holding the URL (as TaskQueue's spec.redis)."
    )
    quota_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=QUOTA_NAME_PATTERN,
        description="The quota's name on Redis, as tasks name it (quotas={name: ...}); "
        "default: the resource's name.",
    )
    limits: dict[str, Limit] = Field(
        min_length=1,
        max_length=MAX_UNITS,
        description="Units per period, by unit name (requests, input_tokens, "
        "output_tokens, or any lower-case name). Units left out have no limit.",
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(f"self.all(unit, unit.matches('{UNIT_PATTERN}'))", UNIT_MESSAGE)
            ]
        },
    )
    period_seconds: int = Field(
        default=60, ge=1, le=MAX_PERIOD_S, description="The window the limits count over."
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=MAX_QUOTA_AMOUNT,
        description="Most runs naming the quota at once, across every queue; unset: no cap.",
    )
    pause: QuotaPause | None = Field(
        default=None,
        description="Set: the quota is paused until it is removed. Removing it ends any "
        "pause, a 429's included.",
    )

    @field_validator("limits")
    @classmethod
    def _unit_names(cls, limits: dict[str, int]) -> dict[str, int]:
        try:
            check_amounts(limits, "limits", positive=True)  # the library's own checks
        except InvalidArgument as exc:
            raise ValueError(f"{UNIT_MESSAGE}: {exc}") from None
        return limits

    def name_on_redis(self, resource_name: str) -> str:
        """The quota's name on Redis: ``quotaName``, else the resource's name (a
        ``ValueError`` when it is no quota name)."""
        try:
            return ProviderQuotaOps(self.quota_name or resource_name).name
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from None


class UnitStatus(CamelModel):
    """One unit of the quota as the last read found it."""

    limit: int = Field(description="Units per period (0: none set).")
    used: int = Field(
        description="This window's use: settled use, and the estimates of runs not settled."
    )
    debt: int = Field(
        description="Use above the limit (a settlement above its estimate): the next "
        "windows start with it."
    )


class ProviderQuotaStatus(CamelModel):
    """What the operator wrote and last read; every field is optional (filled in stages)."""

    model_config = ConfigDict(extra="ignore")

    quota_name: str | None = Field(default=None, description="The quota's name on Redis.")
    units: dict[str, UnitStatus] | None = Field(default=None, description="Use by unit.")
    reserved: int | None = Field(
        default=None, description="Runs holding a concurrency reservation now."
    )
    paused: bool | None = Field(default=None, description="Whether a pause holds now.")
    paused_until: str | None = Field(
        default=None, max_length=64, description="When the pause ends (RFC 3339)."
    )
    pause_reason: str | None = Field(default=None, max_length=256)
    spec_paused: bool | None = Field(
        default=None,
        description="The operator paused the quota for spec.pause (and resumes it when "
        "spec.pause is removed).",
    )
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list, max_length=16)
    kopf: Opaque | None = Field(
        default=None,
        description="The operator framework's record: the spec last handled (what an update "
        "is compared with) and a handler's progress while it retries.",
    )
