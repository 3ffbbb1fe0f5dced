"""The ProviderQuota resource: its CRD in a real kube-apiserver (defaults, refusals with
fix-it messages), the real operator writing it to a real redis-server and its use back
to status, and the status arithmetic as a table."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from taskfleet import Queue, Quota
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.provider_quota import QuotaUnit, QuotaUse, settle_op
from taskfleet.protocol.scripts import SyncScripts
from taskfleet_operator import providerquotas
from taskfleet_operator.leadership import Leadership
from taskfleet_operator.metrics import OperatorMetrics
from taskfleet_operator.providerquotas import QuotaLinks
from taskfleet_operator.quotaspec import ProviderQuotaSpec

from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import (
    APISERVER_INTERVAL_S,
    APISERVER_TIMEOUT_S,
    GROUP,
    VERSION,
    OperatorProcess,
    kubectl,
)
from tests.fixtures_redis import MakeBroker
from tests.polling import wait_for

PLURAL = "providerquotas"
#: How long the create handler waits before it tries a Redis or Secret again.
RETRY_S = 10.0
URL = "redis://redis.taskfleet-system:6379/0"


def manifest(name: str, spec: dict[str, Any]) -> str:
    return json.dumps(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ProviderQuota",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def apply(server: KubeApiserver, namespace: str, name: str, spec: dict[str, Any]) -> Any:
    return kubectl(
        server, "-n", namespace, "apply", "-f", "-", stdin=manifest(name, spec), check=False
    )


def get_pq(server: KubeApiserver, namespace: str, name: str) -> dict[str, Any]:
    result = kubectl(server, "-n", namespace, "get", "pq", name, "-o", "json")
    body: dict[str, Any] = json.loads(result.stdout)
    return body


@pytest.fixture
def pq_namespace(kube_apiserver: KubeApiserver, kube_namespace: str) -> Iterator[str]:
    """A test namespace whose ProviderQuotas are deleted afterwards (their status timers
    stop before the next test flushes Redis); the finalizer is dropped if nobody did."""
    yield kube_namespace
    kubectl(
        kube_apiserver,
        "-n",
        kube_namespace,
        "delete",
        PLURAL,
        "--all",
        "--wait=false",
        check=False,
    )

    def gone() -> bool:
        listed = kubectl(kube_apiserver, "-n", kube_namespace, "get", PLURAL, "-o", "name")
        return not listed.stdout.strip()

    deadline = time.monotonic() + 15
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.1)
    for name in kubectl(
        kube_apiserver, "-n", kube_namespace, "get", PLURAL, "-o", "name"
    ).stdout.split():
        kubectl(
            kube_apiserver,
            "-n",
            kube_namespace,
            "patch",
            name,
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
            check=False,
        )


# ----------------------------------------------------------------------------- the CRD


def test_a_minimal_providerquota_is_stored_with_a_minute_period(
    kube_apiserver: KubeApiserver, providerquota_crd: str, pq_namespace: str
) -> None:
    spec = {"redis": {"url": URL}, "limits": {"requests": 500}}
    assert apply(kube_apiserver, pq_namespace, "openai", spec).returncode == 0

    stored = get_pq(kube_apiserver, pq_namespace, "openai")["spec"]

    assert stored == {"redis": {"url": URL}, "limits": {"requests": 500}, "periodSeconds": 60}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"limits": {"Input-Tokens": 5}}, "limits keys are unit names"),
        ({"limits": {}}, "should have at least 1 properties"),
        ({"limits": {"requests": 0}}, "should be greater than or equal to 1"),
        ({"periodSeconds": 0}, "should be greater than or equal to 1"),
        ({"maxConcurrency": 0}, "should be greater than or equal to 1"),
        (
            {"redis": {"url": "redis://:hunter2@redis:6379/0"}},
            "redis.url must not contain a password: put the URL in a Secret",
        ),
        (
            {"redis": {"url": URL, "secretRef": {"name": "r"}}},
            "set exactly one of redis.url or redis.secretRef",
        ),
        ({"quotaName": "-openai"}, "spec.quotaName"),
    ],
)
def test_a_bad_providerquota_is_refused_with_a_message_saying_what_to_fix(
    kube_apiserver: KubeApiserver,
    providerquota_crd: str,
    kube_namespace: str,
    change: dict[str, Any],
    message: str,
) -> None:
    spec = {"redis": {"url": URL}, "limits": {"requests": 500}, **change}

    result = apply(kube_apiserver, kube_namespace, "bad", spec)

    assert result.returncode != 0
    assert message in result.stderr
    assert "hunter2" not in result.stderr


def test_a_name_too_long_for_a_quota_needs_spec_quota_name(
    kube_apiserver: KubeApiserver, providerquota_crd: str, pq_namespace: str
) -> None:
    spec = {"redis": {"url": URL}, "limits": {"requests": 500}}

    refused = apply(kube_apiserver, pq_namespace, "a" * 210, spec)
    named = apply(kube_apiserver, pq_namespace, "a" * 210, {**spec, "quotaName": "openai"})

    assert refused.returncode != 0
    assert "set spec.quotaName for a longer one" in refused.stderr
    assert named.returncode == 0, named.stderr


# ----------------------------------------------------------------------------- the operator


def ready(server: KubeApiserver, namespace: str, name: str) -> dict[str, Any] | None:
    status: dict[str, Any] = get_pq(server, namespace, name).get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
    return status if conditions.get("Ready") == "True" else None


def test_the_operator_writes_the_quota_to_redis_and_its_use_to_status(
    kube_apiserver: KubeApiserver,
    providerquota_crd: str,
    operator_process: OperatorProcess,
    pq_namespace: str,
    redis_url: str,
) -> None:
    spec = {
        "redis": {"url": redis_url},
        "quotaName": "openai-written",
        "limits": {"requests": 500, "input_tokens": 200_000},
        "periodSeconds": 60,
        "maxConcurrency": 8,
    }
    assert apply(kube_apiserver, pq_namespace, "openai", spec).returncode == 0

    status = wait_for(
        lambda: ready(kube_apiserver, pq_namespace, "openai"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="ProviderQuota Ready",
    )
    with Quota("openai-written", redis_url=redis_url) as quota:
        use = quota.get()

    assert use is not None
    assert {u: v.limit for u, v in use.units.items()} == {"requests": 500, "input_tokens": 200_000}
    assert (use.period_ms, use.max_concurrency) == (60_000, 8)
    assert status["quotaName"] == "openai-written"
    assert status["units"] == {
        "input_tokens": {"limit": 200_000, "used": 0, "debt": 0},
        "requests": {"limit": 500, "used": 0, "debt": 0},
    }
    assert (status["reserved"], status["paused"]) == (0, False)
    assert status["observedGeneration"] == 1


def test_a_changed_spec_replaces_the_limits_and_keeps_the_windows_use(
    kube_apiserver: KubeApiserver,
    providerquota_crd: str,
    operator_process: OperatorProcess,
    pq_namespace: str,
    redis_url: str,
) -> None:
    spec = {"redis": {"url": redis_url}, "limits": {"requests": 500, "output_tokens": 10}}
    assert apply(kube_apiserver, pq_namespace, "anthropic", spec).returncode == 0
    wait_for(
        lambda: ready(kube_apiserver, pq_namespace, "anthropic"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="ProviderQuota Ready",
    )

    assert (
        apply(
            kube_apiserver, pq_namespace, "anthropic", {**spec, "limits": {"requests": 50}}
        ).returncode
        == 0
    )

    def rewritten() -> dict[str, Any] | None:
        status = ready(kube_apiserver, pq_namespace, "anthropic")
        return status if status and status.get("observedGeneration") == 2 else None

    status = wait_for(
        rewritten,
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="generation 2 applied",
    )
    with Quota("anthropic", redis_url=redis_url) as quota:
        use = quota.get()
    assert use is not None
    assert {u: v.limit for u, v in use.units.items()} == {"requests": 50}
    assert status["units"] == {"requests": {"limit": 50, "used": 0, "debt": 0}}


def test_spec_pause_pauses_the_quota_and_removing_it_resumes_it(
    kube_apiserver: KubeApiserver,
    providerquota_crd: str,
    operator_process: OperatorProcess,
    pq_namespace: str,
    redis_url: str,
) -> None:
    spec = {"redis": {"url": redis_url}, "limits": {"requests": 5}}
    paused = {**spec, "pause": {"reason": "invoice overdue"}}
    assert apply(kube_apiserver, pq_namespace, "paused", paused).returncode == 0

    def paused_status() -> dict[str, Any] | None:
        status = ready(kube_apiserver, pq_namespace, "paused")
        return status if status and status.get("paused") else None

    status = wait_for(
        paused_status,
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="ProviderQuota paused",
    )
    quota = Quota("paused", redis_url=redis_url)
    use = quota.get()
    assert use is not None and use.paused_until_ms > 0 and use.reason == "invoice overdue"
    assert status["pauseReason"] == "invoice overdue"

    assert apply(kube_apiserver, pq_namespace, "paused", spec).returncode == 0

    wait_for(
        lambda: not (quota.get() or use).paused_until_ms,
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the quota resumed on Redis",
    )
    quota.close()


def test_a_pause_written_elsewhere_shows_in_status_within_the_refresh_interval(
    kube_apiserver: KubeApiserver,
    providerquota_crd: str,
    operator_process: OperatorProcess,
    pq_namespace: str,
    redis_url: str,
) -> None:
    spec = {"redis": {"url": redis_url}, "limits": {"requests": 5}}
    assert apply(kube_apiserver, pq_namespace, "shared", spec).returncode == 0
    wait_for(
        lambda: ready(kube_apiserver, pq_namespace, "shared"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="ProviderQuota Ready",
    )

    with Quota("shared", redis_url=redis_url) as quota:
        quota.pause(120, reason="429 from the provider")

    def shown() -> dict[str, Any] | None:
        status = ready(kube_apiserver, pq_namespace, "shared")
        return status if status and status.get("paused") else None

    status = wait_for(
        shown,
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the pause in status",
    )
    assert status["pauseReason"] == "429 from the provider"
    assert status["specPaused"] is False
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Paused"]["status"] == "True"


def test_deleting_a_providerquota_keeps_the_quota_on_redis(
    kube_apiserver: KubeApiserver,
    providerquota_crd: str,
    operator_process: OperatorProcess,
    pq_namespace: str,
    redis_url: str,
) -> None:
    spec = {"redis": {"url": redis_url}, "limits": {"requests": 7}}
    assert apply(kube_apiserver, pq_namespace, "kept", spec).returncode == 0
    wait_for(
        lambda: ready(kube_apiserver, pq_namespace, "kept"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="ProviderQuota Ready",
    )

    kubectl(kube_apiserver, "-n", pq_namespace, "delete", "pq", "kept", "--timeout=30s")

    with Quota("kept", redis_url=redis_url) as quota:
        use = quota.get()
    assert use is not None and use.units["requests"].limit == 7


# ----------------------------------------------------------------------------- status


def use(**units: tuple[int, int]) -> QuotaUse:
    return QuotaUse("openai", 60_000, 0, 0, 0, 0, "", {u: QuotaUnit(*v) for u, v in units.items()})


def test_use_above_the_limit_is_reported_as_debt() -> None:
    patch = providerquotas.status_of(
        use(input_tokens=(1000, 1300), requests=(10, 4)), {}, spec_paused=False, generation=1
    )

    assert patch["units"] == {
        "input_tokens": {"limit": 1000, "used": 1300, "debt": 300},
        "requests": {"limit": 10, "used": 4, "debt": 0},
    }


def test_a_quota_read_unchanged_patches_nothing() -> None:
    first = providerquotas.status_of(use(requests=(10, 4)), {}, spec_paused=False, generation=1)

    again = providerquotas.status_of(
        use(requests=(10, 4)), first, spec_paused=False, generation=None
    )

    assert again == {}


def test_a_unit_dropped_from_the_limits_is_removed_from_status() -> None:
    first = providerquotas.status_of(
        use(requests=(10, 0), output_tokens=(5, 0)), {}, spec_paused=False, generation=1
    )

    patch = providerquotas.status_of(use(requests=(10, 0)), first, spec_paused=False, generation=2)

    assert patch["units"] == {
        "requests": {"limit": 10, "used": 0, "debt": 0},
        "output_tokens": None,
    }


# ----------------------------------------------------------------------------- metrics


def test_the_operator_exports_each_quotas_use_debt_reservations_and_pause(
    redis_url: str, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    spec = ProviderQuotaSpec.model_validate(
        {
            "redis": {"url": redis_url},
            "limits": {"requests": 3, "input_tokens": 1000},
            "periodSeconds": 86_400,  # a day-long window: the test never meets its end
            "maxConcurrency": 2,
        }
    )
    links = QuotaLinks(1.0)
    metrics = OperatorMetrics()
    leadership = Leadership(standalone=True, lifetime_s=15)
    metrics.watch_quotas(links, leadership)
    try:
        links.apply("media", "openai", spec, "openai", was_paused=False)
        with Queue("qa", redis_url=redis_url) as queue:
            queue.enqueue({}, quotas={"openai": {"requests": 1, "input_tokens": 300}})
        [task] = make_broker("qa").claim(1).tasks
        settle = settle_op(QueueKeys("qa"), task.id, task.token, "openai", {"input_tokens": 1400})
        SyncScripts.for_client(redis_client).run(settle)
        with Quota("openai", redis_url=redis_url) as quota:
            quota.pause(60, reason="429")

        labels = {"quota": "openai", "providerquota_namespace": "media", "providerquota": "openai"}

        def sample(name: str, **extra: str) -> float | None:
            return metrics.registry.get_sample_value(name, {**labels, **extra})

        assert sample("taskfleet_quota_redis_up") == 1
        assert sample("taskfleet_quota_used", unit="input_tokens") == 1400
        assert sample("taskfleet_quota_debt", unit="input_tokens") == 400
        assert sample("taskfleet_quota_used", unit="requests") == 1
        assert sample("taskfleet_quota_debt", unit="requests") == 0
        assert sample("taskfleet_quota_limit", unit="input_tokens") == 1000
        assert sample("taskfleet_quota_reserved") == 1
        assert sample("taskfleet_quota_paused") == 1
    finally:
        links.close()


def test_a_quota_whose_redis_does_not_answer_exports_only_redis_up_0() -> None:
    spec = ProviderQuotaSpec.model_validate(
        {"redis": {"url": "redis://127.0.0.1:1/0"}, "limits": {"requests": 3}}
    )
    links = QuotaLinks(0.5)
    with pytest.raises(redis.ConnectionError):
        links.read("media", "openai", spec, "openai")
    metrics = OperatorMetrics()
    metrics.watch_quotas(links, Leadership(standalone=True, lifetime_s=15))
    labels = {"quota": "openai", "providerquota_namespace": "media", "providerquota": "openai"}
    try:
        assert metrics.registry.get_sample_value("taskfleet_quota_redis_up", labels) == 0
        assert metrics.registry.get_sample_value("taskfleet_quota_reserved", labels) is None
    finally:
        links.close()


def test_a_providerquota_reaches_its_redis_through_a_secret_and_says_when_it_is_missing(
    kube_apiserver: KubeApiserver,
    providerquota_crd: str,
    operator_process: OperatorProcess,
    pq_namespace: str,
    redis_url: str,
) -> None:
    spec = {"redis": {"secretRef": {"name": "llm-redis"}}, "limits": {"requests": 9}}
    assert apply(kube_apiserver, pq_namespace, "by-secret", spec).returncode == 0

    def not_ready() -> dict[str, Any] | None:
        status: dict[str, Any] = (
            get_pq(kube_apiserver, pq_namespace, "by-secret").get("status") or {}
        )
        found = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
        return found[0] if found and found[0]["status"] == "False" else None

    condition = wait_for(
        not_ready,
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="Ready False for the missing Secret",
    )
    assert condition["reason"] == "SecretUnavailable"
    assert "llm-redis" in condition["message"]

    kubectl(
        kube_apiserver, "-n", pq_namespace, "create", "secret", "generic", "llm-redis",
        f"--from-literal=url={redis_url}",
    )  # fmt: skip

    wait_for(
        lambda: ready(kube_apiserver, pq_namespace, "by-secret"),
        timeout=APISERVER_TIMEOUT_S + RETRY_S,
        interval=APISERVER_INTERVAL_S,
        what="Ready once the Secret exists (the create handler retries every 10 s)",
    )
    with Quota("by-secret", redis_url=redis_url) as quota:
        use = quota.get()
    assert use is not None and use.units["requests"].limit == 9


@pytest.mark.parametrize(
    ("raw", "name", "message"),
    [
        ({"redis": {"url": URL}, "limits": {"Bad": 1}}, "openai", "limits keys are unit names"),
        ({"redis": {"url": URL}, "limits": {"requests": 0}}, "openai", "limits.requests"),
        ({"redis": {"url": URL}, "limits": {"requests": 1}}, "a" * 210, "set spec.quotaName"),
        (
            {"redis": {"url": "redis://:pw@r:6379/0"}, "limits": {"requests": 1}},
            "openai",
            "must not contain a password",
        ),
    ],
)
def test_a_spec_that_slipped_past_the_crd_is_refused_by_the_operator_with_the_same_words(
    raw: dict[str, Any], name: str, message: str
) -> None:
    with pytest.raises(providerquotas.InvalidQuotaSpec) as refused:
        providerquotas.parse_spec(raw, name)

    assert message in str(refused.value)
    assert "pw" not in str(refused.value)
