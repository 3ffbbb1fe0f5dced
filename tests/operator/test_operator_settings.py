"""Operator settings from the environment, kopf settings, and the entry point."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import kopf
import pytest
from taskfleet_operator import __main__ as entry
from taskfleet_operator.settings import (
    FINALIZER,
    LEGACY_DIFF_BASE,
    LeanDiffBaseStorage,
    OperatorSettings,
    SettingsError,
    configure_kopf,
    exact_names,
    watched_namespaces,
)


def test_defaults_apply_when_the_environment_is_silent() -> None:
    settings = OperatorSettings.from_env({})

    assert settings == OperatorSettings(
        sweep_interval_s=2.0,
        idle_sweep_interval_s=60.0,
        demand_poll_interval_s=1.0,
        redis_timeout_s=2.0,
    )


def test_environment_overrides_are_read() -> None:
    settings = OperatorSettings.from_env(
        {
            "TASKFLEET_SWEEP_INTERVAL": "0.5",
            "TASKFLEET_IDLE_SWEEP_INTERVAL": "120",
            "TASKFLEET_DEMAND_POLL_INTERVAL": "0.25",
            "TASKFLEET_REDIS_TIMEOUT": "1",
        }
    )

    assert settings.sweep_interval_s == 0.5
    assert settings.idle_sweep_interval_s == 120.0
    assert settings.demand_poll_interval_s == 0.25
    assert settings.redis_timeout_s == 1.0


def test_the_collectors_refreeze_runs_every_five_minutes_unless_set_otherwise_or_off() -> None:
    assert OperatorSettings.from_env({}).gc_refreeze_interval_s == 300.0
    read = OperatorSettings.from_env({"TASKFLEET_GC_REFREEZE_INTERVAL": "60"})
    assert read.gc_refreeze_interval_s == 60.0
    off = OperatorSettings.from_env({"TASKFLEET_GC_REFREEZE_INTERVAL": "0"})
    assert off.gc_refreeze_interval_s == 0.0
    with pytest.raises(SettingsError, match=r"TASKFLEET_GC_REFREEZE_INTERVAL=.*must be between"):
        OperatorSettings.from_env({"TASKFLEET_GC_REFREEZE_INTERVAL": "-5"})


@pytest.mark.parametrize(
    ("value", "message"),
    [("fast", "is not a number"), ("0", "must be between"), ("-1", "must be between")],
)
def test_a_bad_value_gets_one_clear_error_naming_the_variable(value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=f"TASKFLEET_SWEEP_INTERVAL=.*{message}"):
        OperatorSettings.from_env({"TASKFLEET_SWEEP_INTERVAL": value})


def test_kopf_runs_standalone_with_the_project_finalizer_and_annotation_storage() -> None:
    settings = kopf.OperatorSettings()

    configure_kopf(settings)

    assert settings.persistence.finalizer == FINALIZER == "taskfleet.dev/finalizer"
    assert settings.peering.standalone is True
    assert isinstance(settings.persistence.progress_storage, kopf.StatusProgressStorage)
    assert isinstance(settings.persistence.diffbase_storage, kopf.StatusDiffBaseStorage)
    assert (settings.watching.server_timeout, settings.watching.client_timeout) == (300, 330)


def test_watched_namespaces_come_from_flags_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKFLEET_WATCH_NAMESPACES", "team-a, team-b")

    assert entry.parse_args([]).namespace == ["team-a", "team-b"]
    assert entry.parse_args(["-n", "only"]).namespace == ["only"]
    assert entry.parse_args(["-n", "a,b", "-n", "c"]).namespace == ["a", "b", "c"]
    monkeypatch.delenv("TASKFLEET_WATCH_NAMESPACES")
    assert entry.parse_args([]).namespace == []
    assert entry.parse_args([]).liveness == "http://0.0.0.0:8080/healthz"


def test_the_module_entry_point_runs_and_explains_itself() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "taskfleet_operator", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0
    assert "--liveness" in result.stdout


def test_routine_success_lines_are_filtered_and_everything_else_kept() -> None:
    quiet = entry._QuietRoutine()

    def passes(message: str) -> bool:
        record = logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, message, (), None)
        return quiet.filter(record)

    assert not passes("Handler 'track_taskqueue' succeeded.")  # each TaskQueue event
    assert not passes("Daemon 'sweep_while_leading' succeeded.")  # at each pause
    assert not passes("Handler 'worker_pod_event' succeeded.")
    assert not passes("Handler 'worker_deployment_event' succeeded.")
    assert not passes("Handler '_peering_event' succeeded.")
    assert not passes("Timer 'refresh_providerquota' succeeded.")  # each quota, every 15 s
    assert passes("Handler 'reconcile_taskqueue' succeeded.")
    assert passes("Handler 'apply_providerquota' succeeded.")
    assert passes("requeued 3 tasks of pod emails-abc")


@pytest.mark.parametrize(
    ("namespaces", "exact"),
    [
        (["media", "billing"], True),
        (["team-*"], False),
        (["media", "!kube-system"], False),
        (["q?"], False),
        (["[ab]-jobs"], False),
    ],
)
def test_only_exact_namespace_names_let_the_operator_skip_listing_namespaces(
    namespaces: list[str], exact: bool
) -> None:
    settings = kopf.OperatorSettings()

    configure_kopf(settings, namespaces)

    assert exact_names(namespaces) is exact
    assert settings.scanning.disabled is exact  # a pattern needs the namespace watch


def test_the_watched_namespaces_come_from_one_variable() -> None:
    env = {"TASKFLEET_WATCH_NAMESPACES": " media, ,billing "}
    assert watched_namespaces(env) == ["media", "billing"]
    assert watched_namespaces({}) == []


def test_the_lean_diff_base_is_kopfs_essence_without_copying_what_it_drops() -> None:
    raw: dict[str, Any] = {
        "apiVersion": "taskfleet.dev/v1alpha1",
        "kind": "TaskQueue",
        "metadata": {
            "name": "emails",
            "namespace": "media",
            "uid": "u-1",
            "resourceVersion": "42",
            "generation": 3,
            "finalizers": ["taskfleet.dev/finalizer"],
            "labels": {"team": "media"},
            "annotations": {
                "note": "kept",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "taskfleet.dev/last-handled-configuration": '{"spec":{"replicas":1}}\n',
            },
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
        },
        "spec": {"replicas": 2, "redis": {"url": "redis://r:6379/0"}},
        "status": {"observedGeneration": 2, "conditions": [{"type": "Ready"}]},
    }
    lean = LeanDiffBaseStorage()
    kopfs = kopf.StatusDiffBaseStorage(name="kopf")
    legacy = kopf.AnnotationsDiffBaseStorage(
        prefix="taskfleet.dev", key="last-handled-configuration"
    )
    for extra in ([], ["status.observedGeneration"]):
        built = lean.build(body=kopf.Body(raw), extra_fields=extra)
        # The same essence kopf's storages build (the annotation's own leaves itself out).
        assert built == legacy.build(body=kopf.Body(raw), extra_fields=extra)
    assert lean.build(body=kopf.Body(raw)) == {
        "metadata": {"labels": {"team": "media"}, "annotations": {"note": "kept"}},
        "spec": {"replicas": 2, "redis": {"url": "redis://r:6379/0"}},
    }
    without_legacy = {**raw, "metadata": {**raw["metadata"], "annotations": {"note": "kept"}}}
    assert lean.build(body=kopf.Body(without_legacy)) == kopfs.build(body=kopf.Body(without_legacy))


def test_the_diff_base_is_read_from_the_status_and_from_the_annotation_before_it() -> None:
    lean = LeanDiffBaseStorage()
    essence = {"spec": {"replicas": 2}}
    patch = kopf.Patch()
    lean.store(body=kopf.Body({}), patch=patch, essence=kopf.BodyEssence(essence))  # type: ignore[typeddict-item]
    assert set(patch) == {"status"}  # one patch of the status subresource, nothing else
    stored = {"metadata": {}, "status": dict(patch["status"])}
    assert lean.fetch(body=kopf.Body(stored)) == essence
    before = {"metadata": {"annotations": {LEGACY_DIFF_BASE: '{"spec":{"replicas":1}}\n'}}}
    assert lean.fetch(body=kopf.Body(before)) == {"spec": {"replicas": 1}}
    assert lean.fetch(body=kopf.Body({"metadata": {}})) is None


def test_other_kinds_have_an_empty_essence_without_a_copy() -> None:
    deployment = {"kind": "Deployment", "metadata": {"name": "emails"}, "spec": {"replicas": 1}}
    assert LeanDiffBaseStorage().build(body=kopf.Body(deployment)) == {}
