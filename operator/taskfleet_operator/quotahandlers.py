"""kopf registrations of ProviderQuotas (imported by `handlers`, which registers the rest):
each writes the quota to its Redis through `providerquotas` and applies the status it
returns. Sync handlers run in kopf's thread pool; the DELETED one only closes a client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import kopf
import redis

from taskfleet_operator import kube, memos, providerquotas, quotaspec, wakeups
from taskfleet_operator.connections import describe_error
from taskfleet_operator.models import GROUP, VERSION
from taskfleet_operator.settings import process_settings

PROVIDERQUOTAS = (GROUP, VERSION, quotaspec.PLURAL)
#: Read at import, from the settings `handlers.SETTINGS` holds too.
QUOTA_STATUS_INTERVAL_S = process_settings().quota_status_interval_s


def _unreached(error: redis.RedisError | kube.SecretUnavailable) -> tuple[str, str]:
    """A status reason and message for a quota whose Redis was not reached."""
    reason = "RedisUnreachable" if isinstance(error, redis.RedisError) else "SecretUnavailable"
    return reason, describe_error(error)


def _quota_status(patch: kopf.Patch, fields: Mapping[str, Any]) -> None:
    for field, value in fields.items():
        patch.status[field] = value


@kopf.on.resume(*PROVIDERQUOTAS, backoff=10)
@kopf.on.create(*PROVIDERQUOTAS, backoff=10)
@kopf.on.update(*PROVIDERQUOTAS, backoff=10)
def apply_providerquota(
    *,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """Write the quota to its Redis (`providerquotas.QuotaLinks.apply`: idempotent) and
    its use to status; a Redis not reached is retried every 10 s."""
    namespace, generation = kube.namespaced(namespace), meta.get("generation")
    try:
        model, quota = providerquotas.parse_spec(spec, name)
    except providerquotas.InvalidQuotaSpec as error:
        _quota_status(
            patch, providerquotas.failure_status(status, "InvalidSpec", str(error), generation)
        )
        raise kopf.PermanentError(str(error)) from None
    try:
        use = memos.quota_links(memo).apply(
            namespace, name, model, quota, was_paused=bool(status.get("specPaused"))
        )
    except (redis.RedisError, kube.SecretUnavailable) as error:
        reason, message = _unreached(error)
        _quota_status(patch, providerquotas.failure_status(status, reason, message, None))
        raise kopf.TemporaryError(f"quota not written yet: {message}", delay=10) from None
    _quota_status(
        patch,
        providerquotas.status_of(
            use, status, spec_paused=model.pause is not None, generation=generation
        ),
    )


@kopf.timer(*PROVIDERQUOTAS, interval=QUOTA_STATUS_INTERVAL_S, initial_delay=1)
def refresh_providerquota(
    *,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """The quota's use into status: one script call, a patch only when it changed. A
    quota gone from Redis (flushed, or a Redis that lost its data) is written again."""
    namespace = kube.namespaced(namespace)
    try:
        model, quota = providerquotas.parse_spec(spec, name)
    except providerquotas.InvalidQuotaSpec:
        return  # reported by the create/update handler
    if status.get("observedGeneration") != meta.get("generation"):
        return  # not applied yet: the create/update handler (and its retries) writes it
    links, spec_paused = memos.quota_links(memo), bool(status.get("specPaused"))
    try:
        use = links.read(namespace, name, model, quota)
        if use is None:
            use = links.apply(namespace, name, model, quota, was_paused=spec_paused)
    except (redis.RedisError, kube.SecretUnavailable) as error:
        _quota_status(patch, providerquotas.failure_status(status, *_unreached(error), None))
        return
    _quota_status(
        patch, providerquotas.status_of(use, status, spec_paused=spec_paused, generation=None)
    )


# DELETED events only. The quota stays on Redis (`providerquotas`, docs/quotas.md).
@kopf.on.event(*PROVIDERQUOTAS, when=lambda type, **_: type == "DELETED")
async def forget_deleted_providerquota(
    *, name: str, namespace: str | None, memo: kopf.Memo, **_: Any
) -> None:
    """A ProviderQuota gone: close its Redis client (in a thread)."""
    with contextlib.suppress(wakeups.Stopping):
        await memos.blocking(memo)(memos.quota_links(memo).forget, kube.namespaced(namespace), name)
