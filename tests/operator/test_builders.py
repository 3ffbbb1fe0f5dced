"""The worker Deployment is a pure function of the TaskQueue spec: checked without a cluster."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from taskfleet.protocol.config import QueueConfig
from taskfleet_operator import builders

from tests.operator_specs import make_spec, spec_hash_of


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_by_name(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {var["name"]: var for var in container(deployment)["env"]}


def test_worker_runs_as_restricted_non_root_with_a_read_only_root_and_writable_tmp() -> None:
    deployment = builders.build_deployment("emails", "shop", make_spec())
    pod = deployment["spec"]["template"]["spec"]
    worker = container(deployment)

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert worker["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert {"name": "tmp", "mountPath": "/tmp"} in worker["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in pod["volumes"]


def test_worker_is_started_in_exec_form_with_its_options_as_arguments_but_no_lease_ttl() -> None:
    # The lease TTL is the queue's setting, written by the operator; workers only read it.
    spec = make_spec(concurrency=8, heartbeat={"intervalSeconds": 2, "ttlSeconds": 10})
    worker = container(builders.build_deployment("emails", "shop", spec))

    assert worker["command"] == ["taskfleet", "worker"]
    args = worker["args"]
    assert all(isinstance(arg, str) for arg in args)
    options = dict(zip(args[::2], args[1::2], strict=True))
    assert options == {
        "--queue": "shop.emails",
        "--handler": "app.tasks:handle",
        "--concurrency": "8",
        "--drain-timeout": "300",
        "--heartbeat-interval": "2",
    }


@pytest.mark.parametrize(
    ("overrides", "handlers"),
    [
        ({}, ["app.tasks:handle"]),
        (
            {"handlers": {"resize": "app.media:resize", "crop": "app.media:crop"}},
            ["app.tasks:handle", "crop=app.media:crop", "resize=app.media:resize"],
        ),
        (
            {"handler": None, "handlers": {"resize": "app.media:resize"}},
            ["resize=app.media:resize"],
        ),
        ({"handler": "app.media:HANDLERS"}, ["app.media:HANDLERS"]),
    ],
)
def test_each_handler_of_the_spec_is_one_handler_option_named_ones_as_name_equals_ref(
    overrides: dict[str, Any], handlers: list[str]
) -> None:
    args = container(builders.build_deployment("emails", "shop", make_spec(**overrides)))["args"]
    assert [args[i + 1] for i, arg in enumerate(args) if arg == "--handler"] == handlers


@pytest.mark.parametrize(
    ("overrides", "processes", "per_process"),
    [
        ({}, 1, 8),  # no CPU limit: one process
        ({"resources": {"limits": {"cpu": "500m"}}}, 1, 8),
        ({"resources": {"limits": {"cpu": "2500m"}}}, 2, 4),
        ({"resources": {"limits": {"cpu": 4}}}, 4, 2),
        ({"resources": {"limits": {"cpu": "16"}}}, 8, 1),  # at most one per slot
        ({"resources": {"limits": {"cpu": "4"}}, "processes": 3}, 3, 3),  # said outright
        ({"processes": 1, "resources": {"limits": {"cpu": "4"}}}, 1, 8),
    ],
)
def test_worker_processes_come_from_the_spec_or_the_cpu_limit_and_share_the_pod_slots(
    overrides: dict[str, Any], processes: int, per_process: int
) -> None:
    spec = make_spec(concurrency=8, **overrides)
    args = container(builders.build_deployment("emails", "shop", spec))["args"]
    options = dict(zip(args[::2], args[1::2], strict=True))
    assert options["--concurrency"] == str(per_process)
    assert options.get("--processes", "1") == str(processes)
    assert spec.pod_slots() == processes * per_process


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, []),
        ({"isolation": "thread"}, []),
        ({"isolation": "process"}, ["--isolation", "process"]),
        (
            {"isolation": "process", "maxTasksPerChild": 100},
            ["--isolation", "process", "--max-tasks-per-child", "100"],
        ),
    ],
)
def test_process_isolation_and_its_recycling_become_worker_options(
    overrides: dict[str, Any], expected: list[str]
) -> None:
    args = container(builders.build_deployment("emails", "shop", make_spec(**overrides)))["args"]
    assert args == [
        "--queue",
        "shop.emails",
        "--handler",
        "app.tasks:handle",
        "--concurrency",
        "4",
        *expected,
        "--drain-timeout",
        "300",
        "--heartbeat-interval",
        "5",
    ]


def test_the_worker_cli_accepts_process_isolation_as_the_deployment_passes_it() -> None:
    import click
    from taskfleet.cli import cli

    spec = make_spec(isolation="process", maxTasksPerChild=7)
    command = cli.get_command(click.Context(cli), "worker")
    assert command is not None
    run = command.make_context(
        "worker", list(container(builders.build_deployment("q", "ns", spec))["args"])
    )
    assert (run.params["isolation"], run.params["max_tasks_per_child"]) == ("process", 7)


@pytest.mark.parametrize(
    ("max_duration", "drain", "grace"),
    [(1, 1, 16), (300, 300, 315), (3600, 3600, 3615), (86_400, 3600, 3615)],
)
def test_grace_period_is_the_bounded_drain_deadline_plus_a_margin(
    max_duration: int, drain: int, grace: int
) -> None:
    spec = make_spec(maxTaskDurationSeconds=max_duration)
    deployment = builders.build_deployment("q", "ns", spec)
    worker = container(deployment)

    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace
    assert worker["lifecycle"]["preStop"]["exec"]["command"] == [
        "taskfleet",
        "drain",
        "--wait",
        "--timeout",
        str(drain),
    ]
    assert worker["args"][worker["args"].index("--drain-timeout") + 1] == str(drain)


def test_pod_name_comes_from_the_downward_api() -> None:
    env = env_by_name(builders.build_deployment("q", "ns", make_spec()))

    assert env["TASKFLEET_POD_NAME"]["valueFrom"] == {
        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}
    }
    assert env["TASKFLEET_RUNTIME_DIR"]["value"] == "/tmp/taskfleet"


def test_redis_url_from_a_secret_is_referenced_never_copied() -> None:
    spec = make_spec(redis={"secretRef": {"name": "redis-auth", "key": "uri"}})
    deployment = builders.build_deployment("q", "ns", spec)
    env = env_by_name(deployment)

    assert env["TASKFLEET_REDIS_URL"] == {
        "name": "TASKFLEET_REDIS_URL",
        "valueFrom": {"secretKeyRef": {"name": "redis-auth", "key": "uri"}},
    }
    assert "value" not in env["TASKFLEET_REDIS_URL"]


def test_plain_redis_url_is_passed_as_a_value() -> None:
    env = env_by_name(builders.build_deployment("q", "ns", make_spec()))

    assert env["TASKFLEET_REDIS_URL"]["value"] == "redis://redis.taskfleet-system:6379/0"


def test_user_env_follows_the_operator_env_unchanged() -> None:
    spec = make_spec(
        env=[
            {"name": "LOG_LEVEL", "value": "debug"},
            {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "k"}}},
        ]
    )
    names = [var["name"] for var in container(builders.build_deployment("q", "ns", spec))["env"]]

    assert names == [
        "TASKFLEET_REDIS_URL",
        "TASKFLEET_POD_NAME",
        "TASKFLEET_RUNTIME_DIR",
        "TASKFLEET_METRICS_PORT",
        "LOG_LEVEL",
        "API_KEY",
    ]
    env = env_by_name(builders.build_deployment("q", "ns", spec))
    assert env["API_KEY"] == {
        "name": "API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "api", "key": "k"}},
    }


def test_labels_and_selector_tie_pods_to_their_queue() -> None:
    deployment = builders.build_deployment("emails", "shop", make_spec(replicas=3))

    assert deployment["metadata"] == {
        "name": "emails",
        "namespace": "shop",
        "labels": builders.labels("emails"),
    }
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["selector"] == {"matchLabels": {"taskfleet.dev/queue": "emails"}}
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["taskfleet.dev/queue"] == "emails"
    assert pod_labels["app.kubernetes.io/instance"] == "emails"
    assert builders.selector_string("emails") == "taskfleet.dev/queue=emails"


def test_rollout_never_drops_below_the_requested_capacity() -> None:
    strategy = builders.build_deployment("q", "ns", make_spec())["spec"]["strategy"]

    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"},
    }


@pytest.mark.parametrize(
    "change",
    [
        {"image": "localhost/worker:v2"},
        {"handler": "app.tasks:other"},
        {"concurrency": 16},
        {"maxTaskDurationSeconds": 60},
        {"env": [{"name": "X", "value": "1"}]},
        {"redis": {"secretRef": {"name": "r"}}},
        {"resources": {"limits": {"memory": "256Mi"}}},
    ],
)
def test_spec_hash_changes_when_a_pod_affecting_field_changes(change: dict[str, Any]) -> None:
    assert spec_hash_of(make_spec(**change)) != spec_hash_of(make_spec())


@pytest.mark.parametrize(
    "change",
    [
        {"replicas": 7},
        {"autoscale": {"minReplicas": 0, "maxReplicas": 9}},
        {"maxConcurrency": 10},
        {"retention": {"doneSeconds": 60}},
    ],
)
def test_spec_hash_stays_when_only_replicas_or_redis_settings_change(
    change: dict[str, Any],
) -> None:
    assert spec_hash_of(make_spec(**change)) == spec_hash_of(make_spec())


def test_scheduling_and_image_options_pass_through() -> None:
    spec = make_spec(
        nodeSelector={"pool": "workers"},
        tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        affinity={"nodeAffinity": {}},
        serviceAccountName="workers",
        imagePullPolicy="IfNotPresent",
        resources={"requests": {"cpu": "100m"}},
    )
    deployment = builders.build_deployment("q", "ns", spec)
    pod = deployment["spec"]["template"]["spec"]

    assert pod["nodeSelector"] == {"pool": "workers"}
    assert pod["tolerations"][0]["key"] == "dedicated"
    assert pod["affinity"] == {"nodeAffinity": {}}
    assert pod["serviceAccountName"] == "workers"
    assert pod["automountServiceAccountToken"] is True
    assert container(deployment)["imagePullPolicy"] == "IfNotPresent"
    assert container(deployment)["resources"] == {"requests": {"cpu": "100m"}}


def test_defaults_leave_scheduling_to_the_cluster_and_mount_no_api_token() -> None:
    deployment = builders.build_deployment("q", "ns", make_spec())
    pod = deployment["spec"]["template"]["spec"]

    assert not {"nodeSelector", "tolerations", "affinity", "serviceAccountName"} & set(pod)
    assert pod["automountServiceAccountToken"] is False
    assert "imagePullPolicy" not in container(deployment)


def test_queue_name_is_namespaced_so_namespaces_can_share_a_redis() -> None:
    assert builders.queue_name("shop", "emails") == "shop.emails"
    assert builders.queue_name("blog", "emails") != builders.queue_name("shop", "emails")


def test_deletion_cost_ranks_idle_pods_first() -> None:
    assert builders.deletion_cost(None) == "0"
    assert builders.deletion_cost(0) == "0"
    assert builders.deletion_cost(5) == "5"


def worker_pod(queue: str = "q", **meta: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": f"{queue}-5d8f7c9b4-abcde",
        "labels": {"taskfleet.dev/queue": queue, "pod-template-hash": "5d8f7c9b4"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"{queue}-5d8f7c9b4",
                "uid": "u",
                "controller": True,
            }
        ],
    }
    base.update(meta)
    return {"metadata": base}


def test_only_pods_of_the_queues_own_replica_sets_count_as_its_workers() -> None:
    foreign_owner = worker_pod()
    foreign_owner["metadata"]["ownerReferences"][0]["name"] = "other-5d8f7c9b4"

    assert builders.owns_worker_pod(worker_pod(), "q")
    assert not builders.owns_worker_pod(worker_pod(), "other")  # another queue's label
    assert not builders.owns_worker_pod(worker_pod(ownerReferences=[]), "q")  # a bare pod
    assert not builders.owns_worker_pod(foreign_owner, "q")  # labelled, someone else's
    assert not builders.owns_worker_pod(worker_pod(labels={"taskfleet.dev/queue": "q"}), "q")
    not_controller = worker_pod()
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert not builders.owns_worker_pod(not_controller, "q")


def test_queue_config_carries_the_shared_limits() -> None:
    spec = make_spec(
        maxConcurrency=20,
        rateLimit={"tasks": 100, "periodSeconds": 60},
        maxAttempts=5,
        backoff={"baseSeconds": 2, "maxSeconds": 60},
        heartbeat={"intervalSeconds": 3, "ttlSeconds": 9},
        maxLost=2,
        maxTaskDurationSeconds=120,
    )
    config = builders.queue_config(spec)

    assert config == QueueConfig(
        max_concurrency=20,
        rate_limit_tasks=100,
        rate_limit_period_s=60,
        max_attempts=5,
        backoff_base_s=2,
        backoff_max_s=60,
        max_lost=2,
        lease_ttl_s=9,
        done_retention_s=3600,
        dead_retention_s=259200,
        default_timeout_s=120,
    )
    assert config.rate_limit_cost is None  # unset limits keep the library's defaults


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"handler": "no-colon"}, "String should match pattern"),
        ({"redis": {}}, "exactly one of redis.url or redis.secretRef"),
        (
            {"redis": {"url": "redis://:hunter2@redis:6379/0"}},
            "must not contain a password",
        ),
        (
            {"redis": {"url": "redis://redis:6379/0?password=hunter2"}},
            "credential in its query",
        ),
        ({"redis": {"url": "redis://redis:port/0"}}, "not a usable Redis URL"),
        ({"heartbeat": {"intervalSeconds": 10, "ttlSeconds": 15}}, "at least 2x"),
        ({"rateLimit": {"tasks": 5}}, "periodSeconds is required"),
        ({"schedules": [{"name": "a", "cron": "* * * * *"}] * 2}, "names must be unique"),
        ({"schedules": [{"name": "a", "cron": "61 * * * *"}]}, "minute field: '61' is outside"),
        ({"schedules": [{"name": "a", "cron": "0 3 * * * * *"}]}, "String should match pattern"),
        (
            {"schedules": [{"name": "a", "cron": "@daily", "timeZone": "Mars/Base"}]},
            "unknown time zone 'Mars/Base'",
        ),
        ({"env": [{"name": "TASKFLEET_QUEUE", "value": "x"}]}, "the operator sets them"),
        ({"replicas": 1001}, "less than or equal to 1000"),
        (
            {"autoscale": {"minReplicas": 5, "maxReplicas": 3}},
            "autoscale.minReplicas must be <= autoscale.maxReplicas",
        ),
        ({"autoscale": {"minReplicas": 1}}, "maxReplicas\n  Field required"),
        ({"autoscale": {"maxReplicas": 2, "targetUtilizationPercent": 101}}, "less than or equal"),
        ({"resources": {"limits": {"cpu": "lots"}}}, "not a Kubernetes quantity"),
        ({"handler": None}, "give handler .tasks without a name., handlers .by task name., or"),
        ({"handlers": {"-x": "app.media:resize"}}, "task name '-x' must be 1-100 letters"),
        ({"handlers": {"resize": "app.media"}}, "String should match pattern"),
        ({"maxTasksPerChild": 10}, "maxTasksPerChild needs isolation: process"),
        ({"isolation": "fork"}, "Input should be 'thread' or 'process'"),
        ({"isolation": "process", "maxTasksPerChild": 0}, "greater than or equal to 1"),
        ({"env": [{"name": "TASKFLEET_ISOLATION", "value": "process"}]}, "the operator sets"),
    ],
)
def test_invalid_specs_fail_with_a_message_saying_what_to_fix(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        make_spec(**change)


def test_the_worker_cli_accepts_the_command_lines_the_deployment_runs() -> None:
    import click
    from taskfleet.cli import cli

    spec = make_spec(concurrency=3, heartbeat={"intervalSeconds": 2, "ttlSeconds": 9})
    worker = container(builders.build_deployment("emails", "shop", spec))
    command = cli.get_command(click.Context(cli), "worker")
    assert command is not None

    run = command.make_context("worker", list(worker["args"]))
    assert run.params["queue"] == "shop.emails"
    assert run.params["handlers"] == ("app.tasks:handle",)
    assert run.params["concurrency"] == 3
    assert run.params["drain_timeout"] == 300
    assert run.params["heartbeat_interval"] == 2
    assert run.params["lease_ttl"] is None  # the worker reads the queue's

    pre_stop = worker["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[:2] == ["taskfleet", "drain"]
    drain_command = cli.get_command(click.Context(cli), "drain")
    assert drain_command is not None
    drain = drain_command.make_context("drain", pre_stop[2:])
    assert (drain.params["wait"], drain.params["timeout"]) == (True, 300)


def test_a_multi_process_pod_has_a_metrics_port_per_process_and_no_port_annotation() -> None:
    deployment = builders.build_deployment("q", "ns", make_spec(processes=3))
    assert container(deployment)["ports"] == [
        {"name": "metrics", "containerPort": 9100, "protocol": "TCP"},
        {"name": "metrics-2", "containerPort": 9101, "protocol": "TCP"},
        {"name": "metrics-3", "containerPort": 9102, "protocol": "TCP"},
    ]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    # Pod discovery then scrapes each declared port: every process, not the first only.
    assert {k: v for k, v in annotations.items() if k.startswith("prometheus.io/")} == {
        "prometheus.io/scrape": "true",
        "prometheus.io/path": "/metrics",
    }


def test_worker_pods_serve_metrics_on_a_named_port_that_annotations_point_at() -> None:
    deployment = builders.build_deployment("q", "ns", make_spec())
    assert container(deployment)["ports"] == [
        {"name": "metrics", "containerPort": 9100, "protocol": "TCP"}
    ]
    assert env_by_name(deployment)["TASKFLEET_METRICS_PORT"] == {
        "name": "TASKFLEET_METRICS_PORT",
        "value": "9100",
    }
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k.startswith("prometheus.io/")} == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9100",
        "prometheus.io/path": "/metrics",
    }


def test_groups_fair_by_comes_from_the_spec_and_is_claims_without_it() -> None:
    assert builders.queue_fair_by(make_spec(groups={"fairBy": "output_tokens"})) == "output_tokens"
    assert builders.queue_fair_by(make_spec(groups={"maxConcurrency": 2})) is None
    assert builders.queue_fair_by(make_spec()) is None
