"""The generated CRD in a real kube-apiserver: defaults, rejections with fix-it messages, scale."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import base_spec, kubectl, manifest

URL = "redis://redis.taskfleet-system:6379/0"


def apply(server: KubeApiserver, namespace: str, name: str, spec: dict[str, Any]) -> Any:
    return kubectl(
        server, "-n", namespace, "apply", "-f", "-", stdin=manifest(name, spec), check=False
    )


def get_tq(server: KubeApiserver, namespace: str, name: str) -> dict[str, Any]:
    result = kubectl(server, "-n", namespace, "get", "tq", name, "-o", "json")
    body: dict[str, Any] = json.loads(result.stdout)
    return body


def test_a_minimal_taskqueue_is_stored_with_every_default_filled_in(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str
) -> None:
    spec = {"image": "w:1", "handler": "app:run", "redis": {"url": URL}}
    assert apply(kube_apiserver, tq_namespace, "minimal", spec).returncode == 0

    stored = get_tq(kube_apiserver, tq_namespace, "minimal")["spec"]
    assert (
        apply(
            kube_apiserver,
            tq_namespace,
            "quantities",
            {**spec, "resources": {"limits": {"cpu": 1, "memory": "256Mi"}}},
        ).returncode
        == 0
    )
    assert stored["replicas"] == 1
    assert stored["concurrency"] == 4
    assert stored["maxTaskDurationSeconds"] == 300
    assert stored["heartbeat"] == {"intervalSeconds": 5, "ttlSeconds": 30}
    assert stored["retention"] == {"doneSeconds": 3600, "deadSeconds": 259200}
    assert stored["backoff"] == {"baseSeconds": 1, "maxSeconds": 300}
    assert stored["onDelete"] == "Retain"
    assert "autoscale" not in stored  # fixed replicas unless autoscale is asked for


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"heartbeat": {"intervalSeconds": 10, "ttlSeconds": 15}},
            "heartbeat.ttlSeconds must be at least 2x heartbeat.intervalSeconds",
        ),
        (
            {"redis": {"url": URL, "secretRef": {"name": "r"}}},
            "set exactly one of redis.url or redis.secretRef",
        ),
        ({"redis": {}}, "set exactly one of redis.url or redis.secretRef"),
        (
            {"redis": {"url": "redis://:hunter2@redis:6379/0"}},
            "redis.url must not contain a password: put the URL in a Secret",
        ),
        (
            {"redis": {"url": "redis://redis:6379/0?password=hunter2"}},
            "must not carry a credential in its query (a key like password, token or secret, "
            "in any case): put the URL in a Secret and use redis.secretRef",
        ),
        (
            {"redis": {"url": "redis://redis:6379/0?db=1&password=hunter2"}},
            "use redis.secretRef",
        ),
        ({"rateLimit": {"tasks": 10}}, "rateLimit.periodSeconds is required"),
        ({"rateLimit": {"periodSeconds": 60}}, "rateLimit needs tasks or cost (or both)"),
        (
            {"backoff": {"baseSeconds": 10, "maxSeconds": 5}},
            "backoff.maxSeconds must be >= backoff.baseSeconds",
        ),
        (
            {"throttle": {"baseSeconds": 10, "maxSeconds": 5}},
            "throttle.maxSeconds must be >= throttle.baseSeconds",
        ),
        (
            {"schedules": [{"name": "a", "cron": "0 * * * *"}, {"name": "a", "cron": "5 * * * *"}]},
            "schedule names must be unique",
        ),
        (
            {"schedules": [{"name": "a", "cron": "0 3 * * * * *"}]},
            "spec.schedules[0].cron in body should match",
        ),
        (
            {"schedules": [{"name": "a", "cron": "0 3 * * *; reboot"}]},
            "spec.schedules[0].cron in body should match",
        ),
        ({"env": [{"name": "TASKFLEET_REDIS_URL", "value": "x"}]}, "the operator sets them"),
        ({"handler": "not a handler"}, "spec.handler"),
        (
            {"handler": None},
            "give handler (tasks without a name), handlers (by task name), or both",
        ),
        ({"handler": None, "handlers": {}}, "give handler (tasks without a name)"),
        ({"handlers": {"re size": "app.media:resize"}}, "handlers keys are task names"),
        ({"handlers": {"resize": "app.media"}}, "spec.handlers.resize"),
        ({"replicas": 1001}, "spec.replicas"),
        (
            {"autoscale": {"minReplicas": 5, "maxReplicas": 3}},
            "autoscale.minReplicas must be <= autoscale.maxReplicas",
        ),
        ({"autoscale": {"minReplicas": 2}}, "spec.autoscale.maxReplicas: Required value"),
        ({"maxTasksPerChild": 50}, "maxTasksPerChild needs isolation: process"),
        (
            {"isolation": "thread", "maxTasksPerChild": 50},
            "maxTasksPerChild needs isolation: process",
        ),
        ({"isolation": "fork"}, "spec.isolation: Unsupported value"),
        ({"isolation": "process", "maxTasksPerChild": 0}, "spec.maxTasksPerChild"),
        ({"autoscale": {"maxReplicas": 1001}}, "spec.autoscale.maxReplicas"),
        ({"autoscale": {"maxReplicas": 0}}, "spec.autoscale.maxReplicas"),
        (
            {"autoscale": {"maxReplicas": 5, "targetUtilizationPercent": 0}},
            "spec.autoscale.targetUtilizationPercent",
        ),
        (
            {"autoscale": {"maxReplicas": 5, "scaleDownStabilizationSeconds": -1}},
            "spec.autoscale.scaleDownStabilizationSeconds",
        ),
        ({"onDelete": "Keep"}, 'supported values: "Retain", "Purge"'),
    ],
)
def test_an_invalid_taskqueue_is_rejected_with_a_message_saying_what_to_fix(
    kube_apiserver: KubeApiserver,
    taskqueue_crd: str,
    tq_namespace: str,
    change: dict[str, Any],
    message: str,
) -> None:
    result = apply(kube_apiserver, tq_namespace, "bad", base_spec(URL, **change))

    assert result.returncode != 0
    assert message in result.stderr


def test_process_isolation_with_recycling_is_accepted_and_stored(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str
) -> None:
    spec = base_spec(URL, isolation="process", maxTasksPerChild=200)
    assert apply(kube_apiserver, tq_namespace, "isolated", spec).returncode == 0
    stored = get_tq(kube_apiserver, tq_namespace, "isolated")["spec"]
    assert (stored["isolation"], stored["maxTasksPerChild"]) == ("process", 200)


def test_an_autoscaled_taskqueue_is_stored_with_the_autoscale_defaults(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str
) -> None:
    spec = base_spec(URL, autoscale={"maxReplicas": 20})
    assert apply(kube_apiserver, tq_namespace, "auto", spec).returncode == 0
    scale_to_zero = base_spec(URL, autoscale={"minReplicas": 0, "maxReplicas": 1})
    assert apply(kube_apiserver, tq_namespace, "to-zero", scale_to_zero).returncode == 0

    stored = get_tq(kube_apiserver, tq_namespace, "auto")["spec"]

    assert stored["autoscale"] == {
        "minReplicas": 1,
        "maxReplicas": 20,
        "targetUtilizationPercent": 100,
        "scaleDownStabilizationSeconds": 60,
        "dueHorizonSeconds": 5,
    }
    assert get_tq(kube_apiserver, tq_namespace, "to-zero")["spec"]["autoscale"]["minReplicas"] == 0


def test_a_name_longer_than_a_label_value_is_rejected(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str
) -> None:
    result = apply(kube_apiserver, tq_namespace, "q" * 64, base_spec(URL))

    assert result.returncode != 0
    assert "TaskQueue names are at most 63 characters" in result.stderr


def test_kubectl_scale_changes_spec_replicas_through_the_scale_subresource(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str
) -> None:
    assert apply(kube_apiserver, tq_namespace, "scaled", base_spec(URL)).returncode == 0

    kubectl(kube_apiserver, "-n", tq_namespace, "scale", "tq/scaled", "--replicas=5")

    assert get_tq(kube_apiserver, tq_namespace, "scaled")["spec"]["replicas"] == 5
    scale = json.loads(
        kubectl(
            kube_apiserver,
            "get",
            "--raw",
            f"/apis/taskfleet.dev/v1alpha1/namespaces/{tq_namespace}/taskqueues/scaled/scale",
        ).stdout
    )
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 5


def test_kubectl_scale_of_an_autoscaled_taskqueue_writes_spec_replicas_and_keeps_autoscale(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str
) -> None:
    """The scale subresource is not refused (an HPA or a script would break on an error);
    spec.replicas changes and autoscale, which then owns the pods, stays as it was."""
    spec = base_spec(URL, autoscale={"minReplicas": 0, "maxReplicas": 8})
    assert apply(kube_apiserver, tq_namespace, "auto-scaled", spec).returncode == 0

    kubectl(kube_apiserver, "-n", tq_namespace, "scale", "tq/auto-scaled", "--replicas=5")

    stored = get_tq(kube_apiserver, tq_namespace, "auto-scaled")["spec"]
    assert stored["replicas"] == 5
    assert (stored["autoscale"]["minReplicas"], stored["autoscale"]["maxReplicas"]) == (0, 8)


def test_kubectl_get_shows_the_printer_columns_and_the_short_name_works(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str
) -> None:
    assert apply(kube_apiserver, tq_namespace, "cols", base_spec(URL)).returncode == 0

    header = kubectl(kube_apiserver, "-n", tq_namespace, "get", "tq").stdout.splitlines()[0]

    assert header.split() == [
        "NAME",
        "REPLICAS",
        "DESIRED",
        "READY",
        "PENDING",
        "RUNNING",
        "DEAD",
        "AGE",
    ]


SECRET = "Zq7-sEcReT-9x"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"redis://redis:6379/0?pass%77ord={SECRET}", "must not percent-encode its query"),
        (f"redis://redis:6379/0?p%61ssword={SECRET}", "must not percent-encode its query"),
        (f"redis://redis:6379/0?PASSWORD={SECRET}", "must not carry a credential in its query"),
        (f"redis://redis:6379/0?auth_token={SECRET}", "must not carry a credential in its query"),
        (f"redis://u%3Ax:{SECRET}@redis:6379/0", "must not contain a password"),
        (f"redis://:{SECRET}@redis:6379/0", "must not contain a password"),
        (f"unix:///run/redis.sock?password={SECRET}", "must not carry a credential in its query"),
        ("redis://redis:6379/abc", "must be a whole number, as in redis://host:6379/0"),
        ("redis://redis:6379/0?foo=bar", "query parameter taskfleet does not accept; allowed: db,"),
        ("redis://redis:6379/0?clustered=true", "query parameter taskfleet does not accept"),
    ],
)
def test_a_redis_url_with_a_hidden_credential_or_that_redis_py_would_misread_is_rejected(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str, url: str, message: str
) -> None:
    result = apply(kube_apiserver, tq_namespace, "bad", base_spec(url))

    assert result.returncode != 0
    assert message in result.stderr
    assert SECRET not in result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "redis://redis.taskfleet-system.svc:6379/3?socket_timeout=2.5&client_name=tq",
        "rediss://redis.example:6380/0?ssl_cert_reqs=none",
        "unix:///run/redis/redis.sock?db=2",
        "redis://worker@redis:6379",
        "redis://redis-cluster:6379/0?cluster=true&wait_replicas=1&wait_timeout_ms=500",
    ],
)
def test_a_usable_redis_url_with_options_is_accepted(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str, url: str
) -> None:
    result = apply(kube_apiserver, tq_namespace, "good", base_spec(url))

    assert result.returncode == 0, result.stderr


# ----------------------------------------------------------------------------- spec.template

SIDECAR_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "media"}, "annotations": {"sidecar.istio.io/inject": "false"}},
    "spec": {
        "imagePullSecrets": [{"name": "registry"}],
        "volumes": [{"name": "ca", "configMap": {"name": "redis-ca"}}],
        "initContainers": [
            {
                "name": "proxy",
                "image": "proxy:2",
                "restartPolicy": "Always",
                "startupProbe": {"tcpSocket": {"port": 5432}},
            }
        ],
        "containers": [{"name": "shipper", "image": "shipper:1", "workingDir": "/logs"}],
        "priorityClassName": "batch-low",
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
            }
        ],
        "securityContext": {"fsGroup": 2000},
    },
    "worker": {
        "volumeMounts": [{"name": "ca", "mountPath": "/etc/redis-ca", "readOnly": True}],
        "envFrom": [{"configMapRef": {"name": "app"}}],
        "env": [{"name": "MODEL_DIR", "value": "/models"}],
    },
}


def test_a_taskqueue_with_a_pod_template_is_stored_as_given_with_the_guard_on_by_default(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str
) -> None:
    result = apply(
        kube_apiserver, tq_namespace, "templated", base_spec(URL, template=SIDECAR_TEMPLATE)
    )

    assert result.returncode == 0, result.stderr
    stored = get_tq(kube_apiserver, tq_namespace, "templated")["spec"]
    assert stored["template"] == SIDECAR_TEMPLATE  # nothing pruned: the opaque parts kept
    assert stored["disruptionGuard"] is True


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (
            {"worker": {"command": ["sh", "-c", "x"]}},
            "spec.template.worker.command is set by the operator",
        ),
        ({"worker": {"lifecycle": {"preStop": {}}}}, "preStop hook runs `taskfleet drain`"),
        ({"worker": {"ports": [{"containerPort": 80}]}}, "the operator owns the metrics ports"),
        (
            {"spec": {"terminationGracePeriodSeconds": 1}},
            "terminationGracePeriodSeconds is set by the operator",
        ),
        ({"spec": {"containers": [{"name": "worker", "image": "x"}]}}, "may not be named 'worker'"),
        ({"metadata": {"labels": {"taskfleet.dev/queue": "x"}}}, "labels must not set"),
        (
            {
                "metadata": {
                    "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}
                }
            },
            "annotations must not set",
        ),
        (
            {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}},
            "volumes: hostPath is not allowed: the restricted Pod Security Standard allows only",
        ),
        ({"spec": {"volumes": [{"name": "tmp", "emptyDir": {}}]}}, "must not be named 'tmp'"),
        ({"spec": {"hostNetwork": True}}, "hostNetwork: host namespaces are refused"),
        ({"spec": {"hostPID": True}}, "hostPID: host namespaces are refused"),
        (
            {
                "spec": {
                    "containers": [
                        {"name": "s", "image": "i", "securityContext": {"privileged": True}}
                    ]
                }
            },
            "privileged containers are refused",
        ),
        ({"worker": {"securityContext": {"runAsUser": 0}}}, "runAsUser 0 (root) is refused"),
        (
            {"worker": {"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}},
            "capabilities.add may hold only NET_BIND_SERVICE",
        ),
        (
            {"spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}},
            'supported values: "RuntimeDefault", "Localhost"',
        ),
        (
            {
                "spec": {
                    "containers": [
                        {
                            "name": "s",
                            "image": "i",
                            "ports": [{"containerPort": 80, "hostPort": 80}],
                        }
                    ]
                }
            },
            "must not use hostPort or hostIP",
        ),
        (
            {"worker": {"volumeMounts": [{"name": "ca", "mountPath": "/etc/ca"}]}},
            "names a volume that spec.template.spec.volumes does not declare",
        ),
        (
            {
                "spec": {"volumes": [{"name": "ca", "emptyDir": {}}]},
                "worker": {"volumeMounts": [{"name": "ca", "mountPath": "/tmp/taskfleet"}]},
            },
            "must not mount at /tmp or /tmp/taskfleet",
        ),
        (
            {"worker": {"env": [{"name": "TASKFLEET_QUEUE", "value": "x"}]}},
            "spec.template.worker.env must not repeat a name of spec.env, nor set",
        ),
        ({"spec": {"nodeName": "node-1"}}, 'unknown field "spec.template.spec.nodeName"'),
    ],
)
def test_an_invalid_pod_template_is_refused_at_apply_with_a_message_naming_the_field(
    kube_apiserver: KubeApiserver,
    taskqueue_crd: str,
    tq_namespace: str,
    template: dict[str, Any],
    message: str,
) -> None:
    result = apply(kube_apiserver, tq_namespace, "bad", base_spec(URL, template=template))

    assert result.returncode != 0
    assert message in result.stderr


def test_a_flat_scheduling_field_and_its_template_twin_together_are_refused(
    kube_apiserver: KubeApiserver, taskqueue_crd: str, tq_namespace: str
) -> None:
    spec = base_spec(
        URL, nodeSelector={"pool": "a"}, template={"spec": {"nodeSelector": {"pool": "b"}}}
    )
    result = apply(kube_apiserver, tq_namespace, "twins", spec)

    assert result.returncode != 0
    assert "set nodeSelector in one place, spec.nodeSelector or spec.template.spec" in result.stderr


def test_kubectl_explain_documents_the_pod_template_and_the_disruption_guard(
    kube_apiserver: KubeApiserver, taskqueue_crd: str
) -> None:
    def explain(path: str) -> str:
        return kubectl(kube_apiserver, "explain", path).stdout

    template = explain("taskqueue.spec.template")
    worker = explain("taskqueue.spec.template.worker")
    volumes = explain("taskqueue.spec.template.spec.volumes")
    guard = explain("taskqueue.spec.disruptionGuard")

    assert "merged under the operator's own" in " ".join(template.split())
    for field in ("metadata", "spec", "worker"):
        assert f"  {field}\t" in template, field
    for field in ("volumeMounts", "envFrom", "env", "securityContext", "command"):
        assert f"  {field}\t" in worker, field
    assert "Refused: the operator runs `taskfleet worker`" in " ".join(worker.split())
    assert "restricted" in " ".join(volumes.split())
    assert "karpenter.sh/do-not-disrupt" in " ".join(guard.split())
