"""What the operator owns in a worker pod, and how `spec.template` refuses a field.

The operator builds the worker container, its ``tmp`` volume, the labels it selects on
and the annotations it changes on running pods; the template may add beside them, never
replace them (`podtemplate` says why each kind of field is refused). A refused field is
declared in the schema with its core/v1 type only so CEL can name it in the message, and
refused again by the validators; the pieces here do both, for the fields the operator
owns and for those `podsecurity` refuses.
"""

from __future__ import annotations

from typing import Any

from taskfleet_operator.modelbase import K8S_OBJECT, JsonDict, cel

#: The container the operator builds; no template container may take its name.
WORKER_CONTAINER = "worker"
#: The operator's own volume (the worker's writable /tmp, its runtime directory).
OPERATOR_VOLUME = "tmp"
#: Where that volume is mounted in the worker; the runtime file lives under it.
OPERATOR_MOUNTS = ("/tmp", "/tmp/taskfleet")

#: Pod labels the operator sets; `taskfleet.dev/queue` is the Deployment's selector.
OPERATOR_LABELS = (
    "taskfleet.dev/queue",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by",
)
#: Pod annotations the operator sets or changes on running pods.
OPERATOR_ANNOTATIONS = (
    "controller.kubernetes.io/pod-deletion-cost",
    "karpenter.sh/do-not-disrupt",
    "cluster-autoscaler.kubernetes.io/safe-to-evict",
    "prometheus.io/scrape",
    "prometheus.io/port",
    "prometheus.io/path",
)
#: Every label and annotation under the project's own prefix is the operator's too.
OPERATOR_PREFIX = "taskfleet.dev/"

#: Worker-container fields the operator owns, and why (the template refuses them).
WORKER_OWNED = {
    "name": "the operator names the worker container 'worker'",
    "image": "set spec.image",
    "imagePullPolicy": "set spec.imagePullPolicy",
    "resources": "set spec.resources (the operator sizes worker processes from it)",
    "command": "the operator runs `taskfleet worker` with the spec's options "
    "(handler, concurrency, ...): set those in the spec",
    "args": "the operator runs `taskfleet worker` with the spec's options "
    "(handler, concurrency, ...): set those in the spec",
    "lifecycle": "the operator's preStop hook runs `taskfleet drain`, so a stopping pod "
    "finishes or releases its tasks",
    "ports": "the operator owns the metrics ports (one per worker process)",
}
#: Pod-spec fields the operator owns, and why.
POD_OWNED = {
    "terminationGracePeriodSeconds": "the operator sets it to the drain deadline plus a "
    "margin, so a stopping pod can finish its tasks: change spec.maxTaskDurationSeconds",
}


#: The schema a refused field is declared with: CEL sees only typed fields, so each gets
#: its core/v1 type (its content kept as given: it is refused whatever it holds).
_STRING: dict[str, Any] = {"type": "string", "maxLength": 4096}
_INTEGER: dict[str, Any] = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
_STRINGS: dict[str, Any] = {"type": "array", "maxItems": 256, "items": _STRING}
_OBJECTS: dict[str, Any] = {"type": "array", "maxItems": 256, "items": K8S_OBJECT}
REFUSED_TYPES: dict[str, dict[str, Any]] = {
    "name": _STRING,
    "image": _STRING,
    "imagePullPolicy": _STRING,
    "command": _STRINGS,
    "args": _STRINGS,
    "ports": _OBJECTS,
    "hostPort": _INTEGER,
    "hostIP": _STRING,
    "terminationGracePeriodSeconds": _INTEGER,
}


def refused_fields(
    owned: dict[str, str], types: dict[str, dict[str, Any]] = REFUSED_TYPES
) -> dict[str, Any]:
    """Schema properties for fields declared only so CEL can refuse them by name."""
    return {
        name: {**types.get(name, K8S_OBJECT), "description": f"Refused: {why}."}
        for name, why in owned.items()
    }


def owned_rules(owned: dict[str, str], where: str) -> list[JsonDict]:
    """The CEL rules that refuse each owned field, saying why."""
    return [
        cel(f"!has(self.{name})", f"{where}.{name} is set by the operator: {why}")
        for name, why in owned.items()
        if why
    ]


def refuse_owned(raw: Any, owned: dict[str, str], where: str) -> None:
    """The validators' side of `owned_rules`, on the raw input."""
    if isinstance(raw, dict):
        for name, why in owned.items():
            if why and name in raw:
                raise ValueError(f"{where}.{name} is set by the operator: {why}")


def owned_schema(owned: dict[str, str], where: str) -> Any:
    """A ``json_schema_extra`` that declares the owned fields and adds their rules."""

    def extra(schema: dict[str, Any]) -> None:
        schema["properties"].update(refused_fields(owned))
        schema.setdefault("x-kubernetes-validations", []).extend(owned_rules(owned, where))

    return extra
