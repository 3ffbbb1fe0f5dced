"""The containers of `spec.template`: extra and init containers, and the worker additions.

A container's env, envFrom and volume mounts; the extra and init (native sidecar)
containers a template runs beside the worker; and ``template.worker``, what it adds to
the worker container the operator builds (mounts, envFrom, env, securityContext) without
touching what the operator owns there.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from taskfleet_operator.modelbase import (
    ENV_NAME_PATTERN,
    K8S_OBJECT,
    NAME_PATTERN,
    CamelModel,
    Opaque,
    cel,
)
from taskfleet_operator.podowned import (
    OPERATOR_MOUNTS,
    WORKER_CONTAINER,
    WORKER_OWNED,
    owned_schema,
    refuse_owned,
)
from taskfleet_operator.podsecurity import ContainerPort, ContainerSecurity


class EnvVar(CamelModel):
    """A container env entry; `valueFrom` passes through unchanged."""

    name: str = Field(
        min_length=1, max_length=253, pattern=ENV_NAME_PATTERN, description="The variable."
    )
    value: str | None = Field(default=None, max_length=32_768, description="Its value.")
    value_from: Annotated[dict[str, Any] | None, Field(json_schema_extra=K8S_OBJECT)] = Field(
        default=None, description="As in core/v1: secretKeyRef, configMapKeyRef, fieldRef..."
    )


class NamedRef(CamelModel):
    """A ConfigMap or Secret in the TaskQueue's namespace, by name."""

    name: str = Field(min_length=1, max_length=253, description="Its name.")
    optional: bool | None = Field(default=None, description="Start the pod when it is missing.")


class EnvFromSource(CamelModel):
    """Every key of a ConfigMap or Secret as env variables (secrets by reference only)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "has(self.configMapRef) != has(self.secretRef)",
                    "envFrom entries name exactly one of configMapRef or secretRef",
                )
            ]
        }
    )

    config_map_ref: NamedRef | None = Field(default=None, description="A ConfigMap.")
    secret_ref: NamedRef | None = Field(default=None, description="A Secret.")
    prefix: str | None = Field(
        default=None, max_length=253, description="Prepended to every variable name."
    )

    @model_validator(mode="after")
    def _one_source(self) -> EnvFromSource:
        if (self.config_map_ref is None) == (self.secret_ref is None):
            raise ValueError("envFrom entries name exactly one of configMapRef or secretRef")
        return self


class VolumeMount(CamelModel):
    """A volume of the template mounted into a container."""

    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN, description="Volume.")
    mount_path: str = Field(min_length=1, max_length=1024, description="Where, in the container.")
    read_only: bool | None = Field(default=None, description="Mount read-only.")
    sub_path: str | None = Field(default=None, max_length=1024, description="A path inside it.")
    sub_path_expr: str | None = Field(
        default=None, max_length=1024, description="subPath with $(VAR) expansion."
    )


_WORKER_NAME_MESSAGE = (
    "a template container may not be named 'worker': the operator builds that container "
    "(put additions to it in spec.template.worker)"
)


class Container(CamelModel):
    """An extra container (a log shipper, a proxy), beside the worker.

    Declared: what pod security and the operator's merge depend on. The rest of core/v1's
    Container (probes, lifecycle, workingDir, imagePullPolicy, ...) is kept as given
    (x-kubernetes-preserve-unknown-fields): the apiserver validates it on the Deployment,
    and none of it can weaken restricted pod security. The operator gives every template
    container allowPrivilegeEscalation: false and drops every capability, as restricted
    pod security requires, unless its securityContext says otherwise within the profile.
    """

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "x-kubernetes-validations": [cel("self.name != 'worker'", _WORKER_NAME_MESSAGE)]
        },
    )

    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN, description="Its name.")
    image: str = Field(min_length=1, max_length=512, description="Its image.")
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=256, description="Entrypoint (exec form)."
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=256, description="Arguments."
    )
    env: list[EnvVar] | None = Field(default=None, max_length=100, description="Env variables.")
    env_from: list[EnvFromSource] | None = Field(
        default=None, max_length=16, description="ConfigMaps and Secrets as env."
    )
    volume_mounts: list[VolumeMount] | None = Field(
        default=None, max_length=64, description="Template volumes (or 'tmp') mounted here."
    )
    ports: list[ContainerPort] | None = Field(default=None, max_length=16, description="Ports.")
    resources: Opaque | None = Field(default=None, description="Requests and limits.")
    security_context: ContainerSecurity | None = Field(
        default=None, description="Within restricted pod security."
    )

    @model_validator(mode="after")
    def _not_worker(self) -> Container:
        if self.name == WORKER_CONTAINER:
            raise ValueError(_WORKER_NAME_MESSAGE)
        return self


class InitContainer(Container):
    """A container run before the worker; with restartPolicy: Always, a native sidecar
    that runs beside the worker for the pod's whole life and is stopped only after the
    worker has drained (so a proxy the worker needs outlives the drain)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "x-kubernetes-validations": [cel("self.name != 'worker'", _WORKER_NAME_MESSAGE)]
        },
    )

    restart_policy: Literal["Always"] | None = Field(
        default=None,
        description="Always: a native sidecar (Kubernetes 1.29+), running beside the worker.",
    )


_WORKER_MOUNT_RULE = (
    "!has(self.volumeMounts) || self.volumeMounts.all(m, "
    + " && ".join(f"m.mountPath != '{path}'" for path in OPERATOR_MOUNTS)
    + " && !m.mountPath.startsWith('/tmp/taskfleet/'))"
)
_WORKER_MOUNT_MESSAGE = (
    "spec.template.worker.volumeMounts must not mount at /tmp or /tmp/taskfleet: the "
    "operator mounts the worker's writable /tmp there (its runtime file for `taskfleet drain`)"
)


def _worker_schema(schema: dict[str, Any]) -> None:
    owned_schema(WORKER_OWNED, "spec.template.worker")(schema)
    schema["x-kubernetes-validations"].append(cel(_WORKER_MOUNT_RULE, _WORKER_MOUNT_MESSAGE))


class WorkerAdditions(CamelModel):
    """What the template adds to the worker container the operator builds."""

    model_config = ConfigDict(json_schema_extra=_worker_schema)

    volume_mounts: list[VolumeMount] | None = Field(
        default=None,
        max_length=64,
        description="Template volumes mounted into the worker (after the operator's /tmp).",
    )
    env_from: list[EnvFromSource] | None = Field(
        default=None,
        max_length=16,
        description="ConfigMaps and Secrets as env; the operator's own variables and "
        "spec.env win over them, as explicit env wins over envFrom in Kubernetes.",
    )
    env: list[EnvVar] | None = Field(
        default=None,
        max_length=100,
        description="More env variables, after spec.env; a name may not repeat one of "
        "spec.env or one the operator sets.",
    )
    security_context: ContainerSecurity | None = Field(
        default=None,
        description="Changes to the worker's securityContext within restricted pod "
        "security (another non-root runAsUser for an image of your own, a writable root "
        "filesystem, NET_BIND_SERVICE).",
    )

    @model_validator(mode="before")
    @classmethod
    def _owned_fields(cls, raw: Any) -> Any:
        refuse_owned(raw, WORKER_OWNED, "spec.template.worker")
        return raw

    @model_validator(mode="after")
    def _mounts(self) -> WorkerAdditions:
        for mount in self.volume_mounts or ():
            path = mount.mount_path.rstrip("/") or "/"
            if path in OPERATOR_MOUNTS or path.startswith("/tmp/taskfleet/"):
                raise ValueError(_WORKER_MOUNT_MESSAGE)
        return self
