"""The restricted Pod Security Standard, as `spec.template` enforces it.

What a template may say about security contexts, capabilities, seccomp, ports and
volume types, within the restricted profile the worker pods run under: privileged,
privilege escalation, root, added capabilities beyond NET_BIND_SERVICE, host namespaces,
host ports and volume types other than the eight the profile allows are refused, each
with a message naming the profile, as CEL and again in the validators.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, JsonValue, model_validator

from taskfleet_operator.modelbase import NAME_PATTERN, CamelModel, Opaque, cel
from taskfleet_operator.podowned import refused_fields

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

HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
HOST_MESSAGE = "host namespaces are refused (" + RESTRICTED + ")"


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
        refused_fields(dict.fromkeys(("hostPort", "hostIP"), "host ports break " + RESTRICTED))
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
        refused_fields(  # every volume source is an object (an image volume too)
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
