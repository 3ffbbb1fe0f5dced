"""Pure functions from a TaskQueue spec to the objects the operator applies.

No I/O here: every function takes the validated model and returns plain dicts (or, for
the queue's shared settings, the library's own `QueueConfig`), so the whole shape of a
worker fleet is unit-tested without a cluster, and the handlers only apply what these
return.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from taskfleet.protocol import environment
from taskfleet.protocol.config import QueueConfig

from taskfleet_operator.models import GROUP, QUEUE_LABEL, TaskQueueSpec
from taskfleet_operator.podowned import WORKER_CONTAINER
from taskfleet_operator.podtemplate import PodTemplate
from taskfleet_operator.runtimespec import COMMANDS

WORKER_UID = 10001
RUNTIME_DIR = "/tmp/taskfleet"
#: Where each worker pod serves its Prometheus metrics (the container port "metrics").
METRICS_PORT = 9100
#: For a Prometheus that discovers pods by annotation (the common kubernetes-pods job);
#: prometheus-operator users select the "metrics" ports with a PodMonitor instead.
SCRAPE_ANNOTATIONS = {
    "prometheus.io/scrape": "true",
    "prometheus.io/port": str(METRICS_PORT),
    "prometheus.io/path": "/metrics",
}


def scrape_annotations(processes: int) -> dict[str, str]:
    """The scrape annotations of a pod of ``processes`` worker processes. One process: its
    port. Several: no ``prometheus.io/port``, which can name one port only; Kubernetes
    pod discovery then makes one target per declared container port, and the metrics
    ports (`metrics_ports`) are the only ones the worker container declares, so every
    process is scraped."""
    if processes <= 1:
        return dict(SCRAPE_ANNOTATIONS)
    return {k: v for k, v in SCRAPE_ANNOTATIONS.items() if k != "prometheus.io/port"}


SPEC_HASH_ANNOTATION = f"{GROUP}/spec-hash"
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
#: The disruption guard: what a worker pod carries while it holds a task (spec.disruptionGuard),
#: read by Karpenter (voluntary disruption: consolidation, drift) and by the cluster-autoscaler
#: (scale-down of the pod's node).
DISRUPTION_GUARD_ANNOTATIONS = {
    "karpenter.sh/do-not-disrupt": "true",
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
}

# The drain deadline follows maxTaskDurationSeconds so a task that may legally run that
# long can finish on shutdown; it is capped because kubelet keeps a Terminating pod (and
# its node's drain) waiting for the whole grace period. Tasks still running at the cap
# are released, not lost: another pod runs them again.
MAX_DRAIN_SECONDS = 3600
# Time after the drain deadline for releasing leftovers, closing connections and exiting.
GRACE_MARGIN_SECONDS = 15


def queue_name(namespace: str, name: str) -> str:
    """The queue's name in Redis.

    Namespaced so two namespaces can share one Redis; a namespace is a DNS label (no
    dots), so the first dot separates the two parts unambiguously.
    """
    return f"{namespace}.{name}"


def drain_seconds(spec: TaskQueueSpec) -> int:
    return min(spec.max_task_duration_seconds, MAX_DRAIN_SECONDS)


def grace_period_seconds(spec: TaskQueueSpec) -> int:
    """terminationGracePeriodSeconds: the drain deadline plus a margin to exit cleanly."""
    return drain_seconds(spec) + GRACE_MARGIN_SECONDS


def selector_labels(name: str) -> dict[str, str]:
    """The Deployment's (immutable) selector: only the queue label."""
    return {QUEUE_LABEL: name}


def labels(name: str) -> dict[str, str]:
    return {
        **selector_labels(name),
        "app.kubernetes.io/name": "taskfleet-worker",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "worker",
        "app.kubernetes.io/managed-by": "taskfleet-operator",
    }


def selector_string(name: str) -> str:
    """The label selector in the string form the scale subresource reports."""
    return ",".join(f"{key}={value}" for key, value in selector_labels(name).items())


def redis_url_env(spec: TaskQueueSpec) -> dict[str, Any]:
    """TASKFLEET_REDIS_URL; from the Secret when there is one, so no password is in the pod spec."""
    ref = spec.redis.secret_ref
    if ref is not None:
        return {
            "name": environment.REDIS_URL,
            "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
        }
    return {"name": environment.REDIS_URL, "value": spec.redis.url}


def worker_env(spec: TaskQueueSpec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        redis_url_env(spec),
        {
            "name": environment.POD_NAME,
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
        },
        {"name": environment.RUNTIME_DIR, "value": RUNTIME_DIR},
        {"name": environment.METRICS_PORT, "value": str(METRICS_PORT)},
    ]
    env += [var.model_dump(by_alias=True, exclude_none=True) for var in spec.env]
    return env


def handler_args(spec: TaskQueueSpec) -> list[str]:
    """``--handler`` per handler: the default one as is, named ones as ``NAME=REF``."""
    args = [] if spec.handler is None else ["--handler", spec.handler]
    for task_name, ref in sorted(spec.handlers.items()):
        args += ["--handler", f"{task_name}={ref}"]
    return args


def worker_args(namespace: str, name: str, spec: TaskQueueSpec) -> list[str]:
    """The worker's options. No ``--lease-ttl``: the lease TTL is the queue's setting,
    which the operator writes (`queue_config`) and every worker reads at start."""
    processes = spec.worker_processes()
    return [
        "--queue",
        queue_name(namespace, name),
        *handler_args(spec),
        "--concurrency",
        str(spec.process_concurrency()),
        *(["--processes", str(processes)] if processes > 1 else []),
        *isolation_args(spec),
        "--drain-timeout",
        str(drain_seconds(spec)),
        "--heartbeat-interval",
        str(spec.heartbeat.interval_seconds),
    ]


def isolation_args(spec: TaskQueueSpec) -> list[str]:
    """``--isolation process`` (and its recycling) when asked for; threads otherwise.
    A stopped child's SIGKILL grace (5 s) fits in GRACE_MARGIN_SECONDS after the drain."""
    if spec.isolation != "process":
        return []
    args = ["--isolation", "process"]
    if spec.max_tasks_per_child is not None:
        args += ["--max-tasks-per-child", str(spec.max_tasks_per_child)]
    return args


def metrics_ports(processes: int) -> list[dict[str, Any]]:
    """The container ports of a worker pod's metrics: process i of ``--processes N``
    serves on METRICS_PORT + i - 1, named "metrics" for the first and "metrics-<i>" for
    the others (a PodMonitor selects ports by name)."""
    return [
        {
            "name": "metrics" if i == 1 else f"metrics-{i}",
            "containerPort": METRICS_PORT + i - 1,
            "protocol": "TCP",
        }
        for i in range(1, processes + 1)
    ]


def worker_container(namespace: str, name: str, spec: TaskQueueSpec) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": WORKER_CONTAINER,
        "image": spec.image,
        # Exec form, no shell: the worker is PID 1 and receives SIGTERM itself. The Node
        # worker (`taskfleet-node`) takes the same flags and env and honours the same drain.
        "command": [COMMANDS[spec.runtime or "python"], "worker"],
        "args": worker_args(namespace, name, spec),
        "env": worker_env(spec),
        # Named, so a PodMonitor (manifests/monitoring/) selects it by name.
        "ports": metrics_ports(spec.worker_processes()),
        "lifecycle": {
            "preStop": {
                "exec": {
                    "command": [
                        COMMANDS[spec.runtime or "python"],
                        "drain",
                        "--wait",
                        "--timeout",
                        str(drain_seconds(spec)),
                    ]
                }
            }
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": WORKER_UID,
            "runAsGroup": WORKER_UID,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        # The worker's runtime file (read by `taskfleet drain`) needs a writable /tmp.
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if spec.image_pull_policy is not None:
        container["imagePullPolicy"] = spec.image_pull_policy
    if spec.resources is not None:
        container["resources"] = spec.resources.model_dump(by_alias=True, exclude_none=True)
    return container


def pod_spec(namespace: str, name: str, spec: TaskQueueSpec) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "containers": [worker_container(namespace, name, spec)],
        "terminationGracePeriodSeconds": grace_period_seconds(spec),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": WORKER_UID,
            "runAsGroup": WORKER_UID,
            "fsGroup": WORKER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
        # Workers talk to Redis only: no service-link env noise, no API token unless the
        # user picked a service account (which may need one).
        "enableServiceLinks": False,
        "automountServiceAccountToken": spec.service_account_name is not None,
    }
    if spec.service_account_name is not None:
        pod["serviceAccountName"] = spec.service_account_name
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = list(spec.tolerations)
    if spec.affinity:
        pod["affinity"] = spec.affinity
    return pod


def spec_hash(template: dict[str, Any]) -> str:
    """A short stable hash of a pod template: equal templates, equal hashes."""
    blob = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def pod_template(namespace: str, name: str, spec: TaskQueueSpec) -> dict[str, Any]:
    """The pod template, annotated with a hash of everything that must roll the pods.

    Fields that only change Redis-side settings (maxConcurrency, rateLimit, retention,
    ...) or the replica count do not appear in the template, so they never roll pods;
    ``spec.template`` does, merged in by `build_pod_template`, so changing it rolls them.
    """
    own: dict[str, Any] = {
        "metadata": {
            "labels": labels(name),
            "annotations": scrape_annotations(spec.worker_processes()),
        },
        "spec": pod_spec(namespace, name, spec),
    }
    template = build_pod_template(own, spec.template)
    template["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = spec_hash(template)
    return template


#: What restricted pod security requires of every container and a pod-level
#: securityContext cannot say; given to each template container under its own settings.
RESTRICTED_CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def merge_security(own: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    """A securityContext with ``added``'s fields over ``own``'s; capabilities dropped by
    either stay dropped (``ALL`` first), added ones are ``added``'s (the models allow only
    NET_BIND_SERVICE)."""
    merged = {**own, **added}
    own_caps, added_caps = own.get("capabilities") or {}, added.get("capabilities") or {}
    if own_caps or added_caps:
        drop = [*own_caps.get("drop", []), *added_caps.get("drop", [])]
        caps: dict[str, Any] = {"drop": list(dict.fromkeys(drop))}
        if added_caps.get("add"):
            caps["add"] = list(added_caps["add"])
        merged["capabilities"] = caps
    return merged


def _dump(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(by_alias=True, exclude_none=True)
    return dumped


def _template_container(model: Any) -> dict[str, Any]:
    container = _dump(model)
    container["securityContext"] = merge_security(
        RESTRICTED_CONTAINER_SECURITY, container.get("securityContext") or {}
    )
    return container


def build_pod_template(own: dict[str, Any], template: PodTemplate | None) -> dict[str, Any]:
    """The operator's pod template (``own``) with a TaskQueue's ``spec.template`` merged
    under it: a new dict, ``own`` untouched.

    Nothing of the operator's is replaced (the models refuse what it owns): labels and
    annotations are added beside its own; volumes, containers and the worker's mounts
    and env come after its own; imagePullSecrets, initContainers (native sidecars),
    priorityClassName, topologySpreadConstraints and envFrom are the template's alone, as
    are nodeSelector, tolerations, affinity and serviceAccountName when given here rather
    than as the spec's flat fields (never both);
    securityContext fields are laid over the operator's (`merge_security`), within
    restricted pod security, and every template container gets what that profile asks of
    each container (no privilege escalation, every capability dropped).
    """
    merged = copy.deepcopy(own)
    if template is None:
        return merged
    meta, pod = merged["metadata"], merged["spec"]
    if template.metadata is not None:
        meta["labels"] = {**(template.metadata.labels or {}), **meta.get("labels", {})}
        meta["annotations"] = {
            **(template.metadata.annotations or {}),
            **meta.get("annotations", {}),
        }
    extra = template.spec
    if extra is not None:
        if extra.image_pull_secrets:
            pod["imagePullSecrets"] = [_dump(ref) for ref in extra.image_pull_secrets]
        if extra.volumes:
            pod["volumes"] = [*pod.get("volumes", []), *map(_dump, extra.volumes)]
        if extra.init_containers:
            pod["initContainers"] = [_template_container(c) for c in extra.init_containers]
        if extra.containers:
            pod["containers"] = [*pod["containers"], *map(_template_container, extra.containers)]
        if extra.priority_class_name is not None:
            pod["priorityClassName"] = extra.priority_class_name
        if extra.topology_spread_constraints:
            pod["topologySpreadConstraints"] = [dict(c) for c in extra.topology_spread_constraints]
        dumped = _dump(extra)
        for field in ("nodeSelector", "tolerations", "affinity", "serviceAccountName"):
            if field in dumped:  # the flat twin is unset: the models refuse both
                pod[field] = dumped[field]
        if extra.service_account_name is not None:
            pod["automountServiceAccountToken"] = True  # as for spec.serviceAccountName
        if extra.security_context is not None:
            pod["securityContext"] = merge_security(
                pod.get("securityContext") or {}, _dump(extra.security_context)
            )
    worker = template.worker
    if worker is not None:
        container = next(c for c in pod["containers"] if c["name"] == WORKER_CONTAINER)
        if worker.volume_mounts:
            container["volumeMounts"] = [
                *container.get("volumeMounts", []),
                *map(_dump, worker.volume_mounts),
            ]
        if worker.env_from:
            container["envFrom"] = [_dump(source) for source in worker.env_from]
        if worker.env:
            container["env"] = [*container.get("env", []), *map(_dump, worker.env)]
        if worker.security_context is not None:
            container["securityContext"] = merge_security(
                container.get("securityContext") or {}, _dump(worker.security_context)
            )
    return merged


def build_deployment(
    name: str, namespace: str, spec: TaskQueueSpec, *, replicas: int | None = None
) -> dict[str, Any]:
    """The worker Deployment of one TaskQueue (the owner reference is added by the caller).

    ``replicas``: what the autoscaler keeps for an autoscaled queue (default ``spec.replicas``).
    """
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(name)},
        "spec": {
            "replicas": spec.replicas if replicas is None else replicas,
            "selector": {"matchLabels": selector_labels(name)},
            # Never below the requested capacity during a rollout; old pods drain while
            # new ones already work. 25% surge rounds up, so at least one extra pod.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"},
            },
            "revisionHistoryLimit": 5,
            "template": pod_template(namespace, name, spec),
        },
    }


def fleet_replicas(spec: TaskQueueSpec, deployed: int | None) -> int:
    """The replicas to apply: ``spec.replicas``, or for an autoscaled queue what the
    autoscaler set (``deployed``) kept within [minReplicas, maxReplicas], minReplicas for
    a new Deployment (the autoscaler raises it at its first turn)."""
    autoscale = spec.autoscale
    if autoscale is None:
        return spec.replicas
    if deployed is None:
        return autoscale.min_replicas
    return min(max(deployed, autoscale.min_replicas), autoscale.max_replicas)


def deletion_cost(inflight: int | None) -> str:
    """pod-deletion-cost for a pod: its in-flight task count, so idle pods go first.

    A pod that has not registered as a worker yet (None) runs nothing: cost 0.
    """
    return str(max(0, inflight or 0))


def owns_worker_pod(pod: dict[str, Any], name: str) -> bool:
    """Whether ``pod`` is a worker of TaskQueue ``name``'s Deployment, by its labels and
    owner chain: the queue's label, and a controlling ReplicaSet named as the Deployment
    ``name`` names its ReplicaSets (``<name>-<pod-template-hash>``, the hash also a label
    of the pod). The ReplicaSet controller is the only reader of pod-deletion-cost, and
    only for the pods it controls, so no other pod needs (or gets) one."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(QUEUE_LABEL) != name or not labels.get("pod-template-hash"):
        return False
    replica_set = f"{name}-{labels['pod-template-hash']}"
    return any(
        ref.get("controller") is True
        and ref.get("kind") == "ReplicaSet"
        and ref.get("apiVersion") == "apps/v1"
        and ref.get("name") == replica_set
        for ref in meta.get("ownerReferences") or []
    )


def queue_fair_by(spec: TaskQueueSpec) -> str | None:
    """The unit the queue's groups are fair by (`groups.fairBy`); None: by claims."""
    return spec.groups.fair_by if spec.groups else None


def queue_config(spec: TaskQueueSpec) -> QueueConfig:
    """The queue's shared settings from the spec, as the library stores them.

    The operator is their one writer (workers only read them, the lease TTL included).
    maxTaskDurationSeconds is also the default task timeout: a task may not outlive the
    drain deadline it was promised. Unset optional limits are left out, so
    `QueueConfig`'s own defaults apply.
    """
    limit, throttle = spec.rate_limit, spec.throttle
    fields = {
        "max_concurrency": spec.max_concurrency,
        "rate_limit_tasks": limit.tasks if limit else None,
        "rate_limit_cost": limit.cost if limit else None,
        "rate_limit_period_s": limit.period_seconds if limit else None,
        "max_attempts": spec.max_attempts,
        "backoff_base_s": spec.backoff.base_seconds,
        "backoff_max_s": spec.backoff.max_seconds,
        "max_lost": spec.max_lost,
        "lease_ttl_s": spec.heartbeat.ttl_seconds,
        "done_retention_s": spec.retention.done_seconds,
        "dead_retention_s": spec.retention.dead_seconds,
        "default_timeout_s": spec.max_task_duration_seconds,
        "throttle_base_s": throttle.base_seconds if throttle else None,
        "throttle_max_s": throttle.max_seconds if throttle else None,
        "budget_day": spec.budget.day if spec.budget else None,
        "budget_month": spec.budget.month if spec.budget else None,
        "group_max_concurrency": spec.groups.max_concurrency if spec.groups else None,
        "group_rate_limit_tasks": spec.groups.rate_limit_tasks if spec.groups else None,
        "group_rate_limit_cost": spec.groups.rate_limit_cost if spec.groups else None,
        "group_budget_day": spec.groups.budget.day if spec.groups and spec.groups.budget else None,
        "group_budget_month": (
            spec.groups.budget.month if spec.groups and spec.groups.budget else None
        ),
    }
    return QueueConfig.model_validate(
        {key: value for key, value in fields.items() if value is not None}
    )
