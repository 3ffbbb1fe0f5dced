"""`spec.schedules` of a TaskQueue: cron schedules the operator syncs into the queue.

Each entry is checked twice, as a pattern (so ``kubectl apply`` refuses the shape of a
bad cron expression or time zone) and by the library's own parsers, the ones every
worker fires the schedule with, so a spec the operator accepts is one the workers can
run. That names are unique across the list is TaskQueueSpec's rule, beside the others
that span fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from taskfleet.protocol.cron import parse_cron
from taskfleet.protocol.slots import zone

from taskfleet_operator.modelbase import K8S_OBJECT, NAME_PATTERN, CamelModel

# Five or six space-separated fields of cron characters, or a macro (@daily), so
# `kubectl apply` refuses the shape (a stray shell word); the library's parser
# (taskfleet.protocol.cron) checks the rest.
_CRON_FIELD = r"[-0-9*/,A-Za-z?]+"
CRON_PATTERN = rf"^(@[a-z]+|{_CRON_FIELD}(\s+{_CRON_FIELD}){{4,5}})$"
ZONE_PATTERN = r"^[A-Za-z][-+_A-Za-z0-9]*(/[-+_A-Za-z0-9]+)*$"


class Schedule(CamelModel):
    """A cron schedule, synced by the operator into the queue's schedule store, where every
    worker (and the operator) fires it: `payload` once per slot."""

    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN)
    cron: str = Field(
        min_length=5,
        max_length=128,
        pattern=CRON_PATTERN,
        description="Cron expression: five fields (minute hour day month weekday), six "
        "with seconds first, or a macro (@hourly, @daily, @weekly, @monthly, @yearly); "
        "in timeZone.",
    )
    time_zone: str = Field(
        default="UTC",
        min_length=1,
        max_length=64,
        pattern=ZONE_PATTERN,
        description="IANA time zone of the cron expression (DST as cron does it: see "
        "docs/schedules.md).",
    )
    payload: Annotated[dict[str, Any], Field(json_schema_extra=K8S_OBJECT)] = Field(
        default_factory=dict, description="The task payload, a JSON object."
    )
    priority: int = Field(default=0, ge=-1000, le=1000)
    catchup: Literal["latest", "all"] = Field(
        default="latest",
        description="After downtime: fire the latest missed slot only, or every missed "
        "slot (at most catchupLimit, the latest).",
    )
    catchup_limit: int = Field(default=100, ge=1, le=10_000)
    jitter_seconds: int = Field(
        default=0, ge=0, le=86_400, description="Fire each slot up to this late (spread)."
    )
    suspend: bool = Field(default=False, description="Fire nothing while true.")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        parse_cron(value)  # InvalidArgument (a ValueError) says what is wrong
        return value

    @field_validator("time_zone")
    @classmethod
    def _valid_zone(cls, value: str) -> str:
        zone(value)
        return value
