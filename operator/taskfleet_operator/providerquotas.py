"""ProviderQuota resources: write each to its Redis, read its use back for status and
metrics.

The handlers call `QuotaLinks.apply` when a ProviderQuota is created, changed or found
at start-up, and `QuotaLinks.read` from a timer; both are one script call (two with a
pause to set or end). What status shows is a pure function of the read (`status_of`).

Deleting a ProviderQuota leaves the quota on Redis as it was: tasks already enqueued
name it, and without it their claims would run them unreserved, over the provider's
limit. A recreated resource finds its window's use and debt where they were.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from taskfleet.producer.providerquota import seconds_to_ms
from taskfleet.protocol.connect import SyncClient, connect
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.provider_quota import ProviderQuotaOps, QuotaUse
from taskfleet.protocol.redisurl import InvalidRedisURL, parse_redis_url
from taskfleet.protocol.scripts import SyncScripts

from taskfleet_operator import kube
from taskfleet_operator import status as tqstatus
from taskfleet_operator.quotaspec import ProviderQuotaSpec

__all__ = [
    "PAUSED",
    "READY",
    "SPEC_PAUSE_S",
    "InvalidQuotaSpec",
    "QuotaLinks",
    "parse_spec",
    "status_of",
]

READY = "Ready"
PAUSED = "Paused"
#: How long a pause for spec.pause lasts: as long as the protocol allows (until the
#: spec drops it, which resumes the quota).
SPEC_PAUSE_S = 100 * 365 * 86_400


class InvalidQuotaSpec(Exception):  # noqa: N818 - reported as the condition reason
    """The spec cannot be written as a quota; the message says what to fix."""


def parse_spec(raw: Mapping[str, Any], resource_name: str) -> tuple[ProviderQuotaSpec, str]:
    """The spec as the model, and the quota's name on Redis."""
    try:
        spec = ProviderQuotaSpec.model_validate(dict(raw))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'spec'}: {error['msg']}"
            for error in exc.errors()
        )
        raise InvalidQuotaSpec(f"invalid spec: {problems}") from None
    try:
        return spec, spec.name_on_redis(resource_name)
    except ValueError as exc:
        raise InvalidQuotaSpec(f"set spec.quotaName: {exc}") from None


def _iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_of(
    use: QuotaUse,
    previous: Mapping[str, Any] | None,
    *,
    spec_paused: bool,
    generation: int | None,
    now: str | None = None,
) -> dict[str, Any]:
    """The status a read of the quota gives, as a merge patch of what changed since
    ``previous``: a quota nobody uses reads the same each time and patches nothing."""
    previous = previous or {}
    units = {
        unit: {"limit": u.limit, "used": u.used, "debt": max(0, u.used - u.limit) if u.limit else 0}
        for unit, u in use.units.items()
    }
    paused = use.paused_until_ms > 0
    conditions = previous.get("conditions")
    conditions = tqstatus.set_condition(
        conditions, READY, True, "Applied", f"quota {use.name} is written on Redis", now=now
    )
    conditions = tqstatus.set_condition(
        conditions,
        PAUSED,
        paused,
        "Paused" if paused else "NotPaused",
        (use.reason or "paused") if paused else "claims of its tasks may start",
        now=now,
    )
    desired: dict[str, Any] = {
        "quotaName": use.name,
        "units": units,
        "reserved": use.reserved,
        "paused": paused,
        "pausedUntil": _iso_ms(use.paused_until_ms) if paused else None,
        "pauseReason": use.reason if paused else None,
        "specPaused": spec_paused,
        "conditions": conditions,
    }
    if generation is not None:
        desired["observedGeneration"] = generation
    patch = tqstatus.changes(previous, desired)
    if "units" in patch and isinstance(previous.get("units"), Mapping):
        # A merge patch merges maps: a unit gone from the limits is removed with a null.
        for unit in previous["units"]:
            patch["units"].setdefault(unit, None)
    if set(patch) == {"conditions"} and _same_conditions(previous.get("conditions"), conditions):
        return {}
    return patch


def _same_conditions(old: Sequence[Mapping[str, Any]] | None, new: list[dict[str, Any]]) -> bool:
    strip = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in old or ()]
    return strip == [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in new]


def failure_status(
    previous: Mapping[str, Any] | None, reason: str, message: str, generation: int | None
) -> dict[str, Any]:
    """The status patch of a spec refused or a Redis not reached (Ready False)."""
    conditions = tqstatus.set_condition(
        (previous or {}).get("conditions"), READY, False, reason, message
    )
    desired: dict[str, Any] = {"conditions": conditions}
    if generation is not None:
        desired["observedGeneration"] = generation
    patch = tqstatus.changes(previous, desired)
    if set(patch) == {"conditions"} and _same_conditions(
        (previous or {}).get("conditions"), conditions
    ):
        return {}
    return patch


@dataclass(frozen=True)
class Link:
    """One ProviderQuota's way to its Redis: the resolved URL's digest and its client."""

    digest: str
    client: SyncClient
    scripts: SyncScripts


class QuotaLinks:
    """One Redis client per ProviderQuota, rebuilt when its URL changes (a rotated
    Secret). Few quotas exist, so no client is shared; handlers run in threads, hence
    the lock, and no Redis call is made while holding it."""

    def __init__(self, timeout_s: float, url_ttl_s: float = 30.0) -> None:
        self._timeout_s = timeout_s
        self._url_ttl_s = url_ttl_s
        self._lock = threading.Lock()
        self._links: dict[tuple[str, str], Link] = {}
        self._specs: dict[tuple[str, str], tuple[ProviderQuotaSpec, str]] = {}
        # A Secret's URL, kept url_ttl_s: the timer and each scrape do not GET it each time.
        self._urls: dict[tuple[str, str, str], tuple[float, str]] = {}

    def _url(self, namespace: str, spec: ProviderQuotaSpec) -> str:
        if spec.redis.url is not None:
            return spec.redis.url
        ref = spec.redis.secret_ref
        assert ref is not None  # the model guarantees exactly one of url / secretRef
        key, now = (namespace, ref.name, ref.key), time.monotonic()
        with self._lock:
            cached = self._urls.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        url = kube.read_secret_value(namespace, ref.name, ref.key)
        with self._lock:
            self._urls[key] = (now + self._url_ttl_s, url)
        return url

    def _link(self, namespace: str, name: str, spec: ProviderQuotaSpec) -> Link:
        url = self._url(namespace, spec)
        digest = hashlib.sha256(url.encode()).hexdigest()
        key = (namespace, name)
        with self._lock:
            link = self._links.get(key)
        if link is not None and link.digest == digest:
            return link
        try:
            parse_redis_url(url)
        except InvalidRedisURL as exc:
            with self._lock:
                self._urls.clear()  # read the Secret again once it is fixed
            raise kube.SecretUnavailable(f"the Redis URL is not usable: {exc}") from None
        client = connect(
            url, socket_timeout=self._timeout_s, socket_connect_timeout=self._timeout_s
        )
        fresh = Link(digest, client, SyncScripts.for_client(client))
        with self._lock:
            old = self._links.get(key)
            self._links[key] = fresh
        if old is not None:
            old.client.close()
        return fresh

    def apply(
        self, namespace: str, name: str, spec: ProviderQuotaSpec, quota: str, *, was_paused: bool
    ) -> QuotaUse:
        """Write the spec: configure (idempotent: limits replaced, use kept), then pause
        for spec.pause, or resume when the operator's own pause was just dropped."""
        self._remember(namespace, name, spec, quota)
        ops = ProviderQuotaOps(quota)
        scripts = self._link(namespace, name, spec).scripts
        period_ms = seconds_to_ms(spec.period_seconds, "periodSeconds")
        use = scripts.run(ops.configure(spec.limits, period_ms, spec.max_concurrency))
        if spec.pause is not None:
            reason = spec.pause.reason or f"spec.pause of ProviderQuota {namespace}/{name}"
            use = scripts.run(ops.pause(SPEC_PAUSE_S * 1000, reason))
        elif was_paused:
            use = scripts.run(ops.resume())
        if use is None:  # configure creates it: only a flush between the calls gets here
            raise InvalidArgument(f"quota {quota} vanished while it was written")
        return use

    def read(
        self, namespace: str, name: str, spec: ProviderQuotaSpec, quota: str
    ) -> QuotaUse | None:
        """The quota as Redis has it now (one script call); None if it is not there."""
        self._remember(namespace, name, spec, quota)
        return self._link(namespace, name, spec).scripts.run(ProviderQuotaOps(quota).get())

    def _remember(self, namespace: str, name: str, spec: ProviderQuotaSpec, quota: str) -> None:
        """Known from now on (`known`), even before its Redis answers: its metrics then
        say that it does not."""
        with self._lock:
            self._specs[(namespace, name)] = (spec, quota)

    def known(self) -> list[tuple[str, str, ProviderQuotaSpec, str]]:
        """Every ProviderQuota written or read (or tried) since it was last forgotten."""
        with self._lock:
            return [(ns, n, spec, quota) for (ns, n), (spec, quota) in self._specs.items()]

    def forget(self, namespace: str, name: str) -> None:
        """A ProviderQuota gone: close its client (the quota stays on Redis)."""
        with self._lock:
            link = self._links.pop((namespace, name), None)
            self._specs.pop((namespace, name), None)
        if link is not None:
            link.client.close()

    def close(self) -> None:
        with self._lock:
            links, self._links = list(self._links.values()), {}
            self._specs.clear()
        for link in links:
            link.client.close()
