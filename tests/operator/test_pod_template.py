"""spec.template: the user's pod template merged under the operator's own, what it may not
set, and how it rolls the fleet. Pure functions of the TaskQueue spec, checked without a
cluster (the rest of the worker Deployment: test_builders.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from taskfleet_operator import builders

from tests.operator_specs import make_spec, spec_hash_of

#: A small stand-in for the operator's own template: what the merge must keep and extend.
OWN_TEMPLATE: dict[str, Any] = {
    "metadata": {
        "labels": {"taskfleet.dev/queue": "q"},
        "annotations": {"prometheus.io/scrape": "true"},
    },
    "spec": {
        "containers": [
            {
                "name": "worker",
                "image": "w:1",
                "env": [{"name": "TASKFLEET_POD_NAME", "value": "p"}],
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                "securityContext": {
                    "runAsUser": 10001,
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        "terminationGracePeriodSeconds": 315,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    },
}

FULL_TEMPLATE: dict[str, Any] = {
    "metadata": {
        "labels": {"team": "media", "cost-centre": "42"},
        "annotations": {"sidecar.istio.io/inject": "false"},
    },
    "spec": {
        "imagePullSecrets": [{"name": "registry"}],
        "volumes": [
            {"name": "ca", "configMap": {"name": "redis-ca"}},
            {"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
        ],
        "initContainers": [
            {
                "name": "sql-proxy",
                "image": "proxy:2",
                "restartPolicy": "Always",
                "args": ["--port", "5432"],
                "startupProbe": {"tcpSocket": {"port": 5432}},
            },
            {"name": "warm", "image": "w:1", "command": ["taskfleet", "--help"]},
        ],
        "containers": [
            {
                "name": "shipper",
                "image": "shipper:1",
                "volumeMounts": [{"name": "tmp", "mountPath": "/logs", "readOnly": True}],
                "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
            }
        ],
        "priorityClassName": "batch-low",
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"taskfleet.dev/queue": "q"}},
            }
        ],
        "securityContext": {"fsGroup": 2000, "supplementalGroups": [3000]},
    },
    "worker": {
        "volumeMounts": [{"name": "ca", "mountPath": "/etc/redis-ca", "readOnly": True}],
        "envFrom": [{"configMapRef": {"name": "app"}}, {"secretRef": {"name": "app-keys"}}],
        "env": [{"name": "MODEL_DIR", "value": "/models"}],
        "securityContext": {"readOnlyRootFilesystem": False, "runAsUser": 1000},
    },
}


def test_a_template_is_merged_under_the_operators_fields_and_adds_to_them() -> None:
    template = make_spec(template=FULL_TEMPLATE).template

    merged = builders.build_pod_template(OWN_TEMPLATE, template)

    assert merged == {
        "metadata": {
            "labels": {"team": "media", "cost-centre": "42", "taskfleet.dev/queue": "q"},
            "annotations": {"sidecar.istio.io/inject": "false", "prometheus.io/scrape": "true"},
        },
        "spec": {
            "containers": [
                {
                    "name": "worker",
                    "image": "w:1",
                    "env": [
                        {"name": "TASKFLEET_POD_NAME", "value": "p"},
                        {"name": "MODEL_DIR", "value": "/models"},
                    ],
                    "envFrom": [
                        {"configMapRef": {"name": "app"}},
                        {"secretRef": {"name": "app-keys"}},
                    ],
                    "volumeMounts": [
                        {"name": "tmp", "mountPath": "/tmp"},
                        {"name": "ca", "mountPath": "/etc/redis-ca", "readOnly": True},
                    ],
                    "securityContext": {
                        "runAsUser": 1000,
                        "readOnlyRootFilesystem": False,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                },
                {
                    "name": "shipper",
                    "image": "shipper:1",
                    "volumeMounts": [{"name": "tmp", "mountPath": "/logs", "readOnly": True}],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                    },
                },
            ],
            "initContainers": [
                {
                    "name": "sql-proxy",
                    "image": "proxy:2",
                    "args": ["--port", "5432"],
                    "restartPolicy": "Always",
                    "startupProbe": {"tcpSocket": {"port": 5432}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                },
                {
                    "name": "warm",
                    "image": "w:1",
                    "command": ["taskfleet", "--help"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                },
            ],
            "terminationGracePeriodSeconds": 315,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 10001,
                "fsGroup": 2000,
                "supplementalGroups": [3000],
            },
            "volumes": [
                {"name": "tmp", "emptyDir": {}},
                {"name": "ca", "configMap": {"name": "redis-ca"}},
                {"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
            ],
            "imagePullSecrets": [{"name": "registry"}],
            "priorityClassName": "batch-low",
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"taskfleet.dev/queue": "q"}},
                }
            ],
        },
    }
    assert OWN_TEMPLATE["spec"]["volumes"] == [{"name": "tmp", "emptyDir": {}}]  # untouched


def test_without_a_template_the_pod_is_the_operators_own() -> None:
    merged = builders.build_pod_template(OWN_TEMPLATE, None)

    assert merged == OWN_TEMPLATE
    assert merged is not OWN_TEMPLATE


def test_a_worker_pod_with_a_template_keeps_the_operators_command_prestop_grace_and_labels() -> (
    None
):
    plain = builders.build_deployment("q", "ns", make_spec())["spec"]["template"]
    templated = builders.build_deployment("q", "ns", make_spec(template=FULL_TEMPLATE))
    pod = templated["spec"]["template"]
    worker = pod["spec"]["containers"][0]
    plain_worker = plain["spec"]["containers"][0]

    for field in ("name", "image", "command", "args", "ports", "lifecycle"):
        assert worker[field] == plain_worker[field], field
    assert worker["env"][: len(plain_worker["env"])] == plain_worker["env"]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 315
    assert templated["spec"]["selector"] == {"matchLabels": {"taskfleet.dev/queue": "q"}}
    for key, value in plain["metadata"]["labels"].items():
        assert pod["metadata"]["labels"][key] == value
    assert (
        pod["metadata"]["annotations"][builders.SPEC_HASH_ANNOTATION]
        != (plain["metadata"]["annotations"][builders.SPEC_HASH_ANNOTATION])
    )


@pytest.mark.parametrize(
    "template",
    [
        {"metadata": {"labels": {"team": "a"}}},
        {"metadata": {"annotations": {"a": "b"}}},
        {"spec": {"imagePullSecrets": [{"name": "registry"}]}},
        {"spec": {"priorityClassName": "high"}},
        {"worker": {"envFrom": [{"configMapRef": {"name": "app"}}]}},
        {"spec": {"initContainers": [{"name": "s", "image": "i", "restartPolicy": "Always"}]}},
    ],
)
def test_any_change_of_the_template_changes_the_spec_hash_so_the_fleet_rolls(
    template: dict[str, Any],
) -> None:
    assert spec_hash_of(make_spec(template=template)) != spec_hash_of(make_spec())
    assert spec_hash_of(make_spec(template=template)) == spec_hash_of(make_spec(template=template))


def test_the_disruption_guard_is_no_part_of_the_pod_template() -> None:
    # Turning it off or on changes annotations the operator patches, never the pods' spec.
    assert spec_hash_of(make_spec(disruptionGuard=False)) == spec_hash_of(make_spec())


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ({"worker": {"command": ["sh"]}}, r"spec.template.worker.command is set by the operator"),
        ({"worker": {"args": ["--x"]}}, r"spec.template.worker.args is set by the operator"),
        ({"worker": {"lifecycle": {}}}, r"preStop hook runs `taskfleet drain`"),
        ({"worker": {"ports": []}}, r"the operator owns the metrics ports"),
        ({"worker": {"image": "x"}}, r"set spec.image"),
        (
            {"spec": {"terminationGracePeriodSeconds": 5}},
            r"terminationGracePeriodSeconds is set by the operator",
        ),
        ({"spec": {"containers": [{"name": "worker", "image": "x"}]}}, "may not be named 'worker'"),
        (
            {"spec": {"initContainers": [{"name": "worker", "image": "x"}]}},
            "may not be named 'worker'",
        ),
        ({"metadata": {"labels": {"taskfleet.dev/queue": "other"}}}, "labels must not set"),
        ({"metadata": {"labels": {"app.kubernetes.io/name": "x"}}}, "labels must not set"),
        ({"metadata": {"annotations": {"taskfleet.dev/spec-hash": "x"}}}, "annotations must not"),
        (
            {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}},
            "annotations must not set",
        ),
        (
            {"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}},
            "volumes: hostPath is not allowed",
        ),
        (
            {"spec": {"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}},
            "volumes: nfs is not allowed",
        ),
        ({"spec": {"volumes": [{"name": "e"}]}}, "each volume names exactly one source"),
        ({"spec": {"volumes": [{"name": "tmp", "emptyDir": {}}]}}, "must not be named 'tmp'"),
        ({"spec": {"hostNetwork": True}}, "hostNetwork: host namespaces are refused"),
        ({"spec": {"hostPID": True}}, "hostPID: host namespaces are refused"),
        ({"spec": {"hostIPC": True}}, "hostIPC: host namespaces are refused"),
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
        (
            {"worker": {"securityContext": {"allowPrivilegeEscalation": True}}},
            "allowPrivilegeEscalation must stay false",
        ),
        ({"worker": {"securityContext": {"runAsUser": 0}}}, r"runAsUser 0 \(root\) is refused"),
        ({"spec": {"securityContext": {"runAsUser": 0}}}, r"runAsUser 0 \(root\) is refused"),
        ({"spec": {"securityContext": {"runAsNonRoot": False}}}, "runAsNonRoot must stay true"),
        (
            {"worker": {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}},
            "capabilities.add may hold only NET_BIND_SERVICE",
        ),
        (
            {"spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}},
            "Input should be 'RuntimeDefault' or 'Localhost'",
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
            {
                "spec": {
                    "containers": [
                        {
                            "name": "s",
                            "image": "i",
                            "ports": [{"name": "metrics", "containerPort": 9200}],
                        }
                    ]
                }
            },
            "port names starting with 'metrics' are the worker's",
        ),
        (
            {
                "spec": {"volumes": [{"name": "ca", "configMap": {"name": "c"}}]},
                "worker": {"volumeMounts": [{"name": "ca", "mountPath": "/tmp"}]},
            },
            "must not mount at /tmp or /tmp/taskfleet",
        ),
        (
            {"worker": {"volumeMounts": [{"name": "ca", "mountPath": "/etc/ca"}]}},
            "names a volume that spec.template.spec.volumes does not declare",
        ),
        (
            {"worker": {"envFrom": [{"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}}]}},
            "exactly one of configMapRef or secretRef",
        ),
        (
            {"worker": {"env": [{"name": "TASKFLEET_REDIS_URL", "value": "x"}]}},
            "spec.template.worker.env must not repeat a name of spec.env, nor set",
        ),
        ({"spec": {"nodeName": "n1"}}, "Extra inputs are not permitted"),
    ],
)
def test_a_template_setting_what_the_operator_owns_or_breaking_restricted_security_is_refused(
    template: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        make_spec(template=template)


def test_scheduling_given_in_the_template_instead_of_the_flat_fields_reaches_the_pod() -> None:
    spec = make_spec(
        template={
            "spec": {
                "nodeSelector": {"pool": "gpu"},
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
                "affinity": {"nodeAffinity": {}},
                "serviceAccountName": "media",
            }
        }
    )
    pod = builders.build_deployment("q", "ns", spec)["spec"]["template"]["spec"]

    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert pod["affinity"] == {"nodeAffinity": {}}
    assert pod["serviceAccountName"] == "media"
    assert pod["automountServiceAccountToken"] is True


@pytest.mark.parametrize(
    ("flat", "twin"),
    [
        ({"nodeSelector": {"a": "b"}}, {"nodeSelector": {"c": "d"}}),
        ({"tolerations": [{"key": "a"}]}, {"tolerations": [{"key": "b"}]}),
        ({"affinity": {"nodeAffinity": {}}}, {"affinity": {"podAffinity": {}}}),
        ({"serviceAccountName": "a"}, {"serviceAccountName": "b"}),
    ],
)
def test_a_flat_field_and_its_template_twin_may_not_both_be_set(
    flat: dict[str, Any], twin: dict[str, Any]
) -> None:
    (field,) = flat
    with pytest.raises(ValidationError, match=f"set {field} in one place, spec.{field} or"):
        make_spec(**flat, template={"spec": twin})


def test_template_env_may_not_repeat_a_name_of_the_flat_env() -> None:
    with pytest.raises(ValidationError, match=r"must not repeat a name of spec\.env"):
        make_spec(
            env=[{"name": "LOG_LEVEL", "value": "info"}],
            template={"worker": {"env": [{"name": "LOG_LEVEL", "value": "debug"}]}},
        )


def test_merged_security_keeps_every_capability_dropped_and_adds_only_what_was_asked() -> None:
    own = {"runAsUser": 10001, "capabilities": {"drop": ["ALL"]}}

    assert builders.merge_security(own, {}) == own
    assert builders.merge_security(own, {"runAsUser": 1000}) == {
        "runAsUser": 1000,
        "capabilities": {"drop": ["ALL"]},
    }
    assert builders.merge_security(
        own, {"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL", "CHOWN"]}}
    ) == {
        "runAsUser": 10001,
        "capabilities": {"drop": ["ALL", "CHOWN"], "add": ["NET_BIND_SERVICE"]},
    }
