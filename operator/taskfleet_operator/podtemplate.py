"""`spec.template` of a TaskQueue: what a user adds to the worker pods the operator builds.

A pod template (metadata and spec, in core/v1's own words) merged under the operator's
fields by `builders.build_pod_template`, plus ``worker``: additions to the worker
container the operator builds (mounts, envFrom, env, securityContext). Three kinds of
field are refused, each with a message saying which and why, as CEL (``kubectl apply``)
and again in the models' validators (the operator's own reading):

- what the operator owns: the worker's command, args, preStop, ports and image, the grace
  period, the labels it selects on, its annotations, the container named ``worker``;
- what would break the restricted Pod Security Standard: privileged, privilege
  escalation, root, added capabilities beyond NET_BIND_SERVICE, host namespaces, host
  ports, volume types other than the eight it allows;
- anything core/v1 has that the template does not declare (the apiserver refuses an
  unknown field under strict field validation, kubectl's default).

Only three places keep unknown fields (``x-kubernetes-preserve-unknown-fields``), each
where a full core/v1 schema would be thousands of lines the apiserver checks anyway on
the Deployment: a volume's source, an extra container's remaining fields (probes,
lifecycle, workingDir...), and a topology spread constraint. What restricted pod
security depends on (securityContext, ports, volume types) is always declared.

This module holds the template itself (metadata, pod spec); `podcontainers` its
containers and the worker additions, `podsecurity` the restricted profile's pieces,
`podowned` what the operator owns and the refusal machinery they share.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from taskfleet_operator.modelbase import NAME_PATTERN, CamelModel, Opaque, cel
from taskfleet_operator.podcontainers import Container, InitContainer, WorkerAdditions
from taskfleet_operator.podowned import (
    OPERATOR_ANNOTATIONS,
    OPERATOR_LABELS,
    OPERATOR_PREFIX,
    OPERATOR_VOLUME,
    POD_OWNED,
    owned_schema,
    refuse_owned,
)
from taskfleet_operator.podsecurity import (
    HOST_MESSAGE,
    HOST_NAMESPACES,
    RESTRICTED,
    PodSecurity,
    Volume,
)


def _label_rule(field: str, keys: tuple[str, ...]) -> str:
    listed = ", ".join(f"'{key}'" for key in keys)
    return (
        f"!has(self.{field}) || self.{field}.all(k, !(k in [{listed}]) && "
        f"!k.startsWith('{OPERATOR_PREFIX}'))"
    )


LABELS_MESSAGE = (
    "spec.template.metadata.labels must not set "
    + ", ".join(OPERATOR_LABELS)
    + f" or any {OPERATOR_PREFIX} key: the operator sets them (taskfleet.dev/queue "
    "selects the worker pods)"
)
ANNOTATIONS_MESSAGE = (
    "spec.template.metadata.annotations must not set "
    + ", ".join(OPERATOR_ANNOTATIONS)
    + f" or any {OPERATOR_PREFIX} key: the operator sets them (deletion cost and the "
    "disruption guard follow each pod's tasks; spec.disruptionGuard turns the guard off)"
)


class TemplateMetadata(CamelModel):
    """Labels and annotations for every worker pod (cost allocation, mesh opt-out, ...)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(_label_rule("labels", OPERATOR_LABELS), LABELS_MESSAGE),
                cel(_label_rule("annotations", OPERATOR_ANNOTATIONS), ANNOTATIONS_MESSAGE),
            ]
        }
    )

    # Keys are checked by the apiserver on the Deployment (a CRD has no schema for map keys).
    labels: dict[str, Annotated[str, Field(max_length=63)]] | None = Field(
        default=None, max_length=64, description="Pod labels, beside the operator's."
    )
    annotations: dict[str, Annotated[str, Field(max_length=65_536)]] | None = Field(
        default=None, max_length=64, description="Pod annotations, beside the operator's."
    )

    @model_validator(mode="after")
    def _not_the_operators(self) -> TemplateMetadata:
        for keys, owned, message in (
            (self.labels, OPERATOR_LABELS, LABELS_MESSAGE),
            (self.annotations, OPERATOR_ANNOTATIONS, ANNOTATIONS_MESSAGE),
        ):
            if any(k in owned or k.startswith(OPERATOR_PREFIX) for k in keys or {}):
                raise ValueError(message)
        return self


_VOLUME_NAME_MESSAGE = (
    "spec.template.spec.volumes must not be named 'tmp': the operator's volume for the "
    "worker's /tmp has that name"
)


def _pod_spec_schema(schema: dict[str, Any]) -> None:
    owned_schema(POD_OWNED, "spec.template.spec")(schema)
    schema["properties"].update(
        {
            name: {"type": "boolean", "description": "Refused when true (" + RESTRICTED + ")."}
            for name in HOST_NAMESPACES
        }
    )
    schema["x-kubernetes-validations"] += [
        cel(f"!has(self.{name}) || !self.{name}", f"{name}: {HOST_MESSAGE}")
        for name in HOST_NAMESPACES
    ] + [
        cel(
            "!has(self.volumes) || self.volumes.all(v, v.name != 'tmp')",
            _VOLUME_NAME_MESSAGE,
        )
    ]


class LocalRef(CamelModel):
    """An object in the TaskQueue's namespace, by name."""

    name: str = Field(min_length=1, max_length=253, description="Its name.")


class TemplateSpec(CamelModel):
    """Pod-spec fields merged into the worker pod the operator builds."""

    model_config = ConfigDict(json_schema_extra=_pod_spec_schema)

    image_pull_secrets: list[LocalRef] | None = Field(
        default=None, max_length=16, description="Secrets to pull images from a private registry."
    )
    volumes: list[Volume] | None = Field(
        default=None,
        max_length=64,
        description="Volumes, after the operator's 'tmp'; mount them with "
        "spec.template.worker.volumeMounts or in a template container.",
    )
    init_containers: list[InitContainer] | None = Field(
        default=None,
        max_length=16,
        description="Run before the worker starts; restartPolicy: Always makes one a native "
        "sidecar, stopped only after the worker has drained.",
    )
    containers: list[Container] | None = Field(
        default=None,
        max_length=16,
        description="Extra containers beside the worker (not named 'worker'). They get "
        "SIGTERM while the worker drains: a sidecar the worker needs until its last task "
        "belongs in initContainers with restartPolicy: Always.",
    )
    priority_class_name: str | None = Field(
        default=None, max_length=253, description="The pods' PriorityClass."
    )
    topology_spread_constraints: list[Opaque] | None = Field(
        default=None,
        max_length=16,
        description="As in core/v1 (kept as given: the apiserver checks them on the "
        "Deployment); select the queue's pods with the label taskfleet.dev/queue.",
    )
    security_context: PodSecurity | None = Field(
        default=None, description="Changes to the pod's securityContext, within restricted."
    )
    # The flat fields' twins, for a template pasted from a pod spec: one place or the other
    # (TaskQueueSpec refuses both), so nothing is silently overridden.
    node_selector: dict[str, Annotated[str, Field(max_length=63)]] | None = Field(
        default=None, max_length=64, description="As spec.nodeSelector (set one of the two)."
    )
    tolerations: list[Opaque] | None = Field(
        default=None, max_length=64, description="As spec.tolerations (set one of the two)."
    )
    affinity: Opaque | None = Field(
        default=None, description="As spec.affinity (set one of the two)."
    )
    service_account_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=NAME_PATTERN,
        description="As spec.serviceAccountName (set one of the two); its token is mounted.",
    )

    @model_validator(mode="before")
    @classmethod
    def _owned_fields(cls, raw: Any) -> Any:
        refuse_owned(raw, POD_OWNED, "spec.template.spec")
        if isinstance(raw, dict):
            for name in HOST_NAMESPACES:
                if raw.get(name):
                    raise ValueError(f"{name}: {HOST_MESSAGE}")
                raw = {k: v for k, v in raw.items() if k != name}
        return raw

    @model_validator(mode="after")
    def _operator_volume(self) -> TemplateSpec:
        if any(volume.name == OPERATOR_VOLUME for volume in self.volumes or ()):
            raise ValueError(_VOLUME_NAME_MESSAGE)
        return self


_UNDECLARED_MOUNT_MESSAGE = (
    "spec.template.worker.volumeMounts names a volume that spec.template.spec.volumes "
    "does not declare"
)


class PodTemplate(CamelModel):
    """A pod template merged under the operator's own fields (docs/operator.md)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.worker) || !has(self.worker.volumeMounts) || "
                    "self.worker.volumeMounts.all(m, has(self.spec) && has(self.spec.volumes) "
                    "&& self.spec.volumes.exists(v, v.name == m.name))",
                    _UNDECLARED_MOUNT_MESSAGE,
                ),
            ]
        }
    )

    metadata: TemplateMetadata | None = Field(
        default=None, description="Labels and annotations of every worker pod."
    )
    spec: TemplateSpec | None = Field(
        default=None, description="Pod fields: pull secrets, volumes, containers, scheduling."
    )
    worker: WorkerAdditions | None = Field(
        default=None, description="Additions to the worker container: mounts, envFrom, env."
    )

    @model_validator(mode="after")
    def _declared_mounts(self) -> PodTemplate:
        declared = {v.name for v in (self.spec.volumes if self.spec else None) or ()}
        mounts = (self.worker.volume_mounts if self.worker else None) or ()
        if any(mount.name not in declared for mount in mounts):
            raise ValueError(_UNDECLARED_MOUNT_MESSAGE)
        return self
