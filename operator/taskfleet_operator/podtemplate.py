"""`spec.template` of a TaskQueue: what a user adds to the worker pods the operator builds.

A pod template (metadata and spec, in core/v1's own words) merged under the operator's
fields by `builders.build_pod_template`, plus ``worker``: additions to the worker
container the operator builds (mounts, envFrom, env, securityContext). Three kinds of
field are refused, each with a message saying which and why, as CEL (``kubectl apply``)
and again in the validators here (the operator's own reading):

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
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, JsonValue, model_validator

from taskfleet_operator.modelbase import CamelModel, JsonDict, cel

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

#: The volume types the restricted Pod Security Standard allows.
RESTRICTED_VOLUME_SOURCES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
#: Every other core/v1 volume source: declared only to be refused with a clear message.
REFUSED_VOLUME_SOURCES = (
    "hostPath",
    "nfs",
    "iscsi",
    "rbd",
    "cephfs",
    "glusterfs",
    "gitRepo",
    "flexVolume",
    "image",
    "awsElasticBlockStore",
    "gcePersistentDisk",
    "azureDisk",
    "azureFile",
    "cinder",
    "fc",
    "flocker",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "scaleIO",
    "storageos",
    "vsphereVolume",
)
RESTRICTED = "the restricted Pod Security Standard"
VOLUME_SOURCE_MESSAGE = (
    "is not allowed: " + RESTRICTED + " allows only " + ", ".join(RESTRICTED_VOLUME_SOURCES)
)
#: The one capability restricted pod security lets a container add.
ADDABLE_CAPABILITIES = ("NET_BIND_SERVICE",)

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

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# Kept as opaque objects: see the module docstring for where and why.
K8S_OBJECT: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
Opaque = Annotated[dict[str, Any], Field(json_schema_extra=K8S_OBJECT)]


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


def _refused_fields(
    owned: dict[str, str], types: dict[str, dict[str, Any]] = REFUSED_TYPES
) -> dict[str, Any]:
    """Schema properties for fields declared only so CEL can refuse them by name."""
    return {
        name: {**types.get(name, K8S_OBJECT), "description": f"Refused: {why}."}
        for name, why in owned.items()
    }


def _owned_rules(owned: dict[str, str], where: str) -> list[JsonDict]:
    return [
        cel(f"!has(self.{name})", f"{where}.{name} is set by the operator: {why}")
        for name, why in owned.items()
        if why
    ]


def _refuse_owned(raw: Any, owned: dict[str, str], where: str) -> None:
    if isinstance(raw, dict):
        for name, why in owned.items():
            if why and name in raw:
                raise ValueError(f"{where}.{name} is set by the operator: {why}")


# ----------------------------------------------------------------------------- pieces


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


class LocalRef(CamelModel):
    """An object in the TaskQueue's namespace, by name."""

    name: str = Field(min_length=1, max_length=253, description="Its name.")


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


class SeccompProfile(CamelModel):
    """RuntimeDefault or Localhost: restricted pod security refuses Unconfined."""

    type: Literal["RuntimeDefault", "Localhost"] = Field(description="The profile's kind.")
    localhost_profile: str | None = Field(
        default=None, max_length=1024, description="The node's profile file, for Localhost."
    )


class Capabilities(CamelModel):
    """Capabilities: every one is dropped; only NET_BIND_SERVICE may be added back."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.add) || self.add.all(c, c == 'NET_BIND_SERVICE')",
                    "capabilities.add may hold only NET_BIND_SERVICE (" + RESTRICTED + ")",
                )
            ]
        }
    )

    add: list[Annotated[str, Field(max_length=64)]] | None = Field(
        default=None, max_length=8, description="Only NET_BIND_SERVICE."
    )
    drop: list[Annotated[str, Field(max_length=64)]] | None = Field(
        default=None, max_length=64, description="Added to the ALL the operator drops."
    )

    @model_validator(mode="after")
    def _restricted(self) -> Capabilities:
        extra = sorted(set(self.add or ()) - set(ADDABLE_CAPABILITIES))
        if extra:
            raise ValueError(
                f"capabilities.add may hold only NET_BIND_SERVICE ({RESTRICTED}), not "
                + ", ".join(extra)
            )
        return self


_ROOT_MESSAGE = "runAsUser 0 (root) is refused (" + RESTRICTED + ")"
_NON_ROOT_MESSAGE = "runAsNonRoot must stay true (" + RESTRICTED + ")"


def _common_security_rules() -> list[JsonValue]:
    return [
        cel("!has(self.runAsUser) || self.runAsUser != 0", _ROOT_MESSAGE),
        cel("!has(self.runAsNonRoot) || self.runAsNonRoot", _NON_ROOT_MESSAGE),
    ]


class ContainerSecurity(CamelModel):
    """Additions to a container's securityContext, within restricted pod security: the
    operator's settings (non-root, no privilege escalation, every capability dropped,
    RuntimeDefault seccomp) stay unless a field here replaces them with a value that
    keeps the profile."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *_common_security_rules(),
                cel(
                    "!has(self.privileged) || !self.privileged",
                    "privileged containers are refused (" + RESTRICTED + ")",
                ),
                cel(
                    "!has(self.allowPrivilegeEscalation) || !self.allowPrivilegeEscalation",
                    "allowPrivilegeEscalation must stay false (" + RESTRICTED + ")",
                ),
            ]
        }
    )

    run_as_user: int | None = Field(
        default=None, ge=0, le=2_147_483_647, description="A UID other than 0."
    )
    run_as_group: int | None = Field(default=None, ge=0, le=2_147_483_647, description="A GID.")
    run_as_non_root: bool | None = Field(default=None, description="Must stay true.")
    read_only_root_filesystem: bool | None = Field(
        default=None, description="The worker's is true; false lets the image write anywhere."
    )
    allow_privilege_escalation: bool | None = Field(default=None, description="Must be false.")
    privileged: bool | None = Field(default=None, description="Must be false.")
    capabilities: Capabilities | None = None
    seccomp_profile: SeccompProfile | None = None

    @model_validator(mode="after")
    def _restricted(self) -> ContainerSecurity:
        if self.run_as_user == 0:
            raise ValueError(_ROOT_MESSAGE)
        if self.run_as_non_root is False:
            raise ValueError(_NON_ROOT_MESSAGE)
        if self.privileged:
            raise ValueError(f"privileged containers are refused ({RESTRICTED})")
        if self.allow_privilege_escalation:
            raise ValueError(f"allowPrivilegeEscalation must stay false ({RESTRICTED})")
        return self


class PodSecurity(CamelModel):
    """Additions to the pod's securityContext, within restricted pod security."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": _common_security_rules()}
    )

    run_as_user: int | None = Field(
        default=None, ge=0, le=2_147_483_647, description="A UID other than 0."
    )
    run_as_group: int | None = Field(default=None, ge=0, le=2_147_483_647, description="A GID.")
    run_as_non_root: bool | None = Field(default=None, description="Must stay true.")
    fs_group: int | None = Field(
        default=None, ge=0, le=2_147_483_647, description="Group of mounted volumes' files."
    )
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = Field(
        default=None, description="When volumes' ownership is changed to fsGroup."
    )
    supplemental_groups: list[Annotated[int, Field(ge=0, le=2_147_483_647)]] | None = Field(
        default=None, max_length=32, description="More groups for every container's processes."
    )
    seccomp_profile: SeccompProfile | None = None

    @model_validator(mode="after")
    def _restricted(self) -> PodSecurity:
        if self.run_as_user == 0:
            raise ValueError(_ROOT_MESSAGE)
        if self.run_as_non_root is False:
            raise ValueError(_NON_ROOT_MESSAGE)
        return self


_HOST_PORT_MESSAGE = "ports must not use hostPort or hostIP (" + RESTRICTED + ")"
_METRICS_PORT_MESSAGE = (
    "port names starting with 'metrics' are the worker's (the PodMonitor selects them): "
    "pick another name"
)


def _port_schema(schema: dict[str, Any]) -> None:
    schema["properties"].update(
        _refused_fields(dict.fromkeys(("hostPort", "hostIP"), "host ports break " + RESTRICTED))
    )
    schema["x-kubernetes-validations"] = [
        cel("!has(self.hostPort) && !has(self.hostIP)", _HOST_PORT_MESSAGE),
        cel("!has(self.name) || !self.name.startsWith('metrics')", _METRICS_PORT_MESSAGE),
    ]


class ContainerPort(CamelModel):
    """A port a template container listens on; host ports are refused."""

    model_config = ConfigDict(json_schema_extra=_port_schema)

    name: str | None = Field(default=None, max_length=15, description="Its name.")
    container_port: int = Field(ge=1, le=65535, description="The port.")
    protocol: Literal["TCP", "UDP", "SCTP"] | None = Field(default=None, description="TCP.")

    @model_validator(mode="before")
    @classmethod
    def _no_host(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and ({"hostPort", "hostIP"} & set(raw)):
            raise ValueError(_HOST_PORT_MESSAGE)
        return raw

    @model_validator(mode="after")
    def _not_metrics(self) -> ContainerPort:
        if self.name is not None and self.name.startswith("metrics"):
            raise ValueError(_METRICS_PORT_MESSAGE)
        return self


def _volume_schema(schema: dict[str, Any]) -> None:
    schema["properties"].update(
        _refused_fields(  # every volume source is an object (an image volume too)
            dict.fromkeys(REFUSED_VOLUME_SOURCES, "not a volume type " + RESTRICTED + " allows"),
            types={},
        )
    )
    schema["x-kubernetes-validations"] = [
        cel(f"!has(self.{source})", f"volumes: {source} {VOLUME_SOURCE_MESSAGE}")
        for source in REFUSED_VOLUME_SOURCES
    ] + [
        cel(
            "[" + ", ".join(f"has(self.{s})" for s in RESTRICTED_VOLUME_SOURCES) + "]"
            ".exists_one(x, x)",
            "each volume names exactly one source: one of " + ", ".join(RESTRICTED_VOLUME_SOURCES),
        )
    ]


class Volume(CamelModel):
    """A pod volume of a type restricted pod security allows.

    Each source is kept as given (x-kubernetes-preserve-unknown-fields): the core/v1
    schemas of eight volume types would add thousands of lines to the CRD, and the
    apiserver checks them on the Deployment; which *type* of volume it is, the part pod
    security is about, is declared here and checked.
    """

    model_config = ConfigDict(json_schema_extra=_volume_schema)

    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN, description="Its name.")
    config_map: Opaque | None = Field(default=None, description="A ConfigMap's keys as files.")
    csi: Opaque | None = Field(default=None, description="An inline CSI volume.")
    downward_api: Opaque | None = Field(
        default=None, alias="downwardAPI", description="Pod fields as files."
    )
    empty_dir: Opaque | None = Field(default=None, description="Scratch space for the pod.")
    ephemeral: Opaque | None = Field(default=None, description="A PVC made for the pod.")
    persistent_volume_claim: Opaque | None = Field(default=None, description="A PVC by name.")
    projected: Opaque | None = Field(
        default=None, description="Several sources (Secrets, ConfigMaps, tokens) as one volume."
    )
    secret: Opaque | None = Field(default=None, description="A Secret's keys as files.")

    @model_validator(mode="before")
    @classmethod
    def _restricted(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            for source in REFUSED_VOLUME_SOURCES:
                if source in raw:
                    raise ValueError(f"volumes: {source} {VOLUME_SOURCE_MESSAGE}")
        return raw

    @model_validator(mode="after")
    def _one_source(self) -> Volume:
        given = [s for s in RESTRICTED_VOLUME_SOURCES if _field(self, s) is not None]
        if len(given) != 1:
            raise ValueError(
                "each volume names exactly one source: one of "
                + ", ".join(RESTRICTED_VOLUME_SOURCES)
            )
        return self


def _field(model: CamelModel, alias: str) -> Any:
    for name, info in type(model).model_fields.items():
        if (info.alias or name) == alias:
            return getattr(model, name)
    raise KeyError(alias)


# ----------------------------------------------------------------------------- containers

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


# ----------------------------------------------------------------------------- template


def _owned(owned: dict[str, str], where: str) -> Any:
    def extra(schema: dict[str, Any]) -> None:
        schema["properties"].update(_refused_fields(owned))
        schema.setdefault("x-kubernetes-validations", []).extend(_owned_rules(owned, where))

    return extra


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
    _owned(WORKER_OWNED, "spec.template.worker")(schema)
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
        _refuse_owned(raw, WORKER_OWNED, "spec.template.worker")
        return raw

    @model_validator(mode="after")
    def _mounts(self) -> WorkerAdditions:
        for mount in self.volume_mounts or ():
            path = mount.mount_path.rstrip("/") or "/"
            if path in OPERATOR_MOUNTS or path.startswith("/tmp/taskfleet/"):
                raise ValueError(_WORKER_MOUNT_MESSAGE)
        return self


HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
_HOST_MESSAGE = "host namespaces are refused (" + RESTRICTED + ")"
_VOLUME_NAME_MESSAGE = (
    "spec.template.spec.volumes must not be named 'tmp': the operator's volume for the "
    "worker's /tmp has that name"
)


def _pod_spec_schema(schema: dict[str, Any]) -> None:
    _owned(POD_OWNED, "spec.template.spec")(schema)
    schema["properties"].update(
        {
            name: {"type": "boolean", "description": "Refused when true (" + RESTRICTED + ")."}
            for name in HOST_NAMESPACES
        }
    )
    schema["x-kubernetes-validations"] += [
        cel(f"!has(self.{name}) || !self.{name}", f"{name}: {_HOST_MESSAGE}")
        for name in HOST_NAMESPACES
    ] + [
        cel(
            "!has(self.volumes) || self.volumes.all(v, v.name != 'tmp')",
            _VOLUME_NAME_MESSAGE,
        )
    ]


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
        _refuse_owned(raw, POD_OWNED, "spec.template.spec")
        if isinstance(raw, dict):
            for name in HOST_NAMESPACES:
                if raw.get(name):
                    raise ValueError(f"{name}: {_HOST_MESSAGE}")
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
