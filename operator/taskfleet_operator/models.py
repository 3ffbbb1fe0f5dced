"""The TaskQueue resource as pydantic v2 models: the single source of the CRD schema.

`crdgen` turns these models into the committed CRD; the handlers read every spec into
`TaskQueueSpec` before acting, so the apiserver and the operator enforce the same rules.
Cross-field rules appear twice on purpose: as CEL (``x-kubernetes-validations``, so
``kubectl apply`` rejects a bad manifest with a message saying what to fix) and as
pydantic validators (so a spec that slipped past an older CRD still fails clearly).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_snake
from taskfleet.protocol import environment
from taskfleet.protocol.defaults import DEFAULT
from taskfleet.protocol.tasknames import PATTERN as TASK_NAME_PATTERN
from taskfleet.protocol.tasknames import task_name_problem

from taskfleet_operator import runtimespec
from taskfleet_operator.limitspec import Budget, GroupLimits, RateLimit, Throttle
from taskfleet_operator.modelbase import (
    ENV_NAME_PATTERN,
    K8S_OBJECT,
    NAME_PATTERN,
    CamelModel,
    Opaque,
    cel,
)
from taskfleet_operator.podtemplate import PodTemplate
from taskfleet_operator.redisspec import RedisRef
from taskfleet_operator.runtimespec import HANDLER_PATTERN, Runtime
from taskfleet_operator.schedulespec import Schedule

GROUP = "taskfleet.dev"
VERSION = "v1alpha1"
KIND = "TaskQueue"
PLURAL = "taskqueues"
SINGULAR = "taskqueue"
SHORT_NAMES = ["tq"]
QUEUE_LABEL = f"{GROUP}/queue"

# What the operator decides for the worker container (its options, its env; the lease TTL
# through the queue's config): a user env entry with one of these names would silently
# fight the operator, so it is refused.
RESERVED_ENV = environment.SET_BY_OPERATOR


AUTOSCALE_ORDER_MESSAGE = "autoscale.minReplicas must be <= autoscale.maxReplicas"


class Autoscale(CamelModel):
    """Worker pods sized from the queue's load, between minReplicas and maxReplicas."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self.minReplicas <= self.maxReplicas", AUTOSCALE_ORDER_MESSAGE),
            ]
        }
    )

    # 1, not 0: at zero the first task waits for a pod to start; that is a choice to make.
    min_replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Fewest worker pods; 0 scales to zero when the queue has had no work for "
        "scaleDownStabilizationSeconds (the first task then waits for a pod to start).",
    )
    max_replicas: int = Field(ge=1, le=1000, description="Most worker pods.")
    target_utilization_percent: int = Field(
        default=100,
        ge=1,
        le=100,
        description="Share of each pod's concurrency slots the load should keep busy; below "
        "100 keeps spare slots for bursts.",
    )
    scale_down_stabilization_seconds: int = Field(
        default=60,
        ge=0,
        le=3600,
        description="How long the fleet must be larger than the load needs before pods are "
        "removed (down to the most the load needed in that time); also how long a queue must "
        "be without work before it scales to zero.",
    )
    # 5 s: about what a pod takes to start with its image cached, and it spans the first
    # retries of the default backoff (1, 2, 4 s), so a failing burst keeps its pods between
    # attempts; a delay minutes away is not paid for in idle pods.
    due_horizon_seconds: int = Field(
        default=5,
        ge=0,
        le=3600,
        description="Delayed tasks (retries, delays) due within this many seconds count as "
        "load, so their pods are starting when they become due.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> Autoscale:
        if self.min_replicas > self.max_replicas:
            raise ValueError(AUTOSCALE_ORDER_MESSAGE)
        return self


class Backoff(CamelModel):
    """Retry delay after a failed attempt: exponential from base, capped at max."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.maxSeconds >= self.baseSeconds",
                    "backoff.maxSeconds must be >= backoff.baseSeconds",
                )
            ]
        }
    )

    base_seconds: float = Field(
        default=DEFAULT.backoff_base_s, ge=0, le=3600, description="First retry delay."
    )
    max_seconds: float = Field(
        default=DEFAULT.backoff_max_s,
        ge=0,
        le=86_400,
        description="Longest retry delay.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> Backoff:
        if self.max_seconds < self.base_seconds:
            raise ValueError("backoff.maxSeconds must be >= backoff.baseSeconds")
        return self


class Heartbeat(CamelModel):
    """Workers beat every interval; a lease not extended within ttl is taken back."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.ttlSeconds >= 2 * self.intervalSeconds",
                    "heartbeat.ttlSeconds must be at least 2x heartbeat.intervalSeconds "
                    "(one missed beat must not lose a lease)",
                )
            ]
        }
    )

    interval_seconds: int = Field(default=5, ge=1, le=300, description="Heartbeat period.")
    # an int here: the CRD has always stored whole seconds
    ttl_seconds: int = Field(
        default=int(DEFAULT.lease_ttl_s),
        ge=2,
        le=3600,
        description="Lease time-to-live.",
    )

    @model_validator(mode="after")
    def _ttl_covers_two_beats(self) -> Heartbeat:
        if self.ttl_seconds < 2 * self.interval_seconds:
            raise ValueError(
                "heartbeat.ttlSeconds must be at least 2x heartbeat.intervalSeconds "
                "(one missed beat must not lose a lease)"
            )
        return self


class Retention(CamelModel):
    """How long finished tasks stay readable before the sweeper prunes them."""

    done_seconds: int = Field(
        default=int(DEFAULT.done_retention_s),
        ge=0,
        le=31_536_000,
        description="Keep done tasks.",
    )
    dead_seconds: int = Field(
        default=int(DEFAULT.dead_retention_s),
        ge=0,
        le=31_536_000,
        description="Keep dead tasks.",
    )


#: Most worker processes per pod (as the worker's --processes allows).
MAX_PROCESSES = 256

QUANTITY_PATTERN = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")


def _quantity(value: int | str) -> int | str:
    if isinstance(value, str) and not QUANTITY_PATTERN.fullmatch(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 256Mi)")
    return value


# An int or a string like the core API's Quantity; the pattern is checked by the operator
# (a CRD pattern would reject the integers people write, like `cpu: 1`).
Quantity = Annotated[
    int | str,
    AfterValidator(_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True}),
]


def cpu_cores(quantity: int | str | None) -> float | None:
    """Cores of a CPU quantity (``2``, ``"1.5"``, ``"1500m"``); None when absent or in a
    form the operator does not size processes from."""
    if quantity is None:
        return None
    text = str(quantity)
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return None


class Resources(CamelModel):
    """Container resources, as in a pod spec."""

    limits: dict[str, Quantity] | None = Field(default=None, max_length=16)
    requests: dict[str, Quantity] | None = Field(default=None, max_length=16)
    claims: list[Annotated[dict[str, Any], Field(json_schema_extra=K8S_OBJECT)]] | None = Field(
        default=None, max_length=16
    )


class EnvVar(CamelModel):
    """A container env entry; `valueFrom` passes through to the Deployment unchanged."""

    name: str = Field(min_length=1, max_length=253, pattern=ENV_NAME_PATTERN)
    value: str | None = Field(default=None, max_length=32_768)
    value_from: Annotated[dict[str, Any] | None, Field(json_schema_extra=K8S_OBJECT)] = None


#: What the CRD and the model say of maxTasksPerChild without process isolation.
ISOLATION_MESSAGE = "maxTasksPerChild needs isolation: process (only child processes are recycled)"


def _reserved_env_rule() -> str:
    names = ", ".join(f"'{name}'" for name in RESERVED_ENV)
    return f"self.env.all(e, !(e.name in [{names}]))"


# spec.template.worker.env comes after spec.env: a name in both, or one the operator sets,
# would leave the pod with two values and the reader guessing which holds.
TEMPLATE_ENV_MESSAGE = (
    "spec.template.worker.env must not repeat a name of spec.env, nor set "
    + ", ".join(RESERVED_ENV)
    + ": the operator sets them"
)


#: Flat fields with a twin in spec.template.spec: one may be set, not both.
TEMPLATE_TWINS = ("nodeSelector", "tolerations", "affinity", "serviceAccountName")


def _twin_message(field: str) -> str:
    return f"set {field} in one place, spec.{field} or spec.template.spec.{field}, not both"


def _twin_rule(field: str) -> str:
    return (
        f"!has(self.{field}) || !has(self.template) || !has(self.template.spec) || "
        f"!has(self.template.spec.{field})"
    )


def _template_env_rule() -> str:
    names = ", ".join(f"'{name}'" for name in RESERVED_ENV)
    return (
        "!has(self.template) || !has(self.template.worker) || "
        "!has(self.template.worker.env) || self.template.worker.env.all(e, "
        f"!(e.name in [{names}]) && (!has(self.env) || !self.env.exists(f, f.name == e.name)))"
    )


class TaskQueueSpec(CamelModel):
    """What the user asks for: a queue, its shared limits, and the workers that serve it."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.schedules) || self.schedules.all(s, "
                    "self.schedules.exists_one(t, t.name == s.name))",
                    "schedule names must be unique",
                    field_path=".schedules",
                ),
                cel(
                    "!has(self.maxTasksPerChild) || "
                    "(has(self.isolation) && self.isolation == 'process')",
                    ISOLATION_MESSAGE,
                    field_path=".maxTasksPerChild",
                ),
                cel(
                    "has(self.handler) || (has(self.handlers) && size(self.handlers) > 0)",
                    "give handler (tasks without a name), handlers (by task name), or both",
                ),
                cel(
                    "!has(self.handlers) || self.handlers.all(k, k.matches('"
                    + TASK_NAME_PATTERN
                    + "'))",
                    "handlers keys are task names: 1-100 letters, digits, '_', '.', '/' or '-', "
                    "starting with a letter or digit",
                    field_path=".handlers",
                ),
                cel(
                    "!has(self.env) || " + _reserved_env_rule(),
                    "env must not set " + ", ".join(RESERVED_ENV) + ": the operator sets them",
                    field_path=".env",
                ),
                cel(_template_env_rule(), TEMPLATE_ENV_MESSAGE, field_path=".template"),
                *(cel(_twin_rule(f), _twin_message(f)) for f in TEMPLATE_TWINS),
                *runtimespec.rules(),
            ]
        }
    )

    image: str = Field(min_length=1, max_length=512, description="Worker image.")
    # No CRD default: a default would be written into every stored TaskQueue, which the
    # previous operator's model (no unknown fields) would then refuse while the CRD is
    # ahead of it (docs/compatibility.md). Unset means python.
    runtime: Runtime | None = Field(
        default=None,
        description="The worker the image carries. python (unset): `taskfleet worker`, "
        "preStop `taskfleet drain`. node: `taskfleet-node worker`, preStop `taskfleet-node "
        "drain` (the npm package taskfleet; handlers are ./file.js:export or package:export, "
        "isolation: process is refused). The same flags, grace period and recovery.",
    )
    handler: str | None = Field(
        default=None,
        max_length=256,
        pattern=HANDLER_PATTERN,
        description="Task handler, found in the image: runs the tasks enqueued without a "
        "name. python: module:function (module:REGISTRY, a dict of names to functions, "
        "serves each of its names instead). node: ./file.js:export or package:export, "
        "resolved from the working directory (an object of functions serves its names).",
    )
    handlers: dict[str, Annotated[str, Field(max_length=256, pattern=HANDLER_PATTERN)]] = Field(
        default_factory=dict,
        max_length=100,
        description="Handlers by task name (enqueue(..., task=NAME)), each as handler is. "
        "A task whose name no handler serves goes dead, reason 'unknown task'.",
    )
    redis: RedisRef
    replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Worker pods (kubectl scale sets it); ignored when autoscale is set.",
    )
    autoscale: Autoscale | None = Field(
        default=None,
        description="Size the fleet from the queue. When set, the operator owns the worker "
        "Deployment's replicas and spec.replicas (what kubectl scale writes) is ignored, with "
        "an event saying so. Pods = ceil((pending + running + delayed due within "
        "dueHorizonSeconds) / (concurrency x targetUtilizationPercent / 100)), at most what "
        "maxConcurrency and rateLimit can keep busy, within [minReplicas, maxReplicas]; "
        "scale-up at once, scale-down after scaleDownStabilizationSeconds.",
    )
    concurrency: int = Field(
        default=4,
        ge=1,
        le=1000,
        description="Tasks run at once per pod, shared among its worker processes (each runs "
        "ceil(concurrency / processes)).",
    )
    processes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_PROCESSES,
        description="Worker processes per pod: a CPU-bound sync handler uses one core per "
        "process. Unset: the whole cores of resources.limits.cpu (at least 1, at most "
        "concurrency).",
    )
    isolation: Literal["thread", "process"] | None = Field(
        default=None,
        description="Where a task runs. thread (unset): on one of the worker's threads; a "
        "sync handler that ignores cancelled() runs on after a cancel, timeout or drain "
        "deadline. process: in a child process per slot, which cancel, timeout, a lost "
        "lease and the drain deadline stop (SIGTERM, then SIGKILL 5 s later), and whose "
        "death (OOM, segfault) fails only that attempt; async handlers run on the child's "
        "own event loop. Costs a pipe round trip per task (bench/README.md).",
    )
    max_tasks_per_child: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="With isolation: process, replace a slot's child process after this many "
        "tasks, so the memory a leaking handler holds goes back. Unset: never.",
    )
    max_concurrency: int = Field(
        default=DEFAULT.max_concurrency,
        ge=0,
        le=1_000_000_000,
        description="Tasks run at once across the fleet; 0 = unlimited.",
    )
    rate_limit: RateLimit | None = None
    budget: Budget | None = None
    # No CRD default, as for runtime: a default object would be written into every stored
    # TaskQueue, which the previous operator's model would refuse. Unset: the config's.
    throttle: Throttle | None = None
    groups: GroupLimits | None = None
    max_task_duration_seconds: int = Field(
        default=300,
        ge=1,
        le=86_400,
        description="A task running longer is cancelled; also the drain deadline on shutdown "
        "(bounded, see terminationGracePeriodSeconds).",
    )
    max_attempts: int = Field(
        default=DEFAULT.max_attempts,
        ge=1,
        le=100,
        description="Attempts before a task goes dead.",
    )
    backoff: Backoff = Backoff()
    heartbeat: Heartbeat = Heartbeat()
    retention: Retention = Retention()
    max_lost: int = Field(
        default=DEFAULT.max_lost,
        ge=1,
        le=100,
        description="Times a task may lose its worker before it goes dead.",
    )
    schedules: list[Schedule] = Field(default_factory=list, max_length=50)
    resources: Resources | None = None
    env: list[EnvVar] = Field(default_factory=list, max_length=100)
    node_selector: dict[str, Annotated[str, Field(max_length=63)]] | None = Field(
        default=None, max_length=64
    )
    tolerations: list[Annotated[dict[str, Any], Field(json_schema_extra=K8S_OBJECT)]] | None = (
        Field(default=None, max_length=64)
    )
    affinity: Annotated[dict[str, Any] | None, Field(json_schema_extra=K8S_OBJECT)] = None
    service_account_name: str | None = Field(default=None, max_length=253, pattern=NAME_PATTERN)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    # --- the pod template and the disruption guard (podtemplate.py, disruption.py)
    template: PodTemplate | None = Field(
        default=None,
        description="A pod template (metadata, spec) merged under the operator's own "
        "fields, and additions to the worker container (worker): pull secrets, volumes "
        "and mounts, envFrom, extra, init and sidecar containers, labels, annotations, "
        "priorityClassName, topologySpreadConstraints, securityContext within restricted "
        "pod security. What the operator owns (the worker's command, args, preStop, "
        "ports, the grace period, its labels and annotations, the container 'worker') is "
        "refused. Changing it rolls the fleet (pods drain). The flat fields (image, env, "
        "resources, nodeSelector, tolerations, affinity, serviceAccountName, "
        "imagePullPolicy) keep their meaning; nodeSelector, tolerations, affinity and "
        "serviceAccountName go flat or in template.spec, not both; template.worker.env "
        "follows spec.env.",
    )
    disruption_guard: bool = Field(
        default=True,
        description="While a worker pod holds a task, annotate it karpenter.sh/"
        'do-not-disrupt: "true" and cluster-autoscaler.kubernetes.io/safe-to-evict: '
        '"false", so node consolidation and the cluster-autoscaler leave its node alone; '
        "removed once the pod is idle. false: never (and removed where present).",
    )
    on_delete: Literal["Retain", "Purge"] = Field(
        default="Retain", description="Purge deletes the queue's Redis data with the TaskQueue."
    )

    @model_validator(mode="after")
    def _isolation_checks(self) -> TaskQueueSpec:
        if self.max_tasks_per_child is not None and self.isolation != "process":
            raise ValueError(ISOLATION_MESSAGE)
        problem = runtimespec.runtime_problem(
            self.runtime, self.handler, self.handlers, self.isolation
        )
        if problem is not None:
            raise ValueError(problem)
        return self

    def worker_processes(self) -> int:
        """Worker processes per pod: ``processes``, else the CPU limit's whole cores."""
        if self.processes is not None:
            return self.processes
        limits = self.resources.limits if self.resources is not None else None
        cores = cpu_cores(limits.get("cpu")) if limits else None
        if cores is None:
            return 1
        return max(1, min(int(cores), self.concurrency, MAX_PROCESSES))

    def process_concurrency(self) -> int:
        """Slots of each worker process (``--concurrency``)."""
        return -(-self.concurrency // self.worker_processes())

    def pod_slots(self) -> int:
        """Tasks one pod runs at once: its processes' slots together."""
        return self.worker_processes() * self.process_concurrency()

    @model_validator(mode="after")
    def _cross_checks(self) -> TaskQueueSpec:
        if self.handler is None and not self.handlers:
            raise ValueError(
                "give handler (tasks without a name), handlers (by task name), or both"
            )
        for task_name in self.handlers:
            problem = task_name_problem(task_name)
            if problem:
                raise ValueError(f"handlers: {problem}")
        names = [s.name for s in self.schedules]
        if len(names) != len(set(names)):
            raise ValueError("schedule names must be unique")
        reserved = sorted({e.name for e in self.env} & set(RESERVED_ENV))
        if reserved:
            raise ValueError(f"env must not set {', '.join(reserved)}: the operator sets them")
        twins = self.template.spec if self.template is not None else None
        for field in TEMPLATE_TWINS if twins is not None else ():
            name = to_snake(field)
            if getattr(self, name) is not None and getattr(twins, name) is not None:
                raise ValueError(_twin_message(field))
        worker = self.template.worker if self.template is not None else None
        if worker is not None and worker.env:
            taken = {e.name for e in self.env} | set(RESERVED_ENV)
            if any(e.name in taken for e in worker.env):
                raise ValueError(TEMPLATE_ENV_MESSAGE)
        return self


class Condition(CamelModel):
    """A Kubernetes-style condition."""

    type: str = Field(max_length=64)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field("", max_length=128)
    message: str = Field("", max_length=1024)
    last_transition_time: str | None = Field(default=None, max_length=64)


class TaskQueueStatus(CamelModel):
    """What the operator observed; every field is optional because it fills in stages."""

    model_config = ConfigDict(extra="ignore")

    replicas: int | None = None
    ready_replicas: int | None = None
    selector: str | None = Field(default=None, max_length=1024)
    pending: int | None = None
    delayed: int | None = None
    running: int | None = None
    dead: int | None = None
    live_pods: int | None = None
    requeued_total: int | None = None
    conditions: list[Condition] = Field(default_factory=list, max_length=16)
    observed_generation: int | None = None
    desired_replicas: int | None = Field(
        default=None, description="Worker pods the operator asks the Deployment for."
    )
    scaling_reason: str | None = Field(
        default=None,
        max_length=1024,
        description="Why desiredReplicas is what it is (the autoscaler's arithmetic, or "
        "spec.replicas).",
    )
    kopf: Opaque | None = Field(
        default=None,
        description="The operator framework's record: the spec last handled (what an update "
        "is compared with) and a handler's progress while it retries.",
    )
